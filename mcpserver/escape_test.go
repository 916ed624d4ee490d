package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcptest"
)

// hiding are the payloads that hid a command from the person approving it.
var hiding = []struct{ raw string }{{"\r"}, {"\x1b[2K"}, {"\x1b[8m"}, {"\u202e"}, {"\u2066"}, {"\u200b"}, {"\x9b"}}

// TestAttackElicitationText: shell commands and tool arguments that kernel
// code chose reach the person, in the client's elicitation dialog, with
// every hiding character made visible.
func TestAttackElicitationText(t *testing.T) {
	t.Parallel()
	srv := newServer(t, &Options{
		Workspace: t.TempDir(),
		Servers:   map[string]ipybox.ServerConfig{"go": {Command: mcptest.Build(t)}},
		Approvals: ApprovalOptions{
			Mode: ApprovalElicit,
		},
	})
	var mu sync.Mutex
	var asked []string
	cs := connectHTTP(t, serveHTTP(t, srv), &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			mu.Lock()
			asked = append(asked, r.Params.Message)
			mu.Unlock()
			return &mcp.ElicitResult{Action: "decline"}, nil
		},
	})
	var payload strings.Builder
	for _, h := range hiding {
		payload.WriteString("x" + h.raw)
	}
	p := payload.String()
	call(t, cs, "execute_ipython_cell", map[string]any{"code": "get_ipython().system(" + pyQuote("echo safe"+p+"rm -rf ~") + ")"})
	call(t, cs, "execute_ipython_cell", map[string]any{"code": "from mcptools.go.tool_1 import Params, run\nrun(Params(s=" + pyQuote(p) + "))"})
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 2 {
		t.Fatalf("asked %d times, want 2: %q", len(asked), asked)
	}
	for i, msg := range asked {
		for _, h := range hiding {
			if strings.Contains(msg, h.raw) {
				t.Errorf("message %d holds a raw %q: %q", i, h.raw, msg)
			}
		}
		// Each payload character is shown as an escape (ours, or JSON's
		// \u00XX for C0 controls in the arguments).
		for _, want := range []string{`\r`, `[2K`, `[8m`, `\u202e`, `\u2066`, `\u200b`} {
			if !strings.Contains(msg, want) {
				t.Errorf("message %d does not show %q: %q", i, want, msg)
			}
		}
	}
	if !strings.Contains(asked[0], "rm -rf ~") {
		t.Errorf("the real command is not shown: %q", asked[0])
	}
}

// pyQuote writes s as a Python string literal with \U escapes for
// everything but printable ASCII, so that the payload travels through the
// cell's source intact.
func pyQuote(s string) string {
	var b strings.Builder
	b.WriteString(`"`)
	for _, r := range s {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			fmt.Fprintf(&b, `\U%08x`, r)
			continue
		}
		b.WriteRune(r)
	}
	b.WriteString(`"`)
	return b.String()
}

// TestElicitationShowsEveryLine: a command whose first line would scroll
// out of the client's dialog behind 120 blank lines, or behind thousands
// of lines, is shown with every line that runs numbered and the blank ones
// counted, or with its first and last lines and what is not shown; the
// tool arguments likewise, within a bounded size. It is the summary that
// the terminal prompt shows (approvaltext).
func TestElicitationShowsEveryLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		r    *ipybox.ApprovalRequest
		want []string
	}{
		{&ipybox.ApprovalRequest{Kind: "shell", Command: "touch /tmp/pwned" + strings.Repeat("\n", 121) + "ls"},
			[]string{"1: touch /tmp/pwned\n2-121: (120 blank lines)\n122: ls\n[122 lines, 139 bytes]"}},
		{&ipybox.ApprovalRequest{Kind: "shell", Command: "touch /tmp/pwned\n" + strings.Repeat(":\n", 5000) + "ls"},
			[]string{"1: touch /tmp/pwned\n", "[... lines 13-4990 not shown ...]", "5002: ls\n[5002 lines, 10019 bytes]"}},
		{&ipybox.ApprovalRequest{Kind: "tool", Server: "s", Tool: "t", Args: json.RawMessage(`{"a":"touch /tmp/pwned` + strings.Repeat(" ", 1<<20) + `ls"}`)},
			[]string{`{"a":"touch /tmp/pwned`, "characters not shown", `ls"}`, "[1048602 bytes of JSON, shown in part]"}},
	} {
		msg := approvalMessage(tc.r)
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("the elicitation message lacks %q:\n%.3000s", w, msg)
			}
		}
		if len(msg) > 16<<10 {
			t.Errorf("the elicitation message is %d bytes", len(msg))
		}
	}
}
