package toolserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
	"github.com/ipybox/ipybox/internal/toolserver"
)

// sessionCaller is the smallest real Caller: one go-sdk client session,
// registered under one name.
type sessionCaller struct {
	name string
	cs   *mcp.ClientSession
}

func (c *sessionCaller) CallTool(ctx context.Context, server, tool string, args json.RawMessage) (*mcp.CallToolResult, error) {
	if server != c.name {
		return nil, fmt.Errorf("%w: %q", toolserver.ErrUnknownServer, server)
	}
	return c.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
}

// TestRuntimeWithMCPServer runs kernel-side code against a real MCP server
// (the Go test server, over the go-sdk's in-memory transport): Python →
// ipybox_runtime → toolserver → go-sdk client → MCP server and back.
func TestRuntimeWithMCPServer(t *testing.T) {
	pys := pythons(t)
	testenv.CheckGoroutines(t)
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := mcptest.NewServer(nil).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "toolserver-test", Version: "v0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	ts := start(t, &sessionCaller{name: "test", cs: cs}, &toolserver.Options{
		Approver:    toolserver.AutoApprove,
		KnownServer: func(s string) bool { return s == "test" },
	})
	pkg := filepath.Join(testenv.RepoRoot(t), "internal", "pyruntime")
	code := pyPrelude + `
show(lambda: run_tool("test", "tool-1", {"s": "${HOME} $(id)"}))
r = run_tool("test", "image", {})
print(type(r).__name__, r.text, r.images[0].mime_type, r.images[0].data[:4])
show(lambda: run_tool("test", "fail", {"reason": "nope"}))
show(lambda: run_tool("test", "tool_3", {"name": "n", "count": 2}))
show(lambda: run_tool("test", "no_such_tool", {}))
show(lambda: run_tool("other", "tool-1", {"s": "x"}))
async def main():
    rs = await asyncio.gather(*[run_tool_async("test", "tool_2", {"delay": 0.2}) for _ in range(5)])
    print(rs)
asyncio.run(main())
`
	want := `str | tool-1: ${HOME} $(id)
ToolResult a pixel image/png b'\x89PNG'
ToolError | ['ToolRunnerError'] | tool_error 200 | fail: nope
str | {"inner":{"count":2,"tags":["a","b"]},"name":"n"}
ToolError | ['ToolRunnerError'] | tool_error 502 | tool call test.no_such_tool failed: calling "tools/call": unknown tool "no_such_tool"
ToolServerError | ['ToolRunnerError'] | unknown_server 404 | unknown MCP server "other"; register it on the host (the kernel cannot add servers)
['tool_2 done', 'tool_2 done', 'tool_2 done', 'tool_2 done', 'tool_2 done']`
	for _, py := range pys {
		t.Run(py, func(t *testing.T) {
			env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "PYTHONPATH=" + pkg, "PYTHONDONTWRITEBYTECODE=1",
				toolserver.EnvURL + "=" + ts.unixURL, toolserver.EnvToken + "=" + ts.Token()}
			if got := runPy(t, py, env, code); got != want {
				t.Errorf("stdout:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}
