package mcpserver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestBaseVenvKernel: with Options.Python naming a virtualenv's
// interpreter (PyPI's kernel stack, ipykernel 7), the session's kernel
// imports that venv's ipykernel, not the system's (6.17 on Debian),
// unsandboxed and sandboxed; install_package still installs into the
// workspace's virtualenv; and a second server on the workspace (the
// virtualenv already made) still binds the venv's prefix in the sandbox.
// Before the fix the unsandboxed kernel imported Debian's 6.17, and the
// sandboxed server could not make the virtualenv ("not visible in the
// sandbox").
func TestBaseVenvKernel(t *testing.T) {
	py, want := testenv.PyPIPython(t)
	prefix, err := filepath.EvalSymlinks(filepath.Dir(filepath.Dir(py)))
	if err != nil {
		t.Fatal(err)
	}
	const probe = "import ipykernel, os\nprint('version', ipykernel.__version__)\nprint('file', os.path.realpath(ipykernel.__file__))"
	check := func(t *testing.T, got string) {
		t.Helper()
		if !strings.Contains(got, "version "+want+"\n") || !strings.Contains(got, "file "+prefix+"/") {
			t.Errorf("the kernel imports %q; want ipykernel %s from %s", got, want, prefix)
		}
	}
	for _, sandboxed := range []bool{false, true} {
		name := "unsandboxed"
		if sandboxed {
			name = "sandboxed"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			o := func() *Options {
				o := &Options{Workspace: ws, Python: py}
				if sandboxed {
					testenv.NeedsTool(t, "bwrap")
					o.Sandbox = ipybox.DefaultSandbox()
				}
				return o
			}
			cs := connect(t, newServer(t, o()), nil)
			check(t, run(t, cs, probe))
			pth, err := os.ReadFile(filepath.Join(mustSite(t, ws), baseVenvPth))
			if err != nil || !strings.Contains(string(pth), "\n"+prefix+"/") {
				t.Errorf("%s: %q, %v; want the venv's site-packages", baseVenvPth, pth, err)
			}
			os.MkdirAll(filepath.Join(ws, "dist"), 0o755)
			whl := buildWheel(t, filepath.Join(ws, "dist"))
			if res := call(t, cs, "install_package", map[string]any{"package_name": "dist/" + whl}); res.IsError {
				t.Fatalf("install_package: %s", text(res))
			}
			got := run(t, cs, "import ipybox_testpkg, os\nprint(os.path.realpath(ipybox_testpkg.__file__))")
			venv, _ := filepath.EvalSymlinks(venvDir(ws))
			if !strings.Contains(got, venv+"/") {
				t.Errorf("the installed package is at %q; want it in the workspace's virtualenv %s", got, venv)
			}
			// The virtualenv is there now: a new server asks the base again.
			cs2 := connect(t, newServer(t, o()), nil)
			check(t, run(t, cs2, probe))
		})
	}
}

func mustSite(t *testing.T, ws string) string {
	t.Helper()
	site, err := venvSitePackages(venvDir(ws))
	if err != nil {
		t.Fatal(err)
	}
	return site
}

// TestBaseVenvProbeNeverRunsWorkspacePython: an interpreter in a folder
// kernel code can write (the workspace, a sandbox allowWrite path) is
// never asked on the host whether it is a venv's: asking would run it,
// and its venv's .pth files, with the user's rights. Each variant writes
// a marker outside every writable folder when it runs.
func TestBaseVenvProbeNeverRunsWorkspacePython(t *testing.T) {
	t.Parallel()
	ws, allow, outside := t.TempDir(), t.TempDir(), t.TempDir()
	srv := newServer(t, &Options{Workspace: ws, Sandbox: &ipybox.SandboxConfig{Filesystem: ipybox.SandboxFilesystem{AllowWrite: []string{allow}}}})
	ten := srv.only
	if ten == nil {
		t.Fatal("no sole tenant")
	}
	script := func(dir string) string {
		bin := filepath.Join(dir, "venv", "bin")
		os.MkdirAll(bin, 0o755)
		p := filepath.Join(bin, "python")
		marker := filepath.Join(outside, filepath.Base(dir))
		os.WriteFile(p, []byte("#!/bin/sh\ntouch '"+marker+"'\necho True; echo /; echo /; echo /\n"), 0o755)
		return p
	}
	// A link from outside into the workspace counts as the workspace.
	linked := filepath.Join(t.TempDir(), "linked")
	os.Symlink(filepath.Join(ws, "venv"), linked)
	for _, py := range []string{script(ws), script(allow), filepath.Join(linked, "bin", "python")} {
		if bv := ten.probeBaseVenv(context.Background(), py); bv != nil {
			t.Errorf("%s: asked, and took %+v", py, bv)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("an interpreter in a writable folder ran on the host: %v", ents)
	}
	// Control: the same script outside every writable folder is run.
	if ten.probeBaseVenv(context.Background(), script(t.TempDir())); len(mustRead(t, outside)) != 1 {
		t.Errorf("the control script did not run: the test cannot fail")
	}
}

func mustRead(t *testing.T, dir string) []os.DirEntry {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ents
}

// TestParseBaseVenv: only a venv's answer with an absolute prefix outside
// /usr and the writable folders is taken, and only package folders inside
// that prefix.
func TestParseBaseVenv(t *testing.T) {
	t.Parallel()
	venv, ws := t.TempDir(), t.TempDir()
	site := filepath.Join(venv, "lib", "python3", "site-packages")
	os.MkdirAll(site, 0o755)
	inWS := filepath.Join(ws, "v")
	os.MkdirAll(inWS, 0o755)
	other := t.TempDir()
	for _, c := range []struct {
		name, out string
		ok        bool
	}{
		{"venv", "True\n" + venv + "\n" + site + "\n" + site + "\n", true},
		{"not a venv", "False\n/usr\n/usr/lib/python3/dist-packages\n/usr/lib/python3/dist-packages\n", false},
		{"system prefix", "True\n/usr\n/usr/lib/python3/dist-packages\n/usr/lib/python3/dist-packages\n", false},
		{"root prefix", "True\n/\n/lib\n/lib\n", false},
		{"prefix in the workspace", "True\n" + inWS + "\n" + inWS + "\n" + inWS + "\n", false},
		{"sites outside the prefix", "True\n" + venv + "\n" + other + "\n" + other + "\n", false},
		{"relative", "True\nvenv\nvenv/lib\nvenv/lib\n", false},
		{"extra line", "True\n" + venv + "\n" + site + "\n" + site + "\nimport os\n", false},
	} {
		bv, _ := parseBaseVenv(c.out, []string{ws})
		if (bv != nil) != c.ok {
			t.Errorf("%s: got %+v, want ok=%v", c.name, bv, c.ok)
		}
	}
}
