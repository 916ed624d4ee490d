package mcpserver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestRegistrationsDoNotWaitForEachOther: a registration whose server
// never answers initialize holds no lock that another session's
// registration of another name, or its cells, wait for: the second
// registration and a cell run while the first is still connecting. Both
// end up in servers.json (each executor saves its own entry).
func TestRegistrationsDoNotWaitForEachOther(t *testing.T) {
	testenv.NeedsPython(t)
	ws := t.TempDir()
	srv := newServer(t, &Options{Workspace: ws})
	a, b := connect(t, srv, nil), connect(t, srv, nil)
	run(t, a, "print('a up')")
	run(t, b, "print('b up')")
	bin := mcptest.Build(t)

	// a registers a server that never answers; the marker says its
	// command has started, so the registration is under way.
	marker := filepath.Join(t.TempDir(), "started")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hung := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, _ := a.CallTool(ctx, &mcp.CallToolParams{Name: "register_mcp_server", Arguments: map[string]any{
			"server_name":   "hung",
			"server_params": map[string]any{"command": "sh", "args": []string{"-c", "touch " + marker + "; exec " + bin + " -hang-initialize"}},
		}})
		hung <- res
	}()
	testenv.WaitFile(t, marker, 30*time.Second) // the hung server's command has started

	t0 := time.Now()
	res := call(t, b, "register_mcp_server", map[string]any{"server_name": "fast", "server_params": map[string]any{"command": bin}})
	if res.IsError {
		t.Fatalf("fast: %s", text(res))
	}
	if got := run(t, b, "from mcptools.fast.tool_1 import Params, run\nprint(run(Params(s='x')))"); got != "tool-1: x" {
		t.Errorf("fast's tool: %q", got)
	}
	select {
	case <-hung:
		t.Fatal("the hung registration ended before the test let it; the test proves nothing")
	default:
	}
	t.Logf("another name's registration and a cell took %v while the hung one was connecting", time.Since(t0).Round(time.Millisecond))

	cancel()
	select {
	case <-hung:
	case <-time.After(30 * time.Second):
		t.Fatal("the hung registration did not end within 30 s of its cancel")
	}
	reg, err := os.ReadFile(filepath.Join(ws, ".ipybox", "servers.json"))
	if err != nil || !containsAll(string(reg), `"fast"`) {
		t.Errorf("servers.json: %s %v", reg, err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestRegisteredServersShare: the clients of one principal register at
// most MaxRegisteredServers stdio servers; registering a name again
// replaces its server and counts once, the refusal names the limit and
// the fix, and another principal's registrations are its own.
func TestRegisteredServersShare(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	bin := mcptest.Build(t)
	ws := t.TempDir()
	srv := newServer(t, &Options{Workspace: ws, HTTP: HTTPOptions{Principals: twoPrincipals},
		Sessions: SessionOptions{MaxRegisteredServers: 2}})
	url := serveHTTP(t, srv)
	reg := func(cs *mcp.ClientSession, h, name string) *mcp.CallToolResult {
		return call(t, cs, "register_mcp_server", map[string]any{"server_name": name, "server_params": map[string]any{"command": bin}, "session": h})
	}
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	ha := createSession(t, alice)
	for _, n := range []string{"s0", "s1", "s0"} {
		if res := reg(alice, ha, n); res.IsError {
			t.Fatalf("alice's %s: %s", n, text(res))
		}
	}
	if res := reg(alice, ha, "s2"); !res.IsError || !strings.Contains(text(res), "--max-registered-servers 2") {
		t.Errorf("alice's third server: %s, want a refusal naming --max-registered-servers 2", text(res))
	}
	bob := connectHTTPAs(t, url, bobTok, newVersion, nil)
	if res := reg(bob, createSession(t, bob), "s2"); res.IsError {
		t.Errorf("bob's first server: %s", text(res))
	}
	// The next run counts the registrations its servers.json keeps.
	next := newServer(t, &Options{Workspace: ws, HTTP: HTTPOptions{Principals: twoPrincipals},
		Sessions: SessionOptions{MaxRegisteredServers: 2}})
	alice = connectHTTPAs(t, serveHTTP(t, next), aliceTok, newVersion, nil)
	ha = createSession(t, alice)
	if res := reg(alice, ha, "s3"); !res.IsError || !strings.Contains(text(res), "--max-registered-servers 2") {
		t.Errorf("alice's third server in the next run: %s, want a refusal", text(res))
	}
	if res := reg(alice, ha, "s1"); res.IsError {
		t.Errorf("alice's s1 again in the next run: %s", text(res))
	}
}
