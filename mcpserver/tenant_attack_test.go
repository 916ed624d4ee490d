package mcpserver

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// Two principals of one server, as the attacks of issue 34.3 set them up.
const aliceTok, bobTok = "alice-token-0123456789", "bob-token-0123456789"

var twoPrincipals = map[string]string{"alice": aliceTok, "bob": bobTok}

// wheelBytes returns a wheel of distribution name whose purelib holds
// files (top-level names: modules, .pth files).
func wheelBytes(t *testing.T, name string, files map[string]string) []byte {
	t.Helper()
	info := name + "-0.1.dist-info/"
	all := map[string]string{
		info + "METADATA": "Metadata-Version: 2.1\nName: " + name + "\nVersion: 0.1\n",
		info + "WHEEL":    "Wheel-Version: 1.0\nGenerator: ipybox-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	for k, v := range files {
		all[k] = v
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, n := range names {
		w, _ := zw.Create(n)
		w.Write([]byte(all[n]))
		sum := sha256.Sum256([]byte(all[n]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", n, base64.RawURLEncoding.EncodeToString(sum[:]), len(all[n]))
	}
	fmt.Fprintf(&record, "%sRECORD,,\n", info)
	w, _ := zw.Create(info + "RECORD")
	w.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestAttackTenantInstall: alice's install_package of a wheel that her
// kernel wrote into her workspace, with a .pth file, a module named as
// one that bob imports, and a sitecustomize, reaches nothing of bob's:
// his next kernel (a fresh one, and one started before) runs none of it,
// imports none of it, and his folder holds none of it. Before, the
// principals shared one virtualenv, and bob's next kernel ran her .pth.
func TestAttackTenantInstall(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	ws := t.TempDir()
	srv := newServer(t, &Options{Workspace: ws, HTTP: HTTPOptions{Principals: twoPrincipals}, Sessions: SessionOptions{NoZygote: true}})
	url := serveHTTP(t, srv)
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	bob := connectHTTPAs(t, url, bobTok, newVersion, nil)
	hb := createSession(t, bob)
	runIn(t, bob, hb, "import builtins")
	whl := wheelBytes(t, "alice_evil", map[string]string{
		"zz_alice_evil.pth": "import builtins; builtins.ALICE_PTH = 'ran'\n",
		"bobs_helper.py":    "ALICE = 'shadowed'\n",
		"sitecustomize.py":  "import builtins; builtins.ALICE_SITE = 'ran'\n",
	})
	ha := createSession(t, alice)
	name := "alice_evil-0.1-py3-none-any.whl"
	runIn(t, alice, ha, fmt.Sprintf("import base64\nopen(%q, 'wb').write(base64.b64decode(%q))", name, base64.StdEncoding.EncodeToString(whl)))
	res := call(t, alice, "install_package", map[string]any{"package_name": "./" + name, "session": ha})
	if res.IsError {
		t.Fatalf("alice's install: %s", text(res))
	}
	// Her own fresh kernel gets what she installed: the test can fail.
	ha2 := createSession(t, alice)
	if got := runIn(t, alice, ha2, "import builtins, bobs_helper\nprint(getattr(builtins, 'ALICE_PTH', None), bobs_helper.ALICE)"); !strings.Contains(got, "ran shadowed") {
		t.Fatalf("alice's own next kernel lacks her package, so the test proves nothing: %q", got)
	}
	probe := `import builtins, importlib.util, sys
print('pth', getattr(builtins, 'ALICE_PTH', None))
print('site', getattr(builtins, 'ALICE_SITE', None))
print('module', importlib.util.find_spec('bobs_helper'))
print('paths', [p for p in sys.path if 'alice' in p])`
	want := "pth None\nsite None\nmodule None\npaths []"
	hb2 := createSession(t, bob)
	for _, h := range []string{hb, hb2} {
		if got := runIn(t, bob, h, probe); got != want {
			t.Errorf("bob's kernel sees alice's install:\n%s", got)
		}
	}
	if got := runIn(t, bob, hb2, "import os\nprint(os.path.exists("+fmt.Sprintf("%q", name)+"))"); got != "False" {
		t.Errorf("bob's folder holds alice's wheel: %q", got)
	}
	if _, err := os.Stat(filepath.Join(ws, "alice", name)); err != nil {
		t.Errorf("alice's wheel is not in her folder: %v", err)
	}
}

// TestAttackTenantRegistration: alice registers a server under the name
// of bob's. Bob's tool call goes to his own server still: from his
// running kernel (the in-memory table), from a new session (the registry
// file), and after a restart (the file, read by a new server); alice's
// mcptools/ module is not in his folder. Before, the registry was one.
func TestAttackTenantRegistration(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	bin := mcptest.Build(t)
	ws := t.TempDir()
	opts := &Options{Workspace: ws, HTTP: HTTPOptions{Principals: twoPrincipals}, Sessions: SessionOptions{NoZygote: true}}
	srv := newServer(t, opts)
	url := serveHTTP(t, srv)
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	bob := connectHTTPAs(t, url, bobTok, newVersion, nil)
	hb := createSession(t, bob)
	reg := func(cs *mcp.ClientSession, h, name, who string) {
		t.Helper()
		res := call(t, cs, "register_mcp_server", map[string]any{"server_name": name, "session": h,
			"server_params": map[string]any{"command": bin, "env": map[string]string{"WHO": who}}})
		if res.IsError {
			t.Fatalf("register %s for %s: %s", name, who, text(res))
		}
	}
	reg(bob, hb, "work", "bob")
	const whoCell = "from mcptools.work.env import Params, run\nprint(run(Params(name='WHO')))"
	if got := runIn(t, bob, hb, whoCell); got != "bob" {
		t.Fatalf("bob's server before: %q", got)
	}
	ha := createSession(t, alice)
	reg(alice, ha, "work", "alice")
	reg(alice, ha, "alices", "alice")
	if got := runIn(t, alice, ha, whoCell); got != "alice" {
		t.Fatalf("alice's own server: %q (the test proves nothing)", got)
	}
	check := func(cs *mcp.ClientSession, h, when string) {
		t.Helper()
		if got := runIn(t, cs, h, whoCell); got != "bob" {
			t.Errorf("%s, bob's call went to %q's server", when, got)
		}
		if got := runIn(t, cs, h, "import os\nprint(os.path.exists('mcptools/alices'))"); got != "False" {
			t.Errorf("%s, bob's mcptools/ holds alice's server: %q", when, got)
		}
	}
	check(bob, hb, "in his running kernel")
	check(bob, createSession(t, bob), "in a new session")
	srv.Close()
	srv2 := newServer(t, opts)
	bob2 := connectHTTPAs(t, serveHTTP(t, srv2), bobTok, newVersion, nil)
	check(bob2, createSession(t, bob2), "after a restart")
	for who, file := range map[string]string{"alice": filepath.Join(ws, "alice", ".ipybox", "servers.json"), "bob": filepath.Join(ws, "bob", ".ipybox", "servers.json")} {
		b, err := os.ReadFile(file)
		if err != nil || !strings.Contains(string(b), `"`+who+`"`) || strings.Contains(string(b), `"alices"`) != (who == "alice") {
			t.Errorf("%s's registry %s: %v\n%s", who, file, err, b)
		}
	}
}

// TestAttackTenantRememberedAnswers: bob answers his approvals "allow
// always" with a widened rule, and "allow for the session"; alice's
// same calls are still asked about (and refused, as she declines). The
// rule bob remembered names him, the audit rows name each principal, and
// the client's name is recorded as its claim. Before, bob's rule landed
// in the one policy file for everyone.
func TestAttackTenantRememberedAnswers(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	p, file := loadPolicy(t, "")
	srv := newServer(t, &Options{Workspace: t.TempDir(), HTTP: HTTPOptions{Principals: twoPrincipals}, Approvals: ApprovalOptions{Mode: ApprovalElicit, Policy: p}, Sessions: SessionOptions{NoZygote: true}})
	url := serveHTTP(t, srv)
	var mu sync.Mutex
	asked := map[string][]string{}
	handler := func(who string, answer func(cmd string) *mcp.ElicitResult) *mcp.ClientOptions {
		return &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			var m map[string]any
			metaOf(t, r.Params.Meta, approvalMetaKey, &m)
			cmd, _ := m["command"].(string)
			mu.Lock()
			asked[who] = append(asked[who], cmd)
			mu.Unlock()
			return answer(cmd), nil
		}}
	}
	bob := connectHTTPAs(t, url, bobTok, newVersion, handler("bob", func(cmd string) *mcp.ElicitResult {
		switch cmd {
		case "echo one":
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "allow-always", "rule": "shell echo *"}}
		case "true":
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "allow-session", "rule": "shell true *"}}
		}
		return &mcp.ElicitResult{Action: "decline"}
	}))
	alice := connectHTTPAs(t, url, aliceTok, newVersion, handler("alice", func(string) *mcp.ElicitResult {
		return &mcp.ElicitResult{Action: "decline"}
	}))
	hb := createSession(t, bob)
	runIn(t, bob, hb, shellCell+"sh('echo one'); sh('echo two'); sh('true'); sh('true x')")
	mu.Lock()
	if got := strings.Join(asked["bob"], "|"); got != "echo one|true" {
		t.Errorf("bob was asked %q, want echo one|true (his answers count for him)", got)
	}
	mu.Unlock()
	ha := createSession(t, alice)
	out := runIn(t, alice, ha, shellCell+"sh('echo two'); sh('true')")
	mu.Lock()
	if got := strings.Join(asked["alice"], "|"); got != "echo two|true" {
		t.Errorf("alice was asked %q, want echo two|true: bob's answers count for her", got)
	}
	mu.Unlock()
	if strings.Count(out, "ApprovalRejectedError") != 2 {
		t.Errorf("alice's calls, which she declined:\n%s", out)
	}
	policyText, _ := os.ReadFile(file)
	if !strings.Contains(string(policyText), "allow principal=bob shell echo *") || strings.Contains(string(policyText), "\nallow shell echo *") {
		t.Errorf("the remembered rule does not name bob:\n%s", policyText)
	}
	logText, _ := os.ReadFile(filepath.Join(filepath.Dir(file), "log.jsonl"))
	for _, w := range []string{`"principal":"bob"`, `"principal":"alice"`, `the client says it is \"test\"`} {
		if !strings.Contains(string(logText), w) {
			t.Errorf("the audit log lacks %s:\n%s", w, logText)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(string(logText)), "\n") {
		if !strings.Contains(line, `"principal":`) {
			t.Errorf("an audit row names no principal: %s", line)
		}
	}
}

// TestAttackConfinementDowngrade: a session saved by a sandboxed kernel,
// with a module its kernel wrote into its package folder, is not
// restored by a server that runs kernels unsandboxed (nor with other
// sandbox settings): the first result says why, its names are not back,
// and its package folder is not on the path (it is gone). A session
// saved unsandboxed comes back into the sandbox (a stronger one).
// Before, the unsandboxed kernel unpickled the sandboxed kernel's data.
func TestAttackConfinementDowngrade(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	save := func(sb *ipybox.SandboxConfig) string {
		t.Helper()
		srv := newServer(t, &Options{Workspace: ws, Sandbox: sb, Sessions: SessionOptions{NoZygote: true}})
		cs := connectHTTPAs(t, serveHTTP(t, srv), testToken, newVersion, nil)
		h := createSession(t, cs)
		runIn(t, cs, h, `import sys, os
x = 42
pkg = [p for p in sys.path if '/.ipybox/packages/' in p][0]
open(os.path.join(pkg, 'planted_mod.py'), 'w').write('PLANTED = 1\n')`)
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		return h
	}
	restore := func(sb *ipybox.SandboxConfig, h string) string {
		t.Helper()
		srv := newServer(t, &Options{Workspace: ws, Sandbox: sb, Sessions: SessionOptions{NoZygote: true}})
		cs := connectHTTPAs(t, serveHTTP(t, srv), testToken, newVersion, nil)
		return runIn(t, cs, h, `import sys, importlib.util
print('x', globals().get('x'))
print('mod', importlib.util.find_spec('planted_mod') is not None)
print('pkgs', len([p for p in sys.path if '/.ipybox/packages/' in p]))`)
	}
	other := ipybox.DefaultSandbox()
	other.Network.AllowedDomains = append(other.Network.AllowedDomains, "example.com")
	for _, c := range []struct {
		name     string
		from, to *ipybox.SandboxConfig
		kept     bool
	}{
		{"sandbox to none", ipybox.DefaultSandbox(), nil, false},
		{"sandbox to other settings", ipybox.DefaultSandbox(), other, false},
		{"none to sandbox", nil, ipybox.DefaultSandbox(), true},
	} {
		h := save(c.from)
		got := restore(c.to, h)
		restored := strings.Contains(got, "x 42") && strings.Contains(got, "mod True")
		if restored != c.kept {
			t.Errorf("%s: restored %v, want %v:\n%s", c.name, restored, c.kept, got)
		}
		if !c.kept && (!strings.Contains(got, "restored only under the confinement that wrote it") || !strings.Contains(got, "mod False")) {
			t.Errorf("%s: no note, or the package folder is on the path:\n%s", c.name, got)
		}
	}
}

// TestAttackTenantView: a sandboxed (or container) kernel of alice's sees nothing of
// bob's folder, nor the workspace above hers: his file in her folder
// (before, they shared one), listing his folder or the workspace, reading bob's
// file by its host path, writing into his venv or registry, and a link
// to his folder all fail. Alice's own folder is writable (the test can
// fail).
func TestAttackTenantView(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	for _, backend := range []string{"sandbox", "container"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			o := &Options{Workspace: t.TempDir(), HTTP: HTTPOptions{Principals: twoPrincipals}, Sessions: SessionOptions{NoZygote: true}}
			if backend == "sandbox" {
				testenv.NeedsTool(t, "bwrap")
				o.Sandbox = ipybox.DefaultSandbox()
			} else {
				testenv.NeedsDocker(t)
				o.Container = &ipybox.ContainerConfig{}
			}
			tenantView(t, o)
		})
	}
}

func tenantView(t *testing.T, o *Options) {
	srv := newServer(t, o)
	url := serveHTTP(t, srv)
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	bob := connectHTTPAs(t, url, bobTok, newVersion, nil)
	runIn(t, bob, createSession(t, bob), "open('bobs-secret.txt', 'w').write('bob')")
	bobDir := filepath.Join(srv.Workspace(), "bob")
	cell := fmt.Sprintf(`import os
def try_(what, f):
    try:
        r = f()
        print(what, 'OK', repr(r)[:80])
    except Exception as e:
        print(what, 'refused', type(e).__name__)
B = %q
try_('read', lambda: open(os.path.join(B, 'bobs-secret.txt')).read())
try_('read-here', lambda: open('bobs-secret.txt').read())
try_('list-bob', lambda: os.listdir(B))
try_('list-parent', lambda: [n for n in os.listdir('..') if n == 'bob'] or 1/0)
try_('write-venv', lambda: open(os.path.join(B, '.ipybox', 'venv', 'x.pth'), 'w').write('import os'))
try_('write-registry', lambda: open(os.path.join(B, '.ipybox', 'servers.json'), 'w').write('{}'))
try_('link', lambda: (os.symlink(B, 'to-bob'), open('to-bob/bobs-secret.txt').read()))
try_('own', lambda: open('mine.txt', 'w').write('a'))`, bobDir)
	got := runIn(t, alice, createSession(t, alice), cell)
	for _, w := range []string{"read refused", "read-here refused", "list-bob refused", "list-parent refused", "write-venv refused", "write-registry refused", "link refused", "own OK"} {
		if !strings.Contains(got, w) {
			t.Errorf("alice's sandboxed kernel: want %q:\n%s", w, got)
		}
	}
	if b, err := os.ReadFile(filepath.Join(bobDir, "bobs-secret.txt")); err != nil || string(b) != "bob" {
		t.Errorf("bob's file: %q %v", b, err)
	}
}

// TestAttackTenantOAuth: alice signs in to a remote MCP server through
// her client; bob registers the same server, under the same name and
// another: it asks him to sign in, and never runs with alice's token.
// Before, the sign-ins were one file for every principal, keyed by URL,
// and bob's calls went out as alice.
func TestAttackTenantOAuth(t *testing.T) {
	testenv.NeedsPython(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // the token files
	s := mcptest.NewOAuthServer(nil)
	t.Cleanup(s.Close)
	srv := newServer(t, &Options{Workspace: t.TempDir(), HTTP: HTTPOptions{Principals: twoPrincipals}, Sessions: SessionOptions{NoZygote: true}})
	url := serveHTTP(t, srv)
	// A 2025-11-25 connection: URL-mode elicitation asks it directly.
	alice := connectHTTPAs(t, url, aliceTok, legacyVersion, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(ctx context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			testenv.Browse(r.Params.URL, 0, 10*time.Second)
			return &mcp.ElicitResult{Action: "accept"}, nil
		},
	})
	bob := connectHTTPAs(t, url, bobTok, legacyVersion, nil)
	params := map[string]any{"url": s.URL}
	if res := call(t, alice, "register_mcp_server", map[string]any{"server_name": "remote", "server_params": params}); res.IsError {
		t.Fatalf("alice's sign-in: %s", text(res))
	}
	if got := run(t, alice, "from mcptools.remote.tool_1 import Params, run\nprint(run(Params(s='alice')))"); got != "tool-1: alice" {
		t.Fatalf("alice's call after her sign-in: %q (the test proves nothing)", got)
	}
	for _, name := range []string{"remote", "mine"} {
		res := call(t, bob, "register_mcp_server", map[string]any{"server_name": name, "server_params": params})
		if !res.IsError || !strings.Contains(text(res), "sign-in") {
			t.Errorf("bob registered %s with alice's sign-in: %s", name, text(res))
		}
	}
	if c := s.Counts(); c.Authorizations != 1 {
		t.Errorf("sign-ins: %+v", c)
	}
}

// TestOnePrincipalLayout: one token (the default principal, or one named
// principal) keeps the layout of a server without principals: the
// kernel works in the workspace itself, the registry is the workspace's,
// and no principal's folder is made.
func TestOnePrincipalLayout(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	bin := mcptest.Build(t)
	for _, o := range []*Options{{}, {HTTP: HTTPOptions{NoAuth: true, Principals: map[string]string{"ci": "ci-token-0123456789"}}}} {
		ws := t.TempDir()
		o.Workspace, o.Sessions.NoZygote = ws, true
		srv := newServer(t, o)
		tok := testToken
		if o.HTTP.NoAuth {
			tok = "ci-token-0123456789"
		}
		cs := connectHTTPAs(t, serveHTTP(t, srv), tok, newVersion, nil)
		h := createSession(t, cs)
		if got := runIn(t, cs, h, "import os\nprint(os.getcwd())"); got != srv.Workspace() {
			t.Errorf("the kernel works in %q, want the workspace %q", got, srv.Workspace())
		}
		if res := call(t, cs, "register_mcp_server", map[string]any{"server_name": "go", "server_params": map[string]any{"command": bin}, "session": h}); res.IsError {
			t.Fatal(text(res))
		}
		if _, err := os.Stat(filepath.Join(ws, ".ipybox", "servers.json")); err != nil {
			t.Errorf("the workspace's registry: %v", err)
		}
		for _, p := range []string{"default", "ci", localPrincipal} {
			if _, err := os.Stat(filepath.Join(ws, p)); err == nil {
				t.Errorf("a folder %s was made for one principal", p)
			}
		}
	}
}
