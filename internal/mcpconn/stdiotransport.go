package mcpconn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stdioTransport is go-sdk's CommandTransport (start the command, speak
// newline-delimited JSON-RPC over its stdin and stdout, and stop it by
// closing stdin, then SIGTERM, then SIGKILL, each after stop) that also
// keeps the first bytes the server printed. A program that is not an MCP
// server speaking stdio (a script that prints a banner, a CLI that prints
// its help) is then named as such, with what it printed, instead of
// "invalid character 'b' looking for beginning of value".
type stdioTransport struct {
	cmd  *exec.Cmd
	stop time.Duration
	head headBuffer
}

// Connect implements mcp.Transport.
func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := t.cmd.Start(); err != nil {
		return nil, err
	}
	// The connection is closed by closing stdin, not stdout.
	r := io.NopCloser(io.TeeReader(stdout, &t.head))
	return (&mcp.IOTransport{Reader: r, Writer: &stdinCloser{cmd: t.cmd, stdin: stdin, stop: t.stop}}).Connect(ctx)
}

// notJSONRPC returns the error for a connect that failed on output that
// is not JSON-RPC, naming the command (as configured) and the first line
// it printed; nil when err is not that.
func (t *stdioTransport) notJSONRPC(name string, cfg Config, err error) error {
	// Told by what the server printed, not by the error's text: JSON-RPC
	// over stdio is one JSON object per line, so output that does not
	// start with "{", or whose first whole line is not JSON, is not it.
	// (The head is the first headMax bytes: a long first line is judged
	// by its start.)
	head := strings.TrimLeft(t.head.String(), " \t\r\n")
	line, _, whole := strings.Cut(head, "\n")
	if err == nil || head == "" || strings.HasPrefix(line, "{") && (!whole || json.Valid([]byte(line))) {
		return nil
	}
	cmd := strings.Join(append([]string{cfg.Command}, cfg.Args...), " ")
	return fmt.Errorf("MCP server %q: its command (%s) printed %q on standard output, which is not MCP JSON-RPC; "+
		"is it an MCP server that speaks stdio? (such a server writes only JSON-RPC there, and its logs to standard error)",
		name, cmd, strings.TrimSpace(line))
}

// stdinCloser is the write side of a stdio server's connection: its
// Close stops the server the way go-sdk's CommandTransport does.
type stdinCloser struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	stop  time.Duration
}

func (s *stdinCloser) Write(p []byte) (int, error) { return s.stdin.Write(p) }

// Close closes the server's stdin, waits up to stop for it to exit, then
// sends SIGTERM and waits again, then SIGKILL.
func (s *stdinCloser) Close() error {
	if err := s.stdin.Close(); err != nil {
		return fmt.Errorf("closing stdin: %v", err)
	}
	stop := s.stop
	if stop <= 0 {
		stop = DefaultStopGrace
	}
	res := make(chan error, 1)
	go func() { res <- s.cmd.Wait() }() // lifetime: the server's process; res is buffered
	wait := func() (error, bool) {
		t := time.NewTimer(stop)
		defer t.Stop()
		select {
		case err := <-res:
			return err, true
		case <-t.C:
			return nil, false
		}
	}
	if err, ok := wait(); ok {
		return err
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err == nil {
		if err, ok := wait(); ok {
			return err
		}
	}
	if err := s.cmd.Process.Kill(); err != nil {
		return err
	}
	if err, ok := wait(); ok {
		return err
	}
	return errors.New("unresponsive subprocess")
}

// headBuffer keeps the first headMax bytes written to it.
type headBuffer struct {
	mu sync.Mutex
	b  []byte
}

const headMax = 256

func (h *headBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := headMax - len(h.b); n > 0 {
		h.b = append(h.b, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

func (h *headBuffer) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.b)
}
