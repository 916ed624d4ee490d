package ipybox_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/testenv"
)

// npmTarball is a registry tarball of one package: package/package.json
// and package/cli.js (its bin).
func npmTarball(t *testing.T, name, version, cli string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range []struct {
		name, body string
		mode       int64
	}{
		{"package/package.json", fmt.Sprintf(`{"name": %q, "version": %q, "bin": {%q: "cli.js"}}`, name, version, name), 0o644},
		{"package/cli.js", cli, 0o755},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.body)), ModTime: time.Unix(1e9, 0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// npmRegistry serves one package, version 1.0.0, whose bin is cli: the
// legitimate server an operator's `npx -y name` config runs.
func npmRegistry(t *testing.T, name, cli string) *httptest.Server {
	t.Helper()
	var srv *httptest.Server
	tgz := npmTarball(t, name, "1.0.0", cli)
	sum := sha512.Sum512(tgz)
	integrity := "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/" + name:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"name": %q, "dist-tags": {"latest": "1.0.0"}, "versions": {"1.0.0": {"name": %q, "version": "1.0.0", "bin": {%q: "cli.js"}, "dist": {"tarball": %q, "integrity": %q}}}}`,
				name, name, name, srv.URL+"/"+name+"-1.0.0.tgz", integrity)
		case "/" + name + "-1.0.0.tgz":
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(tgz)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestRedteam4HomeIsWorkspace: ipybox passes its own HOME to every host
// process (hostproc.Env's PATH, HOME, ...). When the workspace is the
// home folder (ipybox mcp started by a client in ~, a set-up the
// protected-path list names: ".config", ".local" and ".ssh" are there
// for it), every tool that keeps a cache or a config under HOME reads
// kernel-written files: npx runs a package from ~/.npm/_npx/<hash>/
// before it asks the registry for a tarball, so a sandboxed kernel that
// plants node_modules/<pkg> there for the operator's `npx -y pkg` (or
// `pkg@version`) runs its code on the host, outside every sandbox. A
// search path through HOME is a search path into the workspace
// (invariant 14), whatever the variable is called.
//
// Variants: npx with a version, npx by name only (the planted hidden
// lockfile names the registry's tarball URL, which is predictable), and
// Python's user site (~/.local/lib/pythonX.Y/site-packages/*.pth, run by
// every interpreter not started with -s or -I).
func TestRedteam4HomeIsWorkspace(t *testing.T) {
	py := testenv.NeedsPython(t)
	npx := testenv.NeedsTool(t, "npx")
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	marks := t.TempDir()
	trusted := t.TempDir()
	if err := os.WriteFile(filepath.Join(trusted, "hostsrv.py"), []byte(hostSrvPy), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir()) // host processes' private folder: outside the workspace
	// As the error of a sandboxed start with HOME as the workspace says.
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("HOME", ws)
	t.Chdir(ws)
	const pkg = "ipybox-redteam4-srv"
	reg := npmRegistry(t, pkg, "#!/usr/bin/env node\n"+hostSrvJS)
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws, NoToolApproval: true})

	jsBait := func(mark string) string {
		return "#!/usr/bin/env node\nrequire('fs').writeFileSync(" + fmt.Sprintf("%q", mark) + ", 'ran'); process.exit(3);\n"
	}
	// plantNpx is kernel code: the npx cache entry of spec, with the bait
	// as the package's bin (plantNpxIn: in another npm cache folder).
	var plantNpxIn func(cache, spec, mark string) string
	plantNpx := func(spec, mark string) string { return plantNpxIn("~/.npm", spec, mark) }
	plantNpxIn = func(cache, spec, mark string) string {
		return fmt.Sprintf(`import hashlib, json, os
spec, pkg, mark = %q, %q, %q
d = os.path.expanduser(%q + "/_npx/" + hashlib.sha512(spec.encode()).hexdigest()[:16])
os.makedirs(d + "/node_modules/" + pkg, exist_ok=True)
os.makedirs(d + "/node_modules/.bin", exist_ok=True)
open(d + "/package.json", "w").write(json.dumps({"dependencies": {pkg: "1.0.0"}}))
open(d + "/node_modules/" + pkg + "/package.json", "w").write(json.dumps({"name": pkg, "version": "1.0.0", "bin": {pkg: "cli.js"}}))
open(d + "/node_modules/" + pkg + "/cli.js", "w").write(%q)
os.chmod(d + "/node_modules/" + pkg + "/cli.js", 0o755)
if not os.path.lexists(d + "/node_modules/.bin/" + pkg):
    os.symlink("../" + pkg + "/cli.js", d + "/node_modules/.bin/" + pkg)
open(d + "/node_modules/.package-lock.json", "w").write(json.dumps({"name": "x", "lockfileVersion": 3, "requires": True,
    "packages": {"node_modules/" + pkg: {"version": "1.0.0", "resolved": %q, "bin": {pkg: "cli.js"}}}}))
print("planted", d)
`, spec, pkg, mark, cache, jsBait(mark), reg.URL+"/"+pkg+"-1.0.0.tgz")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cases := []struct {
		name  string
		plant func(mark string) string
		cfg   ipybox.ServerConfig
	}{
		{"npx with a version", func(m string) string { return plantNpx(pkg+"@1.0.0", m) },
			ipybox.ServerConfig{Command: npx, Args: []string{"-y", pkg + "@1.0.0"}, Env: map[string]string{"npm_config_registry": reg.URL + "/", "npm_config_update_notifier": "false"}}},
		{"npx by name", func(m string) string { return plantNpx(pkg, m) },
			ipybox.ServerConfig{Command: npx, Args: []string{"-y", pkg}, Env: map[string]string{"npm_config_registry": reg.URL + "/", "npm_config_update_notifier": "false"}}},
		{"npm_config_cache in the workspace, from the config", func(m string) string { return plantNpxIn(filepath.Join(ws, "npmcache"), pkg+"@1.0.0", m) },
			ipybox.ServerConfig{Command: npx, Args: []string{"-y", pkg + "@1.0.0"}, Env: map[string]string{"npm_config_registry": reg.URL + "/", "npm_config_update_notifier": "false", "npm_config_cache": filepath.Join(ws, "npmcache")}}},
		{"python's user site", func(m string) string {
			return fmt.Sprintf(`import os, site, sys
d = os.path.expanduser("~/.local/lib/python%%d.%%d/site-packages" %% sys.version_info[:2])
try:
    os.makedirs(d, exist_ok=True)
    open(d + "/zz_redteam4.pth", "w").write("import os; open(%%r, 'w').write('ran')\n" %% %q)
    print("planted", d)
except OSError as e:
    print("refused", e)
`, m)
		}, ipybox.ServerConfig{Command: py, Args: []string{"-m", "hostsrv"}, Env: map[string]string{"PYTHONPATH": trusted}}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mark := filepath.Join(marks, fmt.Sprint(i))
			res := run(t, ex, c.plant(mark))
			t.Logf("kernel: %s", strings.TrimSpace(res.Text))
			_, err := ex.RegisterMCPServer(ctx, fmt.Sprintf("home%d", i), c.cfg)
			if exists(mark) {
				t.Fatalf("the sandboxed kernel's bait under HOME (the workspace) ran on the host (register: %v)", err)
			}
			if err != nil {
				t.Fatalf("the operator's server did not start: %v", err)
			}
		})
	}
}

// TestRedteam4InterpreterInWorkspace: the kernel's interpreter is the
// project's own virtualenv, in the workspace (ipybox started with
// --python .venv/bin/python, or from an activated venv). The sandboxed
// kernel can write that venv's site-packages (the sandbox binds no
// read-only view of it), and the host runs the same interpreter outside
// the sandbox: kernel.CheckPython's ipykernel probe at every start of
// ipybox mcp --python and ipybox exec --python, ipybox.FindPython where
// the server makes a principal's virtualenv, doctor --python. (The
// sandbox's own question, askPython, already asks the venv's base
// interpreter instead.) A .pth file there runs at every interpreter
// start, -I or not: the host runs kernel code at the next start (here a
// process of its own, as a restart of ipybox mcp is).
func TestRedteam4InterpreterInWorkspace(t *testing.T) {
	if ws := os.Getenv("IPYBOX_REDTEAM4_CHILD"); ws != "" {
		// The restarted ipybox: a process of its own, so that nothing
		// of the first one's caches is in it.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// What ipybox mcp --python does at its start (checkHost), and
		// the server at a principal's first virtualenv: the check of
		// the interpreter, on the host.
		if _, err := kernel.FindPython(ctx, filepath.Join(ws, ".venv", "bin", "python")); err != nil {
			t.Fatal(err)
		}
		ex, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: ws, Python: filepath.Join(ws, ".venv", "bin", "python"), Sandbox: ipybox.DefaultSandbox()})
		if err != nil {
			t.Fatal(err)
		}
		defer ex.Close()
		run(t, ex, "1")
		return
	}
	t.Skip("BREAK: a sandboxed kernel writes the workspace venv that is its interpreter (.venv/lib/.../site-packages/*.pth), and the host runs that interpreter at the next ipybox mcp --python start (kernel.CheckPython's probe), at a principal's first venv (mcpserver venv.go FindPython) and in doctor; see /work/notes/attack.md")
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	sys := "/usr/bin/python3"
	if _, err := os.Stat(sys); err != nil {
		testenv.Missing(t, "/usr/bin/python3 with ipykernel")
	}
	ws := t.TempDir()
	marks := t.TempDir()
	venv := filepath.Join(ws, ".venv")
	if b, err := exec.Command(sys, "-m", "venv", "--system-site-packages", venv).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v: %s", err, b)
	}
	py := filepath.Join(venv, "bin", "python")
	t.Chdir(ws)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ex, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: ws, Python: py, Sandbox: ipybox.DefaultSandbox()})
	if err != nil {
		t.Logf("refused at once, as it may be: %v", err)
		return
	}
	mark := filepath.Join(marks, "pth")
	res := run(t, ex, fmt.Sprintf(`import site, os, sys
out = []
for d in site.getsitepackages() + [os.path.dirname(os.__file__)]:
    try:
        open(os.path.join(d, "zz_redteam4.pth"), "w").write("import os; open(%%r, 'w').write('ran')\n" %% %q)
        out.append("planted " + d)
    except OSError as e:
        out.append("refused " + d + ": " + str(e))
try:
    open(os.path.join(sys.prefix, "pyvenv.cfg"), "a").write("\n")
    out.append("pyvenv.cfg writable")
except OSError as e:
    out.append("pyvenv.cfg: " + str(e))
print("\n".join(out))
`, mark))
	t.Logf("kernel: %s", res.Text)
	ex.Close()
	if exists(mark) {
		t.Fatal("the bait ran on the host already")
	}
	// Control: the bait runs when the host runs the interpreter, even -I.
	if b, err := exec.Command(py, "-I", "-c", "pass").CombinedOutput(); !exists(mark) {
		t.Fatalf("control: the .pth did not run on the host (%v): %s", err, b)
	}
	os.Remove(mark)
	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRedteam4InterpreterInWorkspace$", "-test.count=1")
	child.Env = append(os.Environ(), "IPYBOX_REDTEAM4_CHILD="+ws)
	child.Dir = ws
	out, err := child.CombinedOutput() // bound: ctx
	t.Logf("restart: %v: %s", err, out)
	if exists(mark) {
		t.Fatalf("the sandboxed kernel's .pth in the workspace's venv ran on the host at the next start (start: %v)", err)
	}
}

// TestRedteam4SharedTmpAncestor: another local user (uid 65534) can write
// a sticky shared folder (/tmp). The private folder of host processes is
// under the user's runtime or cache folder, but when that lies in such a
// folder (the Docker image sets HOME=/tmp, so its cache folder is
// /tmp/.cache), or when neither exists (HOME unusable: the fallback is
// the system's temporary folder), an upward search from the private
// folder meets the shared one: npx takes the first ancestor with a
// node_modules as its project, and runs the package it finds there.
// Variants: HOME is the shared folder (the image), and no usable HOME
// (TMPDIR is the shared folder). The other user's planting is files owned
// by 65534 in the shared folder; ipybox's server runs in a process of its
// own, so that its private folder is made under these settings.
func TestRedteam4SharedTmpAncestor(t *testing.T) {
	if os.Getenv("IPYBOX_RT4_TMP_CHILD") != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		ex, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: os.Getenv("IPYBOX_RT4_WS"), NoToolApproval: true})
		if err != nil {
			t.Fatal(err)
		}
		defer ex.Close()
		npx, _ := exec.LookPath("npx")
		_, err = ex.RegisterMCPServer(ctx, "tmpsrv", ipybox.ServerConfig{Command: npx, Args: []string{"-y", os.Getenv("IPYBOX_RT4_PKG") + "@1.0.0"},
			Env: map[string]string{"npm_config_registry": os.Getenv("IPYBOX_RT4_REG"), "npm_config_update_notifier": "false", "npm_config_cache": os.Getenv("IPYBOX_RT4_CACHE")}})
		if err == nil {
			t.Log("REGISTERED-OK")
		}
		t.Logf("register: %v", err)
		return
	}
	t.Skip("BREAK: the private folder of host processes has a shared sticky folder (/tmp) among its ancestors when HOME is /tmp (the Docker image) or unusable, and npx runs another user's /tmp/node_modules from there; see /work/notes/attack.md")
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "npx")
	if os.Getuid() != 0 {
		t.Skip("needs root to plant files as uid 65534")
	}
	const pkg = "ipybox-redteam4-tmp"
	reg := npmRegistry(t, pkg, "#!/usr/bin/env node\n"+hostSrvJS)
	for _, v := range []struct {
		name string
		env  func(shared string) []string
	}{
		{"HOME is the shared folder (the image)", func(sh string) []string { return []string{"HOME=" + sh, "TMPDIR=" + sh} }},
		{"no usable HOME", func(sh string) []string { return []string{"HOME=/proc/self/nohome", "TMPDIR=" + sh} }},
	} {
		t.Run(v.name, func(t *testing.T) {
			// Short: the run folder's socket path must fit in 107 bytes.
			shared, err := os.MkdirTemp("", "rt4")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(shared) })
			if err := os.Chmod(shared, 0o1777); err != nil {
				t.Fatal(err)
			}
			mark := filepath.Join(t.TempDir(), "mark")
			os.Chmod(filepath.Dir(mark), 0o777)
			// The other user's plant: shared/node_modules/<pkg>.
			nm := filepath.Join(shared, "node_modules")
			files := map[string]string{
				filepath.Join(nm, pkg, "package.json"): fmt.Sprintf(`{"name": %q, "version": "1.0.0", "bin": {%q: "cli.js"}}`, pkg, pkg),
				filepath.Join(nm, pkg, "cli.js"):       "#!/usr/bin/env node\nrequire('fs').writeFileSync(" + fmt.Sprintf("%q", mark) + ", 'ran'); process.exit(3);\n",
			}
			for p, c := range files {
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(c), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.MkdirAll(filepath.Join(nm, ".bin"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("../"+pkg+"/cli.js", filepath.Join(nm, ".bin", pkg)); err != nil {
				t.Fatal(err)
			}
			filepath.Walk(nm, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			child := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRedteam4SharedTmpAncestor$", "-test.count=1", "-test.v")
			env := []string{"PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8", "IPYBOX_RT4_TMP_CHILD=1", "IPYBOX_RT4_WS=" + t.TempDir(),
				"IPYBOX_RT4_PKG=" + pkg, "IPYBOX_RT4_REG=" + reg.URL + "/", "IPYBOX_RT4_CACHE=" + t.TempDir()}
			for _, k := range []string{"PYENV_ROOT", "GOTOOLCHAIN", "GOCACHE", "GOPATH"} {
				if x, ok := os.LookupEnv(k); ok {
					env = append(env, k+"="+x)
				}
			}
			child.Env = append(env, v.env(shared)...)
			out, err := child.CombinedOutput() // bound: ctx
			t.Logf("server: %v: %s", err, out)
			if exists(mark) {
				t.Fatalf("another user's node_modules in %s ran as ipybox's user", shared)
			}
			if !strings.Contains(string(out), "REGISTERED-OK") {
				t.Fatal("the operator's server did not start, so the test shows nothing")
			}
		})
	}
}

// TestRedteam4DiscoveryRunsWorkspacePython: Python discovery probes every
// python3 on PATH at once (kernel.FindPython; ipybox mcp's first
// virtualenv, ipybox.Start without Options.Python, doctor). When a PATH
// folder lies in the workspace, a sandboxed kernel can put a python3
// there, and the next discovery runs it on the host, even when a good
// interpreter comes first. Variant: the workspace is HOME, and PATH has
// ~/bin (a usual entry, not a protected name), which need not exist
// until the kernel makes it.
func TestRedteam4DiscoveryRunsWorkspacePython(t *testing.T) {
	if os.Getenv("IPYBOX_RT4_DISC_CHILD") != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		py, err := kernel.FindPython(ctx, "")
		t.Logf("discovered %q (%v)", py, err)
		return
	}
	t.Skip("BREAK: Python discovery runs every python3 on PATH on the host, those in the workspace too (a sandboxed kernel's ~/bin/python3 when the workspace is HOME); see /work/notes/attack.md")
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		testenv.Missing(t, "/usr/bin/python3")
	}
	ws := t.TempDir()
	mark := filepath.Join(t.TempDir(), "mark")
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("HOME", ws)
	t.Chdir(ws)
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws, Python: "/usr/bin/python3"})
	res := run(t, ex, fmt.Sprintf(`import os
d = os.path.expanduser("~/bin")
os.makedirs(d, exist_ok=True)
open(d + "/python3", "w").write("#!/bin/sh\necho ran > %s\nexec /usr/bin/python3 \"$@\"\n")
os.chmod(d + "/python3", 0o755)
print("planted", d)`, mark))
	t.Logf("kernel: %s", strings.TrimSpace(res.Text))
	ex.Close()
	if exists(mark) {
		t.Fatal("ran already")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	child := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRedteam4DiscoveryRunsWorkspacePython$", "-test.count=1", "-test.v")
	child.Env = append(os.Environ(), "IPYBOX_RT4_DISC_CHILD=1", "PATH=/usr/bin:"+filepath.Join(ws, "bin")+":/bin")
	out, err := child.CombinedOutput() // bound: ctx
	t.Logf("discovery: %v: %s", err, out)
	if exists(mark) {
		t.Fatal("the sandboxed kernel's ~/bin/python3 ran on the host at the next discovery")
	}
}
