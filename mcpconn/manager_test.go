package mcpconn

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// newManager returns a Manager over the given servers that is closed when t
// ends, with short timeouts so that failing tests fail fast.
func newManager(t *testing.T, servers map[string]Config, opts *Options) *Manager {
	t.Helper()
	reg := NewRegistry()
	for name, c := range servers {
		if err := reg.Add(name, c); err != nil {
			t.Fatal(err)
		}
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = testLogger(t)
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = 20 * time.Second
	}
	if o.StopGrace == 0 {
		o.StopGrace = 500 * time.Millisecond
	}
	m := New(reg, &o)
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return m
}

// testLogger logs to t, so that stderr of servers shows up on failures.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// testmcpStdio returns the config of the Go test server over stdio.
func testmcpStdio(t *testing.T, args ...string) Config {
	return Config{Command: mcptest.Build(t), Args: append([]string{"--transport", "stdio"}, args...)}
}

func toolNames(tools []*mcp.Tool) []string {
	var names []string
	for _, tl := range tools {
		names = append(names, tl.Name)
	}
	return names
}

func resultText(t *testing.T, r *mcp.CallToolResult) string {
	t.Helper()
	var parts []string
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func callText(t *testing.T, m *Manager, server, tool string, args map[string]any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := m.CallTool(ctx, server, tool, args)
	if err != nil {
		t.Fatalf("CallTool(%s, %s): %v", server, tool, err)
	}
	if r.IsError {
		t.Fatalf("CallTool(%s, %s): tool error: %s", server, tool, resultText(t, r))
	}
	return resultText(t, r)
}

func serverPid(t *testing.T, m *Manager, server string) int {
	t.Helper()
	pid, err := strconv.Atoi(callText(t, m, server, "pid", nil))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitGone waits until pid no longer exists (it was reaped).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := syscall.Kill(pid, 0)
		if errors.Is(err, syscall.ESRCH) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still exists (kill 0: %v)", pid, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// goServers returns the Go test server over all three transports.
func goServers(t *testing.T, opts *mcptest.Options, args ...string) map[string]Config {
	return map[string]Config{
		"stdio": testmcpStdio(t, args...),
		"http":  {URL: mcptest.StartHTTP(t, "http", opts)},
		"sse":   {URL: mcptest.StartHTTP(t, "sse", opts)},
	}
}

func TestGoServerAllTransports(t *testing.T) {
	testenv.CheckGoroutines(t)
	servers := goServers(t, nil)
	m := newManager(t, servers, nil)
	want := []string{"env", "fail", "image", "pid", "tool-1", "tool_2", "tool_3"}
	for name := range servers {
		t.Run(name, func(t *testing.T) {
			tools, err := m.ListTools(ctxT(t), name)
			if err != nil {
				t.Fatal(err)
			}
			got := slices.DeleteFunc(toolNames(tools), func(n string) bool { return n == "crash" })
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("tools = %v, want %v", got, want)
			}
			if got := callText(t, m, name, "tool-1", map[string]any{"s": "hi"}); got != "tool-1: hi" {
				t.Errorf("tool-1 = %q, want %q", got, "tool-1: hi")
			}
			r, err := m.CallTool(ctxT(t), name, "tool_3", map[string]any{"name": "x", "count": 2})
			if err != nil {
				t.Fatal(err)
			}
			sc, ok := r.StructuredContent.(map[string]any)
			if !ok {
				t.Fatalf("tool_3 structuredContent = %#v, want an object", r.StructuredContent)
			}
			inner, _ := sc["inner"].(map[string]any)
			if sc["name"] != "x" || inner == nil || inner["count"] != float64(2) {
				t.Errorf("tool_3 structuredContent = %v, want name x and inner.count 2", sc)
			}
			var schema *mcp.Tool
			for _, tl := range tools {
				if tl.Name == "tool_3" {
					schema = tl
				}
			}
			if schema == nil || schema.OutputSchema == nil {
				t.Errorf("tool_3 has no output schema")
			}
			// A tool error is a result, not a Go error.
			r, err = m.CallTool(ctxT(t), name, "fail", map[string]any{"reason": "boom"})
			if err != nil {
				t.Fatalf("fail: Go error %v, want an isError result", err)
			}
			if !r.IsError || resultText(t, r) != "fail: boom" {
				t.Errorf("fail = %+v (%q), want isError with text %q", r, resultText(t, r), "fail: boom")
			}
			// An unknown tool is a protocol error: a Go error.
			if _, err := m.CallTool(ctxT(t), name, "no_such_tool", nil); err == nil {
				t.Errorf("calling an unknown tool: no error")
			}
		})
	}
	s := m.entries["sse"].current()
	if s == nil || s.transport != SSE {
		t.Errorf("sse server: session %+v, want the SSE transport (URL path /sse)", s)
	}
}
