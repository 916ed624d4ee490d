package mcpserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestAttackCrossSession: two sessions of one ipybox mcp share a
// workspace. Session A's kernel tries every way to get code into session
// B's kernel: rewrite a generated tool module, add a .pth or a package to
// the shared virtualenv, shadow a standard module or an installed package
// from the workspace, plant an ipykernel config. None reaches B. A's own
// pip install works, lands in A's package folder, survives A's reset, and
// stays invisible to B.
func TestAttackCrossSession(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	srv := newServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox()})
	url := serveHTTP(t, srv)
	a := connectHTTP(t, url, nil)
	b := connectHTTP(t, url, nil)
	run(t, b, "pass") // B's kernel is up before A attacks, and after

	// A generated tool module, as registration leaves one.
	if err := os.MkdirAll(filepath.Join(ws, "mcptools", "srv"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "mcptools", "__init__.py"), nil, 0o644)
	os.WriteFile(filepath.Join(ws, "mcptools", "srv", "__init__.py"), nil, 0o644)
	os.WriteFile(filepath.Join(ws, "mcptools", "srv", "tool.py"), []byte("ORIGIN = 'host'\n"), 0o644)

	os.MkdirAll(filepath.Join(ws, "dist"), 0o755)
	whl := buildWheel(t, filepath.Join(ws, "dist"))
	got := run(t, a, `import os, sys, site, glob, subprocess
def attempt(name, f):
    try:
        f()
        print(name, "DONE")
    except OSError as e:
        print(name, "refused", type(e).__name__)
attempt("tool module", lambda: open("mcptools/srv/tool.py", "w").write("ORIGIN = 'session A'\n"))
attempt("new tool module", lambda: open("mcptools/srv/other.py", "w").write("ORIGIN = 'session A'\n"))
venv_site = [p for p in sys.path if p.endswith("site-packages") and "/.ipybox/venv/" in p][0]
attempt("venv pth", lambda: open(venv_site + "/zz_evil.pth", "w").write("import os\n"))
attempt("venv package", lambda: os.makedirs(venv_site + "/numpy_evil"))
attempt("kernel config", lambda: open("ipython_kernel_config.py", "w").write("print('A')\n"))
r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "dist/`+whl+`"], capture_output=True, text=True)
print("pip", r.returncode, (r.stderr or "")[-300:].replace("\n", " "))
import ipybox_testpkg
print("A has", ipybox_testpkg.__name__, ipybox_testpkg.__file__.startswith(os.environ["PYTHONUSERBASE"]))
open("json.py", "w").write("ORIGIN = 'session A'\n")
open("textwrap.py", "w").write("raise SystemExit('session A ran here')\n")`)
	for _, want := range []string{"tool module refused", "new tool module refused", "venv pth refused", "venv package refused",
		"kernel config refused", "pip 0", "A has ipybox_testpkg True"} {
		if !strings.Contains(got, want) {
			t.Errorf("session A: want %q in:\n%s", want, got)
		}
	}
	if res := call(t, a, "reset", map[string]any{}); res.IsError {
		t.Fatalf("reset: %s", text(res))
	}
	if got := run(t, a, "import ipybox_testpkg\nprint('kept')"); !strings.Contains(got, "kept") {
		t.Errorf("A's package did not survive its reset: %q", got)
	}

	got = run(t, b, "%pip --version")
	if !strings.Contains(got, "pip ") || strings.Contains(got, "session A") {
		t.Errorf("session B's %%pip: %q", got)
	}
	got = run(t, b, `import importlib, json, textwrap, sys
from mcptools.srv import tool
print("tool", tool.ORIGIN)
print("json", getattr(json, "ORIGIN", "stdlib"), "textwrap", getattr(textwrap, "ORIGIN", "stdlib"))
try:
    import ipybox_testpkg
    print("B sees A's package")
except ImportError:
    print("B has no ipybox_testpkg")`)
	for _, want := range []string{"tool host", "json stdlib textwrap stdlib", "B has no ipybox_testpkg"} {
		if !strings.Contains(got, want) {
			t.Errorf("session B: want %q in:\n%s", want, got)
		}
	}
}
