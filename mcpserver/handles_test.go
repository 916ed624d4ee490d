package mcpserver

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/testenv"
)

// createSession calls create_session and returns the handle, checking
// that the text and the structured content agree.
func createSession(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	res := call(t, cs, "create_session", map[string]any{})
	if res.IsError {
		t.Fatalf("create_session: %s", text(res))
	}
	var out struct{ Session string }
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil || !strings.HasPrefix(out.Session, handlePrefix) || len(out.Session) < len(handlePrefix)+26 {
		t.Fatalf("create_session: structured %s", b)
	}
	if !strings.Contains(text(res), out.Session) {
		t.Errorf("the text does not give the handle: %q", text(res))
	}
	return out.Session
}

// runIn executes code in session h and returns the text of a successful
// result.
func runIn(t *testing.T, cs *mcp.ClientSession, h, code string) string {
	t.Helper()
	res := call(t, cs, "execute_ipython_cell", map[string]any{"code": code, "session": h})
	if res.IsError {
		t.Fatalf("execute %q in %s: error result: %s", short(code), h, text(res))
	}
	return text(res)
}

// TestHandles: a session of create_session keeps its state across calls,
// across new connections of both revisions over HTTP, and over stdio; a
// 2026-07-28 call over HTTP without a handle gets one error that names
// create_session, and starts no kernel; close_session ends it.
func TestHandles(t *testing.T) {
	testenv.CheckGoroutines(t)
	// Without a token, HTTP callers are the principal stdio ones are.
	srv := newServer(t, &Options{Workspace: sharedWorkspace(t), HTTP: HTTPOptions{NoAuth: true}})
	url := serveHTTP(t, srv)
	a := connectHTTPAs(t, url, "", newVersion, nil)

	res := call(t, a, "execute_ipython_cell", map[string]any{"code": "print(1)"})
	if !res.IsError || !strings.Contains(text(res), "create_session") {
		t.Errorf("a call without a handle: %q", text(res))
	}
	for _, tool := range []string{"reset", "install_package", "upload_file", "download_file", "register_mcp_server"} {
		args := map[string]any{"package_name": "x", "relpath": "a", "local_path": "/tmp/a", "server_name": "x", "server_params": map[string]any{"command": "x"}}
		switch tool {
		case "reset":
			args = map[string]any{}
		case "install_package":
			args = map[string]any{"package_name": "x"}
		case "upload_file", "download_file":
			args = map[string]any{"relpath": "a.txt", "local_path": os.TempDir() + "/ipybox-none.txt"}
		case "register_mcp_server":
			args = map[string]any{"server_name": "x", "server_params": map[string]any{"command": "x"}}
		}
		if res := call(t, a, tool, args); !res.IsError || !strings.Contains(text(res), "create_session") {
			t.Errorf("%s without a handle: %q", tool, text(res))
		}
	}
	h := createSession(t, a)
	if n := srv.KernelCount(); n != 0 {
		t.Errorf("%d kernels before any cell; want none", n)
	}
	runIn(t, a, h, "x = 41")
	if got := runIn(t, a, h, "print(x + 1)"); got != "42" {
		t.Errorf("state across calls: %q", got)
	}
	// A new connection, as after a restart of the client.
	a.Close()
	b := connectHTTPAs(t, url, "", newVersion, nil)
	if got := runIn(t, b, h, "x += 1; print(x)"); got != "42" {
		t.Errorf("state across a reconnection: %q", got)
	}
	// A 2025-11-25 connection names it too; its own kernel is another.
	old := connectHTTP(t, url, nil)
	if got := runIn(t, old, h, "x += 1; print(x)"); got != "43" {
		t.Errorf("from a 2025-11-25 connection: %q", got)
	}
	if got := run(t, old, "print('x' in dir())"); got != "False" {
		t.Errorf("the connection's own kernel sees the session's state: %q", got)
	}
	// And over stdio.
	std := connect(t, srv, nil)
	if got := runIn(t, std, h, "x += 1; print(x)"); got != "44" {
		t.Errorf("over stdio: %q", got)
	}
	// list_sessions shows it, close_session ends it.
	if res := call(t, b, "list_sessions", map[string]any{}); !strings.Contains(text(res), h) || !strings.Contains(text(res), "kernel running") {
		t.Errorf("list_sessions: %q", text(res))
	}
	if res := call(t, b, "close_session", map[string]any{"session": h}); res.IsError {
		t.Fatalf("close_session: %s", text(res))
	}
	res = call(t, std, "execute_ipython_cell", map[string]any{"code": "print(x)", "session": h})
	if !res.IsError || !strings.Contains(text(res), "unknown session") {
		t.Errorf("a closed handle: %q", text(res))
	}
	if res := call(t, b, "list_sessions", map[string]any{}); strings.Contains(text(res), h) {
		t.Errorf("list_sessions after close: %q", text(res))
	}
}

// TestSessionsCostNothingUntilTheirFirstCell: connections and sessions
// that never run a cell hold no kernel, and the cap counts kernels.
func TestSessionsCostNothingUntilTheirFirstCell(t *testing.T) {
	testenv.NeedsPython(t)
	base := len(kernels(t, os.Getpid()))
	srv := newServer(t, &Options{Workspace: sharedWorkspace(t), Sessions: SessionOptions{MaxSessions: 2}})
	url := serveHTTP(t, srv)
	// Handshakes of 2025-11-25 clients that never close, as the
	// conformance suite and the Inspector leave them, and sessions that
	// run nothing.
	for range 5 {
		connectHTTP(t, url, nil)
	}
	n := connectHTTPAs(t, url, testToken, newVersion, nil)
	for range 5 {
		createSession(t, n)
	}
	// No start is owed to anything above: the server says no session holds
	// a kernel, and none appears while it is watched for a while (an
	// observation of an absence, not a wait for an event).
	for _, s := range sessionInfos(t, n) {
		if s.Kernel {
			t.Fatalf("session %s holds a kernel without a cell", s.Session)
		}
	}
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if got := len(kernels(t, os.Getpid())); got != base || srv.KernelCount() != 0 {
			t.Fatalf("%d kernel processes (%d counted) after 5 connections and 5 sessions without a cell; want %d", got, srv.KernelCount(), base)
		}
	}
	// The cap: two kernels, then an error that says which limit.
	h1, h2, h3 := createSession(t, n), createSession(t, n), createSession(t, n)
	runIn(t, n, h1, "1")
	runIn(t, n, h2, "1")
	res := call(t, n, "execute_ipython_cell", map[string]any{"code": "1", "session": h3})
	if !res.IsError || !strings.Contains(text(res), "--max-sessions") {
		t.Fatalf("a third kernel: %q", text(res))
	}
	call(t, n, "close_session", map[string]any{"session": h1})
	if got := runIn(t, n, h3, "print('third')"); got != "third" {
		t.Errorf("after a close: %q", got)
	}
}

// TestIdleHandleEnds: a session of create_session that gets no call for
// the expiry ends: its kernel stops and its handle is unknown. One whose
// cell runs longer than that is not idle.
func TestIdleHandleEnds(t *testing.T) {
	testenv.NeedsPython(t)
	base := len(kernels(t, os.Getpid()))
	srv := newServer(t, &Options{Workspace: sharedWorkspace(t), Durability: DurabilityOptions{SessionExpiry: 1500 * time.Millisecond}})
	cs := connectHTTPAs(t, serveHTTP(t, srv), testToken, newVersion, nil)
	idle := createSession(t, cs)
	runIn(t, cs, idle, "print('up')")
	busy := createSession(t, cs)
	if got := runIn(t, cs, busy, "import time; time.sleep(3); print('still here')"); got != "still here" {
		t.Errorf("a long cell: %q", got)
	}
	res := call(t, cs, "execute_ipython_cell", map[string]any{"code": "1", "session": idle})
	if !res.IsError || !strings.Contains(text(res), "unknown session") {
		t.Errorf("an idle session's handle after the timeout: %q", text(res))
	}
	// And the busy one, once idle.
	waitKernels(t, os.Getpid(), base, 15*time.Second)
	for deadline := time.Now().Add(5 * time.Second); srv.KernelCount() != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d kernels counted", srv.KernelCount())
		}
	}
}

// TestToolsListSameForEveryClient: tools/list is the same over stdio and
// HTTP, at 2026-07-28 and at 2025-11-25, for every principal and call.
func TestToolsListSameForEveryClient(t *testing.T) {
	t.Parallel()
	srv := newServer(t, &Options{Workspace: t.TempDir(), Python: "/nonexistent/python3", HTTP: HTTPOptions{Principals: map[string]string{"b": "b-token-0123456789"}}})
	url := serveHTTP(t, srv)
	var lists []string
	for _, cs := range []*mcp.ClientSession{
		connect(t, srv, nil),
		connectAt(t, srv, legacyVersion, nil),
		connectHTTPAs(t, url, testToken, newVersion, nil),
		connectHTTPAs(t, url, testToken, legacyVersion, nil),
		connectHTTPAs(t, url, "b-token-0123456789", newVersion, nil),
	} {
		for range 2 {
			res, err := cs.ListTools(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(res.Tools)
			lists = append(lists, string(b))
		}
	}
	for i, l := range lists {
		if l != lists[0] {
			t.Errorf("tools/list %d differs from the first:\n%s\n%s", i, short(l), short(lists[0]))
		}
	}
}
