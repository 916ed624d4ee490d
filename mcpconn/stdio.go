package mcpconn

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os/exec"
	"sync"
)

// baseEnvVars are the host variables a stdio server inherits. Everything
// else it gets comes from its config's env.
var baseEnvVars = []string{"PATH", "HOME", "LANG", "USER", "SHELL", "TERM"}

// defaultPath is PATH for a stdio server when the host has none.
const defaultPath = "/usr/local/bin:/usr/bin:/bin"

// stdioEnv builds a stdio server's environment: the base variables from the
// host, then the config's env on top.
func (m *Manager) stdioEnv(cfgEnv map[string]string) []string {
	env := map[string]string{}
	for _, k := range baseEnvVars {
		if v, ok := m.opts.LookupEnv(k); ok {
			env[k] = v
		}
	}
	if _, ok := env["PATH"]; !ok {
		env["PATH"] = defaultPath
	}
	maps.Copy(env, cfgEnv)
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// stdioCommand builds the command of a stdio server from its expanded
// config, passing it through Options.StdioCommand.
func (m *Manager) stdioCommand(ctx context.Context, name string, cfg Config, stderr *lineLogger) (*exec.Cmd, error) {
	cmd := exec.Command(cfg.Command, cfg.Args...)
	cmd.Env = m.stdioEnv(cfg.Env)
	cmd.Dir = cfg.Cwd
	cmd.Stderr = stderr
	// A grandchild that keeps stderr open must not hold Wait forever.
	cmd.WaitDelay = m.opts.StopGrace
	if m.opts.StdioCommand != nil {
		c, err := m.opts.StdioCommand(ctx, name, cfg, cmd)
		if err != nil {
			return nil, fmt.Errorf("mcpconn: server %q: preparing the command: %w", name, err)
		}
		if c == nil {
			return nil, fmt.Errorf("mcpconn: server %q: Options.StdioCommand returned no command", name)
		}
		cmd = c
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = procAttr()
	}
	return cmd, nil
}

// lineLogger is the stderr of a stdio server: each line becomes one log
// record, so that a server's chatter never reaches our stdout.
type lineLogger struct {
	log    *slog.Logger
	server string
	mu     sync.Mutex
	buf    []byte
}

// maxLogLine bounds one logged line, so that a server writing without
// newlines cannot grow the buffer without limit.
const maxLogLine = 16 << 10

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			if len(l.buf) >= maxLogLine {
				l.emit(l.buf[:maxLogLine])
				l.buf = l.buf[maxLogLine:]
				continue
			}
			break
		}
		l.emit(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
	// Keep the buffer from pinning a large array after a long line.
	if len(l.buf) == 0 {
		l.buf = nil
	}
	return len(p), nil
}

// flush logs a final line without a newline.
func (l *lineLogger) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.emit(l.buf)
		l.buf = nil
	}
}

func (l *lineLogger) emit(line []byte) {
	line = bytes.TrimRight(line, "\r")
	if len(line) == 0 {
		return
	}
	l.log.Info("mcp server stderr", "server", l.server, "line", string(line))
}
