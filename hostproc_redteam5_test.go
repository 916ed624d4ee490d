package ipybox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestRedteam5HostServerScriptArg: an operator's stdio server whose
// program is an interpreter outside the workspace, and whose script (an
// argument) lies in it: python3 <ws>/srv.py is the same as the program
// <ws>/srv.py, which is refused (TestHostServerCwdInWorkspace), but it
// ran. A sandboxed kernel rewrites the script, and the next start of the
// server (the next session, the next ipybox mcp) runs kernel code on the
// host. Spellings: a script file, a script folder (python runs its
// __main__.py, node its index.js), a file after --opt=, a link from a
// trusted folder into the workspace, a file that does not exist yet, a
// script folder after an option's value (-X dev) or after a file that an
// option loads (node -r F), a package runner's package folder (npx). Each
// must be refused with what to do, and the bait must not run; a folder of
// the workspace given as data (a filesystem server's root) still works.
func TestRedteam5HostServerScriptArg(t *testing.T) {
	py := testenv.NeedsPython(t)
	node := testenv.NeedsTool(t, "node")
	npx := testenv.NeedsTool(t, "npx")
	ws, trusted, marks := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(trusted, "srv.py"), []byte(hostSrvPy), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(trusted, "srv.js"), []byte(hostSrvJS), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(trusted, "noop.js"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(ws, "linked.py"), filepath.Join(trusted, "link.py")); err != nil {
		t.Fatal(err)
	}
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws, NoToolApproval: true})
	mark := func(i int) string { return filepath.Join(marks, fmt.Sprint(i)) }
	pyBait := func(i int) string { return fmt.Sprintf("open(%q, 'w').write('ran')\n", mark(i)) }
	jsBait := func(i int) string { return fmt.Sprintf("require('fs').writeFileSync(%q, 'ran');\n", mark(i)) }
	cases := []struct {
		name  string
		plant map[string]string
		cfg   ipybox.ServerConfig
	}{
		{"python3 <ws>/srv.py", map[string]string{"srv.py": pyBait(0)}, ipybox.ServerConfig{Command: py, Args: []string{filepath.Join(ws, "srv.py")}}},
		{"python3 -u <ws>/srv.py", map[string]string{"srv1.py": pyBait(1)}, ipybox.ServerConfig{Command: py, Args: []string{"-u", filepath.Join(ws, "srv1.py")}}},
		{"node <ws>/srv.js", map[string]string{"srv.js": jsBait(2)}, ipybox.ServerConfig{Command: node, Args: []string{filepath.Join(ws, "srv.js")}}},
		{"python3 <ws>/pkg (its __main__.py)", map[string]string{"pkg/__main__.py": pyBait(3)}, ipybox.ServerConfig{Command: py, Args: []string{filepath.Join(ws, "pkg")}}},
		{"node <ws>/jspkg (its index.js)", map[string]string{"jspkg/index.js": jsBait(4)}, ipybox.ServerConfig{Command: node, Args: []string{filepath.Join(ws, "jspkg")}}},
		{"node --require=<ws>/hook.js srv.js", map[string]string{"hook.js": jsBait(5)}, ipybox.ServerConfig{Command: node, Args: []string{"--require=" + filepath.Join(ws, "hook.js"), filepath.Join(trusted, "srv.js")}}},
		{"python3 <trusted>/link.py, a link into the workspace", map[string]string{"linked.py": pyBait(6)}, ipybox.ServerConfig{Command: py, Args: []string{filepath.Join(trusted, "link.py")}}},
		{"sh <ws>/run.sh", map[string]string{"run.sh": fmt.Sprintf("echo ran > %s\n", mark(7))}, ipybox.ServerConfig{Command: "/bin/sh", Args: []string{filepath.Join(ws, "run.sh")}}},
		{"python3 <ws>/later.py, not there yet", nil, ipybox.ServerConfig{Command: py, Args: []string{filepath.Join(ws, "later.py")}}},
		{"python3 -X dev <ws>/xpkg (an option's value keeps the script's place)", map[string]string{"xpkg/__main__.py": pyBait(9)}, ipybox.ServerConfig{Command: py, Args: []string{"-X", "dev", filepath.Join(ws, "xpkg")}}},
		{"node -r <trusted>/noop.js <ws>/jspkg2 (a loaded file is not the script)", map[string]string{"jspkg2/index.js": jsBait(10)}, ipybox.ServerConfig{Command: node, Args: []string{"-r", filepath.Join(trusted, "noop.js"), filepath.Join(ws, "jspkg2")}}},
		{"env python3 <ws>/envpkg (a wrapper's program)", map[string]string{"envpkg/__main__.py": pyBait(12)}, ipybox.ServerConfig{Command: "/usr/bin/env", Args: []string{py, filepath.Join(ws, "envpkg")}}},
		{"env <ws>/.venv/bin/python <trusted>/srv.py (a venv's interpreter, a link out)", nil, ipybox.ServerConfig{Command: "/usr/bin/env", Args: []string{filepath.Join(ws, ".venv", "bin", "python"), filepath.Join(trusted, "srv.py")}}},
		{"npx -y <ws>/npkg (a runner's package)", map[string]string{"npkg/package.json": `{"name": "npkg", "version": "1.0.0", "bin": {"npkg": "run.js"}}`, "npkg/run.js": "#!/usr/bin/env node\n" + jsBait(11)}, ipybox.ServerConfig{Command: npx, Args: []string{"-y", filepath.Join(ws, "npkg")}}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var code strings.Builder
			code.WriteString("import os\n")
			for p, content := range c.plant {
				fmt.Fprintf(&code, "os.makedirs(os.path.dirname(%q) or '.', exist_ok=True)\nopen(%q, 'w').write(%q)\n", p, p, content)
			}
			if strings.Contains(c.name, ".venv") {
				fmt.Fprintf(&code, `import sys
v = ".venv"
os.makedirs(v + "/bin", exist_ok=True)
sp = v + "/lib/python%%d.%%d/site-packages" %% sys.version_info[:2]
os.makedirs(sp, exist_ok=True)
open(v + "/pyvenv.cfg", "w").write("home = %%s\ninclude-system-site-packages = false\n" %% os.path.dirname(%q))
if not os.path.islink(v + "/bin/python"):
    os.symlink(%q, v + "/bin/python")
open(sp + "/bait.pth", "w").write("import os; open(%%r, 'w').write('ran')\n" %% %q)
`, py, py, mark(i))
			}
			run(t, ex, code.String())
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := ex.RegisterMCPServer(ctx, fmt.Sprintf("arg%d", i), c.cfg)
			if exists(mark(i)) {
				t.Fatalf("the kernel's script ran on the host (register: %v)", err)
			}
			if err == nil || !strings.Contains(err.Error(), "kernel code can write") || !strings.Contains(err.Error(), `"sandbox": true`) {
				t.Errorf("register: %v; want a refusal that names the workspace and says to sandbox it", err)
			}
		})
	}
	// A folder of the workspace as data: the server's own script is the
	// operator's, outside.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := os.MkdirAll(filepath.Join(ws, "pkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []ipybox.ServerConfig{
		{Command: py, Args: []string{filepath.Join(trusted, "srv.py"), ws}},
		{Command: py, Args: []string{filepath.Join(trusted, "srv.py"), "--root=" + ws}},
		{Command: node, Args: []string{filepath.Join(trusted, "srv.js"), filepath.Join(ws, "pkg")}},
		{Command: py, Args: []string{"-u", filepath.Join(trusted, "srv.py"), "--root", ws}},
	} {
		if _, err := ex.RegisterMCPServer(ctx, "data", cfg); err != nil {
			t.Errorf("a server given the workspace as data (%v): %v", cfg.Args, err)
		}
	}
}

// TestRedteam5ConfigEnvCodeCache: round 4 dropped a config's env
// variables that name a file run at the start (CodeVars: NODE_OPTIONS,
// BASH_ENV...) when it is in the workspace; a variable that names a
// folder the program loads code from was let through. With
// PYTHONPYCACHEPREFIX=<ws>/pyc, Python reads the bytecode of every module
// it imports from a mirror tree there: a sandboxed kernel writes a .pyc
// for json whose header matches the host's json/__init__.py (its mtime
// and size), and the operator's server runs it on the host at its next
// start. Variants of the same family: PYTHONPYCACHEPREFIX plain, and
// spelt with a trailing slash. The server must start without the
// variable (it is dropped and logged, as CodeVars are), and the bait must
// not run.
func TestRedteam5ConfigEnvCodeCache(t *testing.T) {
	py := testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws, trusted, marks := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(trusted, "hostsrv.py"), []byte(hostSrvPy), 0o644); err != nil {
		t.Fatal(err)
	}
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws, NoToolApproval: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The host interpreter's json and its bytecode tag, asked of it.
	out, err := exec.Command(py, "-I", "-c", "import json, sys; print(json.__file__); print(sys.implementation.cache_tag)").Output()
	if err != nil {
		t.Fatal(err)
	}
	hostJSON, tag, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	for i, val := range []string{filepath.Join(ws, "pyc"), filepath.Join(ws, "pyc2") + "/"} {
		t.Run(val, func(t *testing.T) {
			mark := filepath.Join(marks, fmt.Sprint(i))
			prefix := strings.TrimSuffix(val, "/")
			dst := filepath.Join(prefix, filepath.Dir(hostJSON), strings.TrimSuffix(filepath.Base(hostJSON), ".py")+"."+tag+".pyc")
			got := run(t, ex, fmt.Sprintf(`import importlib._bootstrap_external as be, os
src, mark = %q, %q
st = os.stat(src)
code = compile(open(src).read() + "\nopen(%%r, 'w').write('ran')\n" %% mark, src, 'exec')
os.makedirs(os.path.dirname(%q), exist_ok=True)
open(%q, 'wb').write(be._code_to_timestamp_pyc(code, st.st_mtime, st.st_size))
print('planted')`, hostJSON, mark, dst, dst)).Text
			if !strings.Contains(got, "planted") {
				t.Fatalf("planting: %q", got)
			}
			cfg := ipybox.ServerConfig{Command: py, Args: []string{filepath.Join(trusted, "hostsrv.py")}, Env: map[string]string{"PYTHONPYCACHEPREFIX": val}}
			_, err := ex.RegisterMCPServer(ctx, fmt.Sprintf("pyc%d", i), cfg)
			if exists(mark) {
				t.Fatalf("the kernel's bytecode for json ran on the host (register: %v)", err)
			}
			if err != nil {
				t.Fatalf("the operator's server did not start: %v", err)
			}
		})
	}
}

// TestRedteam5MaskedFileSwap: the sandbox masks the files that a
// server's config names (its key, its config), so that kernel code can
// neither read nor write them; but the folders above them stayed the
// kernel's. It moved the folder away (the mask goes with it), made the
// path anew with its own file, and the operator's host server read the
// kernel's file at its next start: its config (a proxy's, naming the
// commands it runs), its key. Variants: rename the folder and make it
// anew; exchange it with a folder of the kernel's (renameat2
// RENAME_EXCHANGE); remove the folder; a file named in env, and one in
// args. The host file must be the operator's after each.
func TestRedteam5MaskedFileSwap(t *testing.T) {
	for _, backend := range []string{"sandbox", "container"} {
		t.Run(backend, func(t *testing.T) { maskedFileSwap(t, backend) })
	}
}

func maskedFileSwap(t *testing.T, backend string) {
	py := testenv.NeedsPython(t)
	ws, trusted := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(trusted, "hostsrv.py"), []byte(hostSrvPy), 0o644); err != nil {
		t.Fatal(err)
	}
	argFile, envFile := filepath.Join(ws, "conf", "proxy.json"), filepath.Join(ws, "keys", "sub", "key.txt")
	for _, f := range []string{argFile, envFile} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("operator"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var ex *ipybox.Executor
	if backend == "sandbox" {
		ex = startSandboxed(t, &ipybox.Options{WorkDir: ws, NoToolApproval: true})
	} else {
		testenv.NeedsDocker(t)
		ex = start(t, &ipybox.Options{WorkDir: ws, NoToolApproval: true, Container: &ipybox.ContainerConfig{}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := ipybox.ServerConfig{Command: py, Args: []string{filepath.Join(trusted, "hostsrv.py"), "--config", argFile}, Env: map[string]string{"KEY_FILE": envFile}}
	if _, err := ex.RegisterMCPServer(ctx, "op", cfg); err != nil {
		t.Fatal(err)
	}
	if err := ex.Reset(ctx); err != nil { // a kernel under the masks that name both
		t.Fatal(err)
	}
	got := run(t, ex, `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def exchange(a, b):
    if libc.renameat2(-100, a.encode(), -100, b.encode(), 2) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
def plant(folder, name):
    os.makedirs(folder, exist_ok=True)
    open(os.path.join(folder, name), "w").write("kernel")
out = []
for top, sub, name in (("conf", "conf", "proxy.json"), ("keys", "keys/sub", "key.txt"), ("keys/sub", "keys/sub", "key.txt")):
    for how in ("rename", "exchange", "rmtree"):
        try:
            if how == "rename":
                os.rename(top, top + ".old")
                plant(sub, name)
            elif how == "exchange":
                plant("evil/" + sub, name)
                exchange("evil/" + top, top)
            else:
                import shutil
                shutil.rmtree(top)
                plant(sub, name)
            out.append(how + " " + top + ": done")
        except OSError as e:
            out.append(how + " " + top + ": " + type(e).__name__)
print("; ".join(out))`).Text
	t.Log(got)
	for _, f := range []string{argFile, envFile} {
		if b, err := os.ReadFile(f); err != nil || string(b) != "operator" {
			t.Errorf("%s, which the operator's server config names, holds %q (%v) after the kernel's moves: %s", f, b, err, got)
		}
	}
}
