package mcpserver

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestRedteam4RegisteredServerReach: a stdio server that alice registers
// runs in the sandbox (by default), and its sandbox unmasks the files its
// own config names (so that its script in the workspace runs). Alice
// names, in its args and env, what she must not reach: bob's file in his
// folder, bob's registry, the workspace's .env (masked from every
// kernel), the state folder's session records, the workspace root. Her
// server must see none of them; her own file is the control.
func TestRedteam4RegisteredServerReach(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, ".env"), []byte("OPERATOR_KEY=dot-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := newGatedServer(t, &Options{Workspace: ws, HTTP: HTTPOptions{Principals: twoPrincipals}, Sandbox: ipybox.DefaultSandbox()})
	url := serveHTTP(t, srv)
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	bob := connectHTTPAs(t, url, bobTok, newVersion, nil)
	hb := createSession(t, bob)
	runIn(t, bob, hb, "open('bobs-secret.txt', 'w').write('bob')")
	ha := createSession(t, alice)
	runIn(t, alice, ha, "open('alices.txt', 'w').write('alice')")
	bobs := filepath.Join(ws, "bob", "bobs-secret.txt")
	if _, err := os.Stat(bobs); err != nil {
		t.Fatalf("bob's file is not in his folder: %v", err)
	}
	targets := []struct {
		name, path string
		want       bool
	}{
		{"her own file (control)", filepath.Join(ws, "alice", "alices.txt"), true},
		{"bob's file", bobs, false},
		{"bob's registry", filepath.Join(ws, "bob", ".ipybox", "servers.json"), false},
		{"the workspace's .env", filepath.Join(ws, ".env"), false},
		{"the state folder", filepath.Join(ws, ".ipybox", "sessions"), false},
		{"bob's file through the workspace root's ..", filepath.Join(ws, "alice", "..", "bob", "bobs-secret.txt"), false},
	}
	for i, tg := range targets {
		name := fmt.Sprintf("reach%d", i)
		params := map[string]any{"command": py, "args": []string{"-c", probeSrv, tg.path, filepath.Dir(tg.path)},
			"env": map[string]string{"CANARY": tg.path, "KEY": tg.path}}
		if res := call(t, alice, "register_mcp_server", map[string]any{"server_name": name, "server_params": params, "session": ha}); res.IsError {
			t.Fatalf("%s: register: %s", tg.name, text(res))
		}
		got := runIn(t, alice, ha, fmt.Sprintf("from mcptools.%s.probe import Params, run\nprint(run(Params()))", name))
		seen := strings.Contains(got, "canary-visible=True") || strings.Contains(got, "key-readable=True")
		if seen != tg.want {
			t.Errorf("%s (%s): alice's registered server says %q", tg.name, tg.path, got)
		}
	}
}

// TestRedteam4CallOthersServer: bob registers a server; alice's kernel
// calls it by name through the tool server directly (ipybox_runtime's
// run_tool, no generated module needed), from a session made before and
// one made after his registration, in its name's case variants. Each call
// must fail; bob's own call works (the control).
func TestRedteam4CallOthersServer(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	mark, canary := hostFiles(t)
	srv := newServer(t, &Options{Workspace: t.TempDir(), HTTP: HTTPOptions{Principals: twoPrincipals}, Sessions: SessionOptions{NoZygote: true}})
	url := serveHTTP(t, srv)
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	bob := connectHTTPAs(t, url, bobTok, newVersion, nil)
	haBefore := createSession(t, alice)
	hb := createSession(t, bob)
	if res := call(t, bob, "register_mcp_server", map[string]any{"server_name": "bobsrv", "server_params": probeParams(t, py, mark, canary), "session": hb}); res.IsError {
		t.Fatalf("bob's registration: %s", text(res))
	}
	probe := func(name string) string {
		return fmt.Sprintf("import ipybox_runtime as rt\ntry:\n    print('ANSWER', rt.run_tool(%q, 'probe', {}))\nexcept Exception as e:\n    print('REFUSED', type(e).__name__)", name)
	}
	if got := runIn(t, bob, hb, probe("bobsrv")); !strings.Contains(got, "ANSWER") {
		t.Fatalf("bob's own call: %q", got)
	}
	haAfter := createSession(t, alice)
	for _, h := range []string{haBefore, haAfter} {
		for _, name := range []string{"bobsrv", "BOBSRV", "bobsrv ", "../bob/bobsrv", "bob/bobsrv"} {
			if got := runIn(t, alice, h, probe(name)); strings.Contains(got, "ANSWER") {
				t.Errorf("alice's kernel called bob's server as %q: %q", name, got)
			}
		}
	}
}

// TestRedteam4MetricsOfOthers: /metrics takes any principal's token. Bob
// registers a server under a name of his and his kernel calls it; alice
// reads the metrics with her token. What bob's servers are called, and
// how often he calls them, is his (invariant 15): it must not be in what
// alice reads.
func TestRedteam4MetricsOfOthers(t *testing.T) {
	t.Skip("BREAK: /metrics, readable with any principal's token, labels tool calls by server name across principals: alice sees the names of bob's servers and his call counts; see /work/notes/attack.md")
	t.Parallel()
	py := testenv.NeedsPython(t)
	mark, canary := hostFiles(t)
	srv := newServer(t, &Options{Workspace: t.TempDir(), HTTP: HTTPOptions{Principals: twoPrincipals}, Sessions: SessionOptions{NoZygote: true}})
	url := serveHTTP(t, srv)
	bob := connectHTTPAs(t, url, bobTok, newVersion, nil)
	hb := createSession(t, bob)
	const name = "bobs_private_bank_rt4"
	if res := call(t, bob, "register_mcp_server", map[string]any{"server_name": name, "server_params": probeParams(t, py, mark, canary), "session": hb}); res.IsError {
		t.Fatalf("bob's registration: %s", text(res))
	}
	runIn(t, bob, hb, fmt.Sprintf("from mcptools.%s.probe import Params, run\nrun(Params())", name))
	m := httptest.NewServer(srv.MetricsHandler())
	t.Cleanup(m.Close)
	req, _ := http.NewRequest("GET", m.URL, nil)
	req.Header.Set("Authorization", "Bearer "+aliceTok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("alice's metrics: %d %s", resp.StatusCode, body)
	}
	if strings.Contains(string(body), name) {
		t.Errorf("alice's /metrics names bob's server %s", name)
	}
}
