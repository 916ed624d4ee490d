package mcptest

import (
	"bytes"
	"fmt"
	"github.com/ipybox/ipybox/internal/procattr"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv"
)

// StartEverything runs the reference server @modelcontextprotocol/
// server-everything in an HTTP mode ("streamableHttp" or "sse") on a free
// port, reached through 127.0.0.1, and returns its base URL (the streamable
// endpoint is URL+"/mcp", the SSE one URL+"/sse"). The server reads only
// PORT and offers no host setting. It is stopped when the test ends.
func StartEverything(t testing.TB, mode string) string {
	t.Helper()
	bin := testenv.NPMBin(t, "mcp-server-everything")
	for attempt := 0; ; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		var stderr bytes.Buffer
		cmd := exec.Command(bin, mode)
		cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
		cmd.Stdout, cmd.Stderr = &stderr, &stderr
		cmd.SysProcAttr = procattr.Group()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		stop := func() {
			procattr.SignalGroup(cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		deadline := time.Now().Add(20 * time.Second)
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
				t.Cleanup(stop)
				return "http://" + addr
			}
			select {
			case <-exited:
			case <-time.After(50 * time.Millisecond):
				if time.Now().Before(deadline) {
					continue
				}
				stop()
				t.Fatalf("server-everything %s did not listen on %s within 20s:\n%s", mode, addr, stderr.String())
			}
			break
		}
		// It exited: most likely the port was taken meanwhile.
		if attempt == 2 {
			t.Fatalf("server-everything %s exited:\n%s", mode, stderr.String())
		}
	}
}
