package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/testenv"
)

// TestMCPOversizedStdioRequest: a request over the stdio limit gets a
// JSON-RPC error that says so, and the session and its kernel's state
// survive it. (The go-sdk alone ends the connection.)
func TestMCPOversizedStdioRequest(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	cmd := exec.Command(os.Args[0], "mcp", "--workspace", t.TempDir(), "--no-sandbox")
	cmd.Env = append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1")
	cs := goClient(t, &mcp.CommandTransport{Command: cmd}, nil)
	if out, isErr := callText(t, cs, "execute_ipython_cell", map[string]any{"code": "x = 41"}); isErr {
		t.Fatalf("x = 41: %s", out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	huge := "s = '" + strings.Repeat("a", 16<<20+1) + "'" // past the server's 16 MiB bound
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_ipython_cell", Arguments: map[string]any{"code": huge}})
	if err == nil || !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), "16 MiB") {
		t.Errorf("oversized request: err = %v, want one that says it was refused and names the limit", err)
	}
	out, isErr := callText(t, cs, "execute_ipython_cell", map[string]any{"code": "print(x + 1)"})
	if isErr || !strings.Contains(out, "42") {
		t.Errorf("after the oversized request: %q (isError %v); want the session and its state", out, isErr)
	}
}
