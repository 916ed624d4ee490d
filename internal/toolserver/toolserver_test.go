package toolserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/testenv"
	"github.com/ipybox/ipybox/internal/toolserver"
)

// fakeCaller is the Caller of tier-2 tests: it records what reached it and
// answers through fn (default: the args echoed as JSON text).
type fakeCaller struct {
	mu    sync.Mutex
	calls []toolserver.ToolCall
	fn    func(ctx context.Context, server, tool string, args map[string]any) (*mcp.CallToolResult, error)
}

func (f *fakeCaller) CallTool(ctx context.Context, server, tool string, raw json.RawMessage) (*mcp.CallToolResult, error) {
	f.mu.Lock()
	f.calls = append(f.calls, toolserver.ToolCall{Server: server, Tool: tool, Args: raw})
	f.mu.Unlock()
	var args map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&args); err != nil {
		return nil, err
	}
	if f.fn != nil {
		return f.fn(ctx, server, tool, args)
	}
	b, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil
}

func (f *fakeCaller) n() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// approverFuncs adapts functions to Approver; a nil function panics, so a
// test notices an approval it did not expect.
type approverFuncs struct {
	tool  func(ctx context.Context, c *toolserver.ToolCall) error
	shell func(ctx context.Context, command string) error
	asked atomic.Int32
}

func (a *approverFuncs) ApproveTool(ctx context.Context, c *toolserver.ToolCall) error {
	a.asked.Add(1)
	return a.tool(ctx, c)
}

func (a *approverFuncs) ApproveShell(ctx context.Context, command string) error {
	a.asked.Add(1)
	return a.shell(ctx, command)
}

// testServer is a started Server with clients for both listeners.
type testServer struct {
	*toolserver.Server
	sock, unixURL, tcpURL string
	unix, tcp             *http.Client
}

func start(t *testing.T, c toolserver.Caller, opts *toolserver.Options) *testServer {
	t.Helper()
	s, err := toolserver.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	// A short directory: unix socket paths are limited to 107 bytes.
	dir, err := os.MkdirTemp("", "ts-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "tool.sock")
	unixURL, err := s.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	tcpURL, err := s.ListenTCP()
	if err != nil {
		t.Fatal(err)
	}
	unix := &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	tcp := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	return &testServer{Server: s, sock: sock, unixURL: unixURL, tcpURL: tcpURL, unix: unix, tcp: tcp}
}

// startOn is start on the in-memory network n, for a test in a synctest
// bubble: the server's "unix socket" and its loopback port are n's.
func startOn(t *testing.T, n *testenv.Network, c toolserver.Caller, opts *toolserver.Options) *testServer {
	t.Helper()
	s, err := toolserver.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	const sock = "/ipybox-test/tool.sock"
	ul, err := n.ListenAddr("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	tl := n.Listen()
	s.ServeListener(ul)
	s.ServeListener(tl)
	unix := &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return n.DialContext(ctx, "unix", sock)
		},
	}}
	tcp := n.Client()
	tcp.Transport.(*http.Transport).DisableKeepAlives = true
	return &testServer{Server: s, sock: sock, unixURL: "unix://" + sock, tcpURL: "http://" + tl.Addr().String(), unix: unix, tcp: tcp}
}

// reply is a decoded answer of the tool server.
type reply struct {
	status int
	body   []byte
	kind   string // error kind, "" for a 2xx answer
	msg    string
}

type req struct {
	method, path, host, auth, ctype string
	body                            string
	viaTCP                          bool
}

// do sends r; empty fields get working defaults ("-" means "leave out").
func (ts *testServer) do(t *testing.T, r req) reply {
	t.Helper()
	if r.method == "" {
		r.method = http.MethodPost
	}
	client, base := ts.unix, "http://localhost"
	if r.viaTCP {
		client, base = ts.tcp, ts.tcpURL
	}
	hr, err := http.NewRequest(r.method, base+r.path, strings.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if r.host != "" {
		hr.Host = r.host
	}
	switch r.auth {
	case "":
		hr.Header.Set("Authorization", "Bearer "+ts.Token())
	case "-":
	default:
		hr.Header.Set("Authorization", r.auth)
	}
	switch r.ctype {
	case "":
		hr.Header.Set("Content-Type", "application/json")
	case "-":
	default:
		hr.Header.Set("Content-Type", r.ctype)
	}
	resp, err := client.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := reply{status: resp.StatusCode, body: body}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error struct{ Kind, Message string }
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Kind == "" || e.Error.Message == "" {
			t.Fatalf("HTTP %d with a body that is not {\"error\": {kind, message}}: %s", resp.StatusCode, body)
		}
		out.kind, out.msg = e.Error.Kind, e.Error.Message
	}
	return out
}

func call(server, tool string, args any) string {
	b, _ := json.Marshal(map[string]any{"server": server, "tool": tool, "args": args})
	return string(b)
}

func TestAuthAndHost(t *testing.T) {
	testenv.CheckGoroutines(t)
	ts := start(t, &fakeCaller{}, nil)
	tcpHost := strings.TrimPrefix(ts.tcpURL, "http://")
	_, port, _ := net.SplitHostPort(tcpHost)
	for _, tc := range []struct {
		name       string
		r          req
		wantStatus int
		wantKind   string
	}{
		{"unix ok", req{method: "GET", path: "/v1/health"}, 200, ""},
		{"unix no token", req{method: "GET", path: "/v1/health", auth: "-"}, 401, "unauthorized"},
		{"unix wrong token", req{method: "GET", path: "/v1/health", auth: "Bearer " + strings.Repeat("0", 64)}, 401, "unauthorized"},
		{"unix token prefix only", req{method: "GET", path: "/v1/health", auth: "Bearer " + ts.Token()[:63]}, 401, "unauthorized"},
		{"unix basic scheme", req{method: "GET", path: "/v1/health", auth: "Basic " + ts.Token()}, 401, "unauthorized"},
		{"unix lowercase scheme", req{method: "GET", path: "/v1/health", auth: "bearer " + ts.Token()}, 200, ""},
		{"unix forwarded port", req{method: "GET", path: "/v1/health", host: "127.0.0.1:4711"}, 200, ""},
		{"unix evil host", req{method: "GET", path: "/v1/health", host: "evil.example"}, 403, "forbidden"},
		{"unix evil host no token", req{method: "GET", path: "/v1/health", host: "evil.example", auth: "-"}, 403, "forbidden"},
		{"unix localhost suffix", req{method: "GET", path: "/v1/health", host: "localhost.evil.example"}, 403, "forbidden"},
		{"tcp ok", req{method: "GET", path: "/v1/health", viaTCP: true}, 200, ""},
		{"tcp localhost", req{method: "GET", path: "/v1/health", viaTCP: true, host: "localhost:" + port}, 200, ""},
		{"tcp no token", req{method: "GET", path: "/v1/health", viaTCP: true, auth: "-"}, 401, "unauthorized"},
		{"tcp wrong port", req{method: "GET", path: "/v1/health", viaTCP: true, host: "127.0.0.1:1"}, 403, "forbidden"},
		{"tcp no port", req{method: "GET", path: "/v1/health", viaTCP: true, host: "127.0.0.1"}, 403, "forbidden"},
		{"tcp rebinding", req{method: "GET", path: "/v1/health", viaTCP: true, host: "attacker.example:" + port}, 403, "forbidden"},
		{"tcp call no token", req{path: "/v1/tools/call", viaTCP: true, auth: "-", body: call("s", "t", nil)}, 401, "unauthorized"},
		{"shell no token", req{path: "/v1/shell/approve", auth: "-", body: `{"command":"ls"}`}, 401, "unauthorized"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ts.do(t, tc.r)
			if got.status != tc.wantStatus || got.kind != tc.wantKind {
				t.Errorf("got HTTP %d kind %q (%s); want HTTP %d kind %q", got.status, got.kind, got.msg, tc.wantStatus, tc.wantKind)
			}
		})
	}
}

func TestUnixSocket(t *testing.T) {
	testenv.CheckGoroutines(t)
	ts := start(t, &fakeCaller{}, nil)
	fi, err := os.Stat(ts.sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v; want a socket with permissions 0600", fi.Mode())
	}
	if ts.unixURL != "unix://"+ts.sock {
		t.Errorf("ListenUnix URL = %q; want %q", ts.unixURL, "unix://"+ts.sock)
	}
	// An existing file is neither replaced nor removed.
	other := filepath.Join(filepath.Dir(ts.sock), "taken")
	if err := os.WriteFile(other, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.ListenUnix(other); err == nil {
		t.Error("ListenUnix on an existing file succeeded; want an error")
	}
	if b, err := os.ReadFile(other); err != nil || string(b) != "keep" {
		t.Errorf("existing file after ListenUnix: %q, %v; want it untouched", b, err)
	}
	for _, bad := range []string{"rel/tool.sock", "/" + strings.Repeat("x", 120)} {
		if _, err := ts.ListenUnix(bad); err == nil {
			t.Errorf("ListenUnix(%q) succeeded; want an error", bad)
		}
	}
	if err := ts.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ts.sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket after Close: %v; want it removed", err)
	}
	if _, err := ts.ListenUnix(ts.sock); !errors.Is(err, toolserver.ErrClosed) {
		t.Errorf("ListenUnix after Close = %v; want ErrClosed", err)
	}
	if _, err := ts.ListenTCP(); !errors.Is(err, toolserver.ErrClosed) {
		t.Errorf("ListenTCP after Close = %v; want ErrClosed", err)
	}
}

// TestArgsAreData attacks invariant 1: nothing in the arguments is
// interpreted, substituted or reshaped on the way to the Caller.
func TestArgsAreData(t *testing.T) {
	testenv.CheckGoroutines(t)
	c := &fakeCaller{}
	ts := start(t, c, &toolserver.Options{Approver: toolserver.AutoApprove})
	args := `{"path":"${HOME}/x","cmd":"$(rm -rf /)","url":"http://169.254.169.254/","big":9007199254740993,"f":1.5e-7,"nested":{"env":"$PATH"},"list":[1,"${A}"],"uni":"h\u00e9\u2713"}`
	got := ts.do(t, req{path: "/v1/tools/call", body: `{"server":"${SERVER}","tool":"t","args":` + args + `}`})
	if got.status != 200 {
		t.Fatalf("HTTP %d %s: %s", got.status, got.kind, got.msg)
	}
	if c.n() != 1 {
		t.Fatalf("caller saw %d calls; want 1", c.n())
	}
	gc := c.calls[0]
	if gc.Server != "${SERVER}" || gc.Tool != "t" {
		t.Errorf("caller got server %q tool %q; want them unchanged", gc.Server, gc.Tool)
	}
	if string(gc.Args) != args {
		t.Errorf("args reshaped on the way to the caller:\n got %s\nwant %s", gc.Args, args)
	}
}

func TestUnknownServerRefusedBeforeApproval(t *testing.T) {
	testenv.CheckGoroutines(t)
	c := &fakeCaller{}
	ap := &approverFuncs{tool: func(context.Context, *toolserver.ToolCall) error { return nil }}
	ts := start(t, c, &toolserver.Options{Approver: ap, KnownServer: func(s string) bool { return s == "known" }})
	got := ts.do(t, req{path: "/v1/tools/call", body: call("../../etc/passwd", "t", nil)})
	if got.status != 404 || got.kind != "unknown_server" || !strings.Contains(got.msg, "../../etc/passwd") {
		t.Errorf("got HTTP %d %q %q; want 404 unknown_server naming the server", got.status, got.kind, got.msg)
	}
	if ap.asked.Load() != 0 || c.n() != 0 {
		t.Errorf("approver asked %d times, caller called %d times; want 0 and 0", ap.asked.Load(), c.n())
	}
	if got := ts.do(t, req{path: "/v1/tools/call", body: call("known", "t", nil)}); got.status != 200 {
		t.Errorf("known server: HTTP %d %s", got.status, got.msg)
	}
	// A Caller that reports the unknown server itself maps the same way.
	c.fn = func(context.Context, string, string, map[string]any) (*mcp.CallToolResult, error) {
		return nil, fmt.Errorf("registry: %w", toolserver.ErrUnknownServer)
	}
	got = ts.do(t, req{path: "/v1/tools/call", body: call("known", "t", nil)})
	if got.status != 404 || got.kind != "unknown_server" {
		t.Errorf("caller's ErrUnknownServer: got HTTP %d %q; want 404 unknown_server", got.status, got.kind)
	}
}

func TestApproval(t *testing.T) {
	approve := func(context.Context, *toolserver.ToolCall) error { return nil }
	for _, tc := range []struct {
		name     string
		opts     toolserver.Options
		path     string
		wantKind string // "" means approved
		wantMsg  string
		wantCall bool
	}{
		{name: "nil approver rejects tools", path: "/v1/tools/call", wantKind: "rejected", wantMsg: "no approver"},
		{name: "nil approver rejects shell", path: "/v1/shell/approve", wantKind: "rejected", wantMsg: "no approver"},
		{name: "auto approve", opts: toolserver.Options{Approver: toolserver.AutoApprove}, path: "/v1/tools/call", wantCall: true},
		{name: "auto approve shell", opts: toolserver.Options{Approver: toolserver.AutoApprove}, path: "/v1/shell/approve"},
		{name: "approved", opts: toolserver.Options{Approver: &approverFuncs{tool: approve}}, path: "/v1/tools/call", wantCall: true},
		{name: "rejected with reason",
			opts: toolserver.Options{Approver: &approverFuncs{tool: func(context.Context, *toolserver.ToolCall) error {
				return &toolserver.RejectedError{Reason: "not on Sundays"}
			}}},
			path: "/v1/tools/call", wantKind: "rejected", wantMsg: "not on Sundays"},
		{name: "rejected sentinel wrapped",
			opts: toolserver.Options{Approver: &approverFuncs{shell: func(context.Context, string) error {
				return fmt.Errorf("%w: user said no", toolserver.ErrRejected)
			}}},
			path: "/v1/shell/approve", wantKind: "rejected", wantMsg: "user said no"},
		{name: "approver failure rejects without details",
			opts: toolserver.Options{Approver: &approverFuncs{tool: func(context.Context, *toolserver.ToolCall) error {
				return errors.New("secret=hunter2")
			}}},
			path: "/v1/tools/call", wantKind: "rejected", wantMsg: "approval failed on the host"},
		{name: "approver timeout",
			opts: toolserver.Options{Approver: &approverFuncs{tool: func(context.Context, *toolserver.ToolCall) error {
				return fmt.Errorf("ui: %w", toolserver.ErrApprovalTimeout)
			}}},
			path: "/v1/tools/call", wantKind: "approval_timeout"},
		{name: "host approval timeout",
			opts: toolserver.Options{ApprovalTimeout: 50 * time.Millisecond, Approver: &approverFuncs{shell: func(ctx context.Context, _ string) error {
				<-ctx.Done()
				return ctx.Err()
			}}},
			path: "/v1/shell/approve", wantKind: "approval_timeout", wantMsg: "50ms"},
		{name: "tools auto, shell still rejected by nil approver",
			opts: toolserver.Options{AutoApproveTools: true}, path: "/v1/shell/approve", wantKind: "rejected"},
		{name: "tools auto skips the approver",
			opts: toolserver.Options{AutoApproveTools: true, Approver: &approverFuncs{}}, path: "/v1/tools/call", wantCall: true},
		{name: "tools auto, shell asks the approver",
			opts: toolserver.Options{AutoApproveTools: true, Approver: &approverFuncs{shell: func(context.Context, string) error {
				return &toolserver.RejectedError{Reason: "shell stays gated"}
			}}},
			path: "/v1/shell/approve", wantKind: "rejected", wantMsg: "shell stays gated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.CheckGoroutines(t)
			c := &fakeCaller{}
			opts := tc.opts
			ts := start(t, c, &opts)
			body := call("srv", "tool", map[string]any{"a": 1})
			if tc.path == "/v1/shell/approve" {
				body = `{"command":"ls -la"}`
			}
			got := ts.do(t, req{path: tc.path, body: body})
			if got.kind != tc.wantKind || !strings.Contains(got.msg, tc.wantMsg) {
				t.Errorf("got HTTP %d kind %q message %q; want kind %q with %q", got.status, got.kind, got.msg, tc.wantKind, tc.wantMsg)
			}
			if strings.Contains(got.msg, "hunter2") {
				t.Errorf("approver's error leaked to the kernel: %q", got.msg)
			}
			if (c.n() == 1) != tc.wantCall {
				t.Errorf("caller called %d times; want called=%v", c.n(), tc.wantCall)
			}
			if tc.wantKind == "" && tc.path == "/v1/shell/approve" && string(got.body) != `{"approved":true}` {
				t.Errorf("shell approval body = %s; want {\"approved\":true}", got.body)
			}
		})
	}
}

func TestShellCommandExact(t *testing.T) {
	testenv.CheckGoroutines(t)
	var seen []string
	var mu sync.Mutex
	ap := &approverFuncs{shell: func(_ context.Context, cmd string) error {
		mu.Lock()
		seen = append(seen, cmd)
		mu.Unlock()
		return nil
	}}
	ts := start(t, &fakeCaller{}, &toolserver.Options{Approver: ap})
	cmd := "echo \"$HOME\" 'h\u00e9\u2713' \\\n\t| tr a b; rm -rf ${X}"
	b, _ := json.Marshal(map[string]string{"command": cmd})
	if got := ts.do(t, req{path: "/v1/shell/approve", body: string(b)}); got.status != 200 {
		t.Fatalf("HTTP %d %s", got.status, got.msg)
	}
	if len(seen) != 1 || seen[0] != cmd {
		t.Errorf("approver saw %q; want exactly %q", seen, cmd)
	}
}

func TestCallResults(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       toolserver.Options
		fn         func(ctx context.Context, server, tool string, args map[string]any) (*mcp.CallToolResult, error)
		wantStatus int
		wantKind   string
		wantBody   string // substring of the answer (the result or the message)
	}{
		{name: "text result",
			fn: func(context.Context, string, string, map[string]any) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hi"}}}, nil
			},
			wantStatus: 200, wantBody: `"content":[{"type":"text","text":"hi"}]`},
		{name: "tool error is a result",
			fn: func(context.Context, string, string, map[string]any) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "bad input"}}}, nil
			},
			wantStatus: 200, wantBody: `"isError":true`},
		{name: "image and structured",
			fn: func(context.Context, string, string, map[string]any) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{
					Content:           []mcp.Content{&mcp.ImageContent{Data: []byte{0x89, 'P', 'N', 'G'}, MIMEType: "image/png"}},
					StructuredContent: map[string]any{"n": 1},
				}, nil
			},
			wantStatus: 200, wantBody: `{"type":"image","mimeType":"image/png","data":"iVBORw=="}`},
		{name: "call failed",
			fn: func(context.Context, string, string, map[string]any) (*mcp.CallToolResult, error) {
				return nil, errors.New(`tool "nope" not found`)
			},
			wantStatus: 502, wantKind: "tool_error", wantBody: `tool call srv.tool failed: tool "nope" not found`},
		{name: "call timeout", opts: toolserver.Options{CallTimeout: 50 * time.Millisecond},
			fn: func(ctx context.Context, _, _ string, _ map[string]any) (*mcp.CallToolResult, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			},
			wantStatus: 504, wantKind: "timeout", wantBody: "50ms"},
		{name: "nil result",
			fn: func(context.Context, string, string, map[string]any) (*mcp.CallToolResult, error) {
				return nil, nil
			},
			wantStatus: 500, wantKind: "internal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.CheckGoroutines(t)
			opts := tc.opts
			opts.Approver = toolserver.AutoApprove
			ts := start(t, &fakeCaller{fn: tc.fn}, &opts)
			got := ts.do(t, req{path: "/v1/tools/call", body: call("srv", "tool", nil)})
			text := string(got.body)
			if got.kind != "" {
				text = got.msg
			}
			if got.status != tc.wantStatus || got.kind != tc.wantKind || !strings.Contains(text, tc.wantBody) {
				t.Errorf("got HTTP %d kind %q: %s\nwant HTTP %d kind %q containing %s", got.status, got.kind, text, tc.wantStatus, tc.wantKind, tc.wantBody)
			}
		})
	}
}

func TestBadRequests(t *testing.T) {
	testenv.CheckGoroutines(t)
	c := &fakeCaller{}
	ts := start(t, c, &toolserver.Options{Approver: toolserver.AutoApprove, MaxBodyBytes: 1024})
	for _, tc := range []struct {
		name       string
		r          req
		wantStatus int
		wantMsg    string
	}{
		{"unknown path", req{path: "/v1/approve", body: "{}"}, 404, "no endpoint"},
		{"GET on call", req{method: "GET", path: "/v1/tools/call"}, 405, "use POST"},
		{"POST on health", req{path: "/v1/health", body: "{}"}, 405, "use GET"},
		{"no content type", req{path: "/v1/tools/call", ctype: "-", body: call("s", "t", nil)}, 415, "application/json"},
		{"form content type", req{path: "/v1/tools/call", ctype: "application/x-www-form-urlencoded", body: call("s", "t", nil)}, 415, "application/json"},
		{"too large", req{path: "/v1/tools/call", body: call("s", "t", map[string]string{"x": strings.Repeat("a", 2000)})}, 413, "1024 bytes"},
		{"not json", req{path: "/v1/tools/call", body: "server=s"}, 400, "decode"},
		{"unknown field", req{path: "/v1/tools/call", body: `{"server":"s","tool":"t","command":"sh"}`}, 400, "command"},
		{"trailing data", req{path: "/v1/tools/call", body: call("s", "t", nil) + `{}`}, 400, "after the JSON"},
		{"args not an object", req{path: "/v1/tools/call", body: `{"server":"s","tool":"t","args":[1]}`}, 400, "decode"},
		{"empty server", req{path: "/v1/tools/call", body: call("", "t", nil)}, 400, "server is empty"},
		{"empty tool", req{path: "/v1/tools/call", body: call("s", "", nil)}, 400, "tool is empty"},
		{"control char in tool", req{path: "/v1/tools/call", body: call("s", "t\nApprove? yes", nil)}, 400, "control"},
		{"long server name", req{path: "/v1/tools/call", body: call(strings.Repeat("s", 300), "t", nil)}, 400, "limit"},
		{"invalid utf-8", req{path: "/v1/shell/approve", body: "{\"command\":\"ls \xff\"}"}, 400, "UTF-8"},
		{"empty command", req{path: "/v1/shell/approve", body: `{"command":""}`}, 400, "command"},
		{"missing command", req{path: "/v1/shell/approve", body: `{}`}, 400, "command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ts.do(t, tc.r)
			if got.status != tc.wantStatus || got.kind != "bad_request" || !strings.Contains(got.msg, tc.wantMsg) {
				t.Errorf("got HTTP %d kind %q %q; want HTTP %d bad_request containing %q", got.status, got.kind, got.msg, tc.wantStatus, tc.wantMsg)
			}
		})
	}
	if c.n() != 0 {
		t.Errorf("caller called %d times by bad requests; want 0", c.n())
	}
}

// TestConcurrentCalls proves that calls run at the same time: the Caller
// lets no call finish before all of them have arrived.
func TestConcurrentCalls(t *testing.T) {
	testenv.CheckGoroutines(t)
	const n = 20
	var arrived atomic.Int32
	all := make(chan struct{})
	c := &fakeCaller{fn: func(ctx context.Context, _, _ string, args map[string]any) (*mcp.CallToolResult, error) {
		if arrived.Add(1) == n {
			close(all)
		}
		select {
		case <-all:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint(args["i"])}}}, nil
	}}
	ts := start(t, c, &toolserver.Options{Approver: toolserver.AutoApprove, CallTimeout: 10 * time.Second, MaxConcurrentCalls: n})
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Go(func() {
			got := ts.do(t, req{path: "/v1/tools/call", viaTCP: i%2 == 0, body: call("s", "t", map[string]int{"i": i})})
			want := fmt.Sprintf(`"text":"%d"`, i)
			if got.status != 200 || !strings.Contains(string(got.body), want) {
				errs <- fmt.Sprintf("call %d: HTTP %d %s %s", i, got.status, got.body, got.msg)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestCloseCancelsInFlight checks that Close cancels a pending approval,
// answers it with "unavailable", and is idempotent and concurrent-safe.
func TestCloseCancelsInFlight(t *testing.T) {
	testenv.CheckGoroutines(t)
	entered := make(chan struct{})
	cancelled := make(chan error, 1)
	ap := &approverFuncs{tool: func(ctx context.Context, _ *toolserver.ToolCall) error {
		close(entered)
		<-ctx.Done()
		cancelled <- ctx.Err()
		return ctx.Err()
	}}
	ts := start(t, &fakeCaller{}, &toolserver.Options{Approver: ap})
	done := make(chan reply, 1)
	go func() { done <- ts.do(t, req{path: "/v1/tools/call", body: call("s", "t", nil)}) }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("approver was not asked within 10s")
	}
	startClose := time.Now()
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := ts.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	wg.Wait()
	if d := time.Since(startClose); d > 3*time.Second {
		t.Errorf("Close took %v; want it prompt when handlers honour their context", d)
	}
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Errorf("approver's context ended with %v; want context.Canceled", err)
	}
	got := <-done
	if got.status != 503 || got.kind != "unavailable" {
		t.Errorf("in-flight request got HTTP %d %q; want 503 unavailable", got.status, got.kind)
	}
	if err := ts.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestNewOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    *toolserver.Options
		wantErr string
	}{
		{"nil options", nil, ""},
		{"given token", &toolserver.Options{Token: strings.Repeat("ab", 16)}, ""},
		{"short token", &toolserver.Options{Token: "secret"}, "at least 32"},
		{"token with space", &toolserver.Options{Token: strings.Repeat("a", 32) + " b"}, "byte ' '"},
		{"token with newline", &toolserver.Options{Token: strings.Repeat("a", 32) + "\r\nX-Evil: 1"}, `byte '\r'`},
		{"negative call timeout", &toolserver.Options{CallTimeout: -1}, "CallTimeout"},
		{"negative approval timeout", &toolserver.Options{ApprovalTimeout: -time.Second}, "ApprovalTimeout"},
		{"negative body limit", &toolserver.Options{MaxBodyBytes: -1}, "MaxBodyBytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := toolserver.New(&fakeCaller{}, tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("New: %v; want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if tc.opts != nil && tc.opts.Token != "" && s.Token() != tc.opts.Token {
				t.Errorf("Token() = %q; want the given %q", s.Token(), tc.opts.Token)
			}
		})
	}
	a, _ := toolserver.New(&fakeCaller{}, nil)
	b, _ := toolserver.New(&fakeCaller{}, nil)
	defer a.Close()
	defer b.Close()
	if len(a.Token()) != 64 || strings.Trim(a.Token(), "0123456789abcdef") != "" || a.Token() == b.Token() {
		t.Errorf("generated tokens %q and %q; want two different 64-digit hex strings", a.Token(), b.Token())
	}
}

func TestRejectedError(t *testing.T) {
	var err error = &toolserver.RejectedError{Reason: "no"}
	if !errors.Is(fmt.Errorf("wrap: %w", err), toolserver.ErrRejected) {
		t.Error("errors.Is(*RejectedError, ErrRejected) = false; want true")
	}
	if errors.Is(err, toolserver.ErrApprovalTimeout) {
		t.Error("errors.Is(*RejectedError, ErrApprovalTimeout) = true; want false")
	}
	if got := err.Error(); got != "rejected by the application: no" {
		t.Errorf("Error() = %q", got)
	}
}

// TestCloseBounded checks that Close returns in bounded time, with an
// error, when a Caller ignores its context.
func TestCloseBounded(t *testing.T) {
	testenv.CheckGoroutines(t)
	defer toolserver.SetShutdownTimeout(200 * time.Millisecond)()
	// On the bubble's clock the bound is exact, whatever the load.
	synctest.Test(t, testCloseBounded)
}

func testCloseBounded(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	c := &fakeCaller{fn: func(context.Context, string, string, map[string]any) (*mcp.CallToolResult, error) {
		close(entered)
		<-release // ignores ctx on purpose
		return text("late"), nil
	}}
	ts := startOn(t, testenv.NewNetwork(), c, &toolserver.Options{Approver: toolserver.AutoApprove})
	done := make(chan struct{})
	go func() {
		defer close(done)
		hr, _ := http.NewRequest("POST", "http://localhost/v1/tools/call", strings.NewReader(call("s", "t", nil)))
		hr.Header.Set("Authorization", "Bearer "+ts.Token())
		hr.Header.Set("Content-Type", "application/json")
		if resp, err := ts.unix.Do(hr); err == nil {
			resp.Body.Close()
		}
	}()
	<-entered
	begin := time.Now()
	err := ts.Close()
	if d := time.Since(begin); d != 200*time.Millisecond {
		t.Errorf("Close took %v with a stuck Caller; want the shutdown timeout, 200ms", d)
	}
	if err == nil || !strings.Contains(err.Error(), "ignores its context") {
		t.Errorf("Close = %v; want an error about a handler that ignores its context", err)
	}
	if err2 := ts.Close(); err2 != err {
		t.Errorf("second Close = %v; want the first result %v", err2, err)
	}
	close(release)
	<-done
}
