package mcpserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// probeSrv is a stdio MCP server in stdlib Python. At start it writes
// $MARK (a host path, when it runs on the host); its one tool, probe,
// says whether $CANARY (a host file outside the workspace) is visible.
const probeSrv = `import json, os, sys
try: open(os.environ.get("MARK", "/nonexistent/mark"), "w").write("started")
except OSError: pass
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line); i = m.get("id")
    if i is None: continue
    meth = m.get("method")
    if meth == "initialize":
        send({"jsonrpc": "2.0", "id": i, "result": {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "probe", "version": "1"}}})
    elif meth == "tools/list":
        send({"jsonrpc": "2.0", "id": i, "result": {"tools": [{"name": "probe", "description": "what the server sees", "inputSchema": {"type": "object"}}]}})
    elif meth == "tools/call":
        try: key = open(os.environ.get("KEY", "/nonexistent")).read() != ""
        except OSError: key = False
        send({"jsonrpc": "2.0", "id": i, "result": {"content": [{"type": "text", "text": "canary-visible=%s key-readable=%s" % (os.path.exists(os.environ["CANARY"]), key)}]}})
    else:
        send({"jsonrpc": "2.0", "id": i, "error": {"code": -32601, "message": "unknown method"}})
`

// newGatedServer is newServer without the tests' AllowHostServers: the
// default an operator gets.
func newGatedServer(t *testing.T, o *Options) *Server {
	t.Helper()
	o.HTTP.AuthToken, o.Sessions.StartTimeout = testToken, 90*time.Second
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// probeParams is a stdio config of probeSrv; mark and canary are host
// paths outside the workspace.
func probeParams(t *testing.T, py, mark, canary string) map[string]any {
	return map[string]any{"command": py, "args": []string{"-c", probeSrv}, "env": map[string]string{"MARK": mark, "CANARY": canary}}
}

func hostFiles(t *testing.T) (mark, canary string) {
	dir := t.TempDir()
	canary = filepath.Join(dir, "canary")
	if err := os.WriteFile(canary, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "mark"), canary
}

// TestAttackRegisterHostServer: register_mcp_server with a stdio command
// started it on the host for any client (over HTTP, any token holder:
// remote code execution). Without a sandbox it is now refused, and the
// refusal names --allow-host-servers; the command never starts. A client's
// own sandbox settings (which could widen what the server may write) and
// "sandbox": false are refused too. A URL server, and the operator's own
// stdio servers (Options.Servers), are not affected.
func TestAttackRegisterHostServer(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	mark, canary := hostFiles(t)
	opMark, _ := hostFiles(t)
	srv := newGatedServer(t, &Options{Workspace: t.TempDir(), Servers: map[string]ipybox.ServerConfig{
		"op": {Command: py, Args: []string{"-c", probeSrv}, Env: map[string]string{"MARK": opMark, "CANARY": canary}},
	}})
	cs := connect(t, srv, nil)
	for _, v := range []struct {
		name   string
		params map[string]any
		want   string
	}{
		{"plain", probeParams(t, py, mark, canary), "--allow-host-servers"},
		{"sandbox true, none here", with(probeParams(t, py, mark, canary), "sandbox", true), "--allow-host-servers"},
		{"sandbox false", with(probeParams(t, py, mark, canary), "sandbox", false), `leave "sandbox" out`},
		{"own settings", with(probeParams(t, py, mark, canary), "sandbox", map[string]any{"filesystem": map[string]any{"allowWrite": []string{"/"}}}), `leave "sandbox" out`},
		{"type stdio", with(probeParams(t, py, mark, canary), "type", "stdio"), "--allow-host-servers"},
	} {
		res := call(t, cs, "register_mcp_server", map[string]any{"server_name": "h", "server_params": v.params})
		if !res.IsError || !strings.Contains(text(res), v.want) {
			t.Errorf("%s: %s; want a refusal naming %s", v.name, short(text(res)), v.want)
		}
	}
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("a client-registered stdio server started on the host")
	}
	// The operator's server runs on the host, as configured.
	if got := run(t, cs, "from mcptools.op.probe import Params, run\nprint(run(Params()))"); !strings.Contains(got, "canary-visible=True") {
		t.Errorf("the operator's server: %q, want it on the host", got)
	}
}

// TestRegisterServerSandboxed: with a sandbox, a client-registered stdio
// server runs in it, under the server's policy (it does not see the host
// file beside it, and what it writes to the host's /tmp stays in the
// sandbox's), and the registry records the sandbox, so that every later
// start runs it there too. With AllowHostServers it runs on the host.
func TestRegisterServerSandboxed(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	mark, canary := hostFiles(t)
	ws := t.TempDir()
	srv := newGatedServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox()})
	cs := connect(t, srv, nil)
	for i, params := range []map[string]any{probeParams(t, py, mark, canary), with(probeParams(t, py, mark, canary), "sandbox", true)} {
		name := fmt.Sprintf("boxed%d", i)
		if res := call(t, cs, "register_mcp_server", map[string]any{"server_name": name, "server_params": params}); res.IsError {
			t.Fatalf("register %s: %s", name, text(res))
		}
		if got := run(t, cs, fmt.Sprintf("from mcptools.%s.probe import Params, run\nprint(run(Params()))", name)); !strings.Contains(got, "canary-visible=False") {
			t.Errorf("%s: %q, want it sandboxed", name, got)
		}
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("the registered server started on the host")
	}
	reg, err := os.ReadFile(filepath.Join(ws, ".ipybox", "servers.json"))
	if err != nil || strings.Count(string(reg), `"sandbox"`) != 2 {
		t.Errorf("servers.json does not record both sandboxes (%v): %s", err, reg)
	}

	hostMark, _ := hostFiles(t)
	open := newGatedServer(t, &Options{Workspace: t.TempDir(), AllowHostServers: true})
	cs = connect(t, open, nil)
	if res := call(t, cs, "register_mcp_server", map[string]any{"server_name": "h", "server_params": probeParams(t, py, hostMark, canary)}); res.IsError {
		t.Fatalf("register with AllowHostServers: %s", text(res))
	}
	if _, err := os.Stat(hostMark); err != nil {
		t.Error("with AllowHostServers the server did not run on the host")
	}
}

func with(m map[string]any, k string, v any) map[string]any {
	m[k] = v
	return m
}

// TestHostServerAskedWithElicit: with --approval elicit and no sandbox, a
// client-registered stdio server is asked about like a shell command: the
// question shows the command, a decline refuses it before it starts, and
// an accept runs it on the host.
func TestHostServerAskedWithElicit(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	mark, canary := hostFiles(t)
	srv := newGatedServer(t, &Options{Workspace: t.TempDir(), Approvals: ApprovalOptions{Mode: ApprovalElicit}})
	var mu sync.Mutex
	var asked []string
	accept := false
	// Asked only of clients before 2026-07-28 (elicitation requests);
	// a 2026-07-28 client is refused, as without elicitation.
	if res := call(t, connect(t, srv, &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{}}, nil
	}}), "register_mcp_server", map[string]any{"server_name": "h", "server_params": probeParams(t, py, mark, canary)}); !res.IsError || !strings.Contains(text(res), "--allow-host-servers") {
		t.Errorf("a 2026-07-28 client: %s", short(text(res)))
	}
	cs := connectAt(t, srv, "2025-11-25", &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, r.Params.Message)
		if accept {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{}}, nil
		}
		return &mcp.ElicitResult{Action: "decline"}, nil
	}})
	params := probeParams(t, py, mark, canary)
	res := call(t, cs, "register_mcp_server", map[string]any{"server_name": "h", "server_params": params})
	if !res.IsError || !strings.Contains(text(res), "did not allow") {
		t.Errorf("declined: %s", short(text(res)))
	}
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("a declined server started on the host")
	}
	mu.Lock()
	accept = true
	mu.Unlock()
	if res := call(t, cs, "register_mcp_server", map[string]any{"server_name": "h", "server_params": params}); res.IsError {
		t.Fatalf("accepted: %s", text(res))
	}
	if _, err := os.Stat(mark); err != nil {
		t.Error("an accepted server did not run on the host")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 2 || !strings.Contains(asked[0], py) || !strings.Contains(asked[0], "unsandboxed") {
		t.Errorf("the questions do not show the command: %q", asked)
	}
}

// TestSandboxedServerOwnFiles: a client-registered server, sandboxed, runs
// a script of its own in the workspace (the files a config names are
// hidden from kernels, but not from that server's own sandbox), and still
// cannot read a key file that the operator's server names, by naming it
// too.
func TestSandboxedServerOwnFiles(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	_, canary := hostFiles(t)
	key, script := filepath.Join(ws, "op-key.txt"), filepath.Join(ws, "own.py")
	if err := os.WriteFile(key, []byte("operator secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, []byte(probeSrv), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := newGatedServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox(), Servers: map[string]ipybox.ServerConfig{
		"op": {Command: py, Args: []string{"-c", probeSrv, "--key-file", key}, Env: map[string]string{"CANARY": canary, "KEY": key}},
	}})
	cs := connect(t, srv, nil)
	if got := run(t, cs, "from mcptools.op.probe import Params, run\nprint(run(Params()))"); !strings.Contains(got, "key-readable=True") {
		t.Fatalf("the operator's server cannot read its key: %q", got)
	}
	params := map[string]any{"command": py, "args": []string{script, "--key-file", key}, "env": map[string]string{"CANARY": canary, "KEY": key}}
	if res := call(t, cs, "register_mcp_server", map[string]any{"server_name": "own", "server_params": params}); res.IsError {
		t.Fatalf("a sandboxed server with its script in the workspace: %s", text(res))
	}
	if got := run(t, cs, "from mcptools.own.probe import Params, run\nprint(run(Params()))"); !strings.Contains(got, "key-readable=False") || !strings.Contains(got, "canary-visible=False") {
		t.Errorf("the client's server: %q, want it sandboxed, without the operator's key", got)
	}
}

// TestHostPipArgs: on the host pip runs in the private folder, so the
// workspace's relative paths are made absolute, and nothing else changes.
func TestHostPipArgs(t *testing.T) {
	got := hostPipArgs("/ws", []string{"install", "--target", "/v/site", "./dist/x.whl", "dist/y.whl", ".", "numpy<2", "pkg @ https://h/p.whl", "git+https://h/r"})
	want := []string{"install", "--target", "/v/site", "/ws/dist/x.whl", "/ws/dist/y.whl", "/ws", "numpy<2", "pkg @ https://h/p.whl", "git+https://h/r"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("hostPipArgs = %q, want %q", got, want)
	}
}
