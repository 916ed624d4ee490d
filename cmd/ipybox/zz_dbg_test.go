package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestZZDbg(t *testing.T) {
	ws := t.TempDir()
	os.Mkdir(filepath.Join(ws, ".git"), 0o755)
	cmd := exec.Command(os.Args[0], "mcp", "--workspace", ws, "--pool", "0", "--log-level", "debug")
	cmd.Env = append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1", "GOTRACEBACK=all")
	buf := &lockedBuffer{}
	cmd.Stderr = buf
	cs := goClient(t, &mcp.CommandTransport{Command: cmd}, nil)
	runCell(t, cs, "open('made.txt', 'w').write('x')")
	exited := make(chan struct{})
	go func() { cmd.Process.Wait(); close(exited) }()
	t0 := time.Now()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		t.Logf("exited after %v", time.Since(t0))
	case <-time.After(450 * time.Millisecond):
		cmd.Process.Signal(syscall.SIGQUIT)
		<-exited
	}
	os.WriteFile("/tmp/zzdbg.txt", []byte(buf.String()), 0o644)
}
