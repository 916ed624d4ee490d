package mcptest_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

func connect(t *testing.T, tr mcp.Transport) *mcp.ClientSession {
	t.Helper()
	// Not a timeout context: the SSE transport keeps Connect's context for
	// its stream, which would end when the context is cancelled.
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	cs, err := c.Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestInProcess(t *testing.T) {
	testenv.CheckGoroutines(t)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := mcptest.NewServer(&mcptest.Options{ExtraTools: 5, PageSize: 2}).Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs := connect(t, ct)
	defer cs.Close()
	ctx := context.Background()

	first, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Tools) != 2 || first.NextCursor == "" {
		t.Errorf("first page: %d tools, cursor %q; want 2 and a cursor", len(first.Tools), first.NextCursor)
	}
	n := 0
	for _, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 8+5 {
		t.Errorf("%d tools, want 13 (8 standard and 5 extra)", n)
	}

	call := func(name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	if r := call("tool-1", map[string]any{"s": "x"}); r.Content[0].(*mcp.TextContent).Text != "tool-1: x" {
		t.Errorf("tool-1: %+v", r.Content[0])
	}
	r := call("tool_3", map[string]any{"name": "n", "count": 3})
	sc, _ := r.StructuredContent.(map[string]any)
	if inner, _ := sc["inner"].(map[string]any); sc["name"] != "n" || inner["count"] != float64(3) {
		t.Errorf("tool_3 structured content %v", r.StructuredContent)
	}
	if r := call("fail", map[string]any{"reason": "r"}); !r.IsError {
		t.Errorf("fail: not an error result")
	}
	if r := call("image", nil); len(r.Content) != 2 || r.Content[1].(*mcp.ImageContent).MIMEType != "image/png" {
		t.Errorf("image: %+v", r.Content)
	}
	start := time.Now()
	if r := call("tool_2", map[string]any{"delay": 0.05}); time.Since(start) < 50*time.Millisecond || r.Content[0].(*mcp.TextContent).Text != "tool_2 done" {
		t.Errorf("tool_2 did not sleep, or answered %+v", r.Content[0])
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "crash"}); err == nil {
		t.Errorf("crash exists in process, where it would end the test")
	}
}

// startBinary runs testmcp with args and returns the URL from its first
// line, and a channel that receives the result of Wait once.
func startBinary(t *testing.T, args ...string) (string, *exec.Cmd, <-chan error) {
	t.Helper()
	cmd := exec.Command(mcptest.Build(t), args...)
	cmd.Stderr = tWriter{t}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	var url string
	select {
	case url = <-line:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("testmcp printed no URL within 20s")
	}
	done := make(chan struct{})
	go func() {
		exited <- cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	return url, cmd, exited
}

func TestBinaryHTTP(t *testing.T) {
	for _, tc := range []struct{ transport, suffix string }{{"http", "/mcp"}, {"sse", "/sse"}} {
		t.Run(tc.transport, func(t *testing.T) {
			url, _, exited := startBinary(t, "--transport", tc.transport, "--extra-tools", "30", "--page-size", "7")
			if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, tc.suffix) {
				t.Fatalf("URL %q", url)
			}
			var tr mcp.Transport = &mcp.StreamableClientTransport{Endpoint: url}
			if tc.transport == "sse" {
				tr = &mcp.SSEClientTransport{Endpoint: url}
			}
			cs := connect(t, tr)
			defer cs.Close()
			n := 0
			for _, err := range cs.Tools(context.Background(), nil) {
				if err != nil {
					t.Fatal(err)
				}
				n++
			}
			if n != 9+30 {
				t.Errorf("%d tools, want 39 (8 standard, crash and 30 extra)", n)
			}
			// crash ends the process with status 3.
			cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "crash"})
			select {
			case err := <-exited:
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 3 {
					t.Errorf("exit: %v, want status 3", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the crash tool did not end the process")
			}
		})
	}
}

func TestBinaryStopsOnSIGTERM(t *testing.T) {
	url, cmd, exited := startBinary(t, "--transport", "sse")
	// An open SSE stream must not keep the server from stopping.
	req, _ := http.NewRequest("GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("testmcp did not stop on SIGTERM")
	}
}

func TestBinaryRefusesNonLoopback(t *testing.T) {
	out, err := exec.Command(mcptest.Build(t), "--transport", "http", "--addr", "0.0.0.0:0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "loopback") {
		t.Errorf("--addr 0.0.0.0:0: %v, %s; want a refusal", err, out)
	}
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
