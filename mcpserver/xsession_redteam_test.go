package mcpserver

import (
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestRedteamOtherSessionPackageFolder: session A learns session B's
// package folder (PYTHONUSERBASE, under .ipybox/packages) and tries to
// make it and drop a .pth and a usercustomize.py there, which B's next
// kernel start would run. Stopped today: A sees only its own folder and the
// guard refuses the rest. It fails if B's kernel, after a reset, ran
// either.
func TestRedteamOtherSessionPackageFolder(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	srv := newServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox()})
	url := serveHTTP(t, srv)
	a := connectHTTP(t, url, nil)
	b := connectHTTP(t, url, nil)
	bub := strings.TrimSpace(run(t, b, "import os, site\nprint(os.environ.get('PYTHONUSERBASE'))"))
	got := run(t, a, `import os, site, sys
mine = os.environ.get("PYTHONUSERBASE")
print("mine", mine, "usersite", site.getusersitepackages(), site.ENABLE_USER_SITE)
root = os.path.dirname(mine)
try:
    print("listing", os.listdir(root))
except OSError as e:
    print("listing", e)
other = `+"'"+bub+"'"+`
print("other exists", os.path.exists(other))
for rel in ("", "lib", "lib/python3.11", "lib/python3.11/site-packages"):
    p = os.path.join(other, rel)
    try:
        os.makedirs(p, exist_ok=True); print("mkdir", rel, "ok")
    except OSError as e:
        print("mkdir", rel, e)
sp = os.path.join(other, "lib/python3.11/site-packages")
for name, body in (("zz_a.pth", "import os; os.environ['FROM_A'] = 'pth'\n"), ("usercustomize.py", "import os; os.environ['FROM_A2'] = 'uc'\n")):
    try:
        open(os.path.join(sp, name), "w").write(body); print("write", name, "ok")
    except OSError as e:
        print("write", name, e)
`)
	t.Logf("B's PYTHONUSERBASE %s\nA: %s", bub, got)
	if res := call(t, b, "reset", map[string]any{}); res.IsError {
		t.Fatalf("reset: %s", text(res))
	}
	if got := run(t, b, "import os\nprint(os.environ.get('FROM_A'), os.environ.get('FROM_A2'))"); strings.TrimSpace(got) != "None None" {
		t.Errorf("session A's code ran in session B's kernel: %q", got)
	}
}

// TestRedteamOptionalImportFromWorkspace: the workspace is last on a
// kernel's sys.path, so it no longer shadows the standard library or an
// installed package. But installed packages import optional modules that
// are not installed, and such an import falls through to the workspace.
// A plot in a sandboxed kernel here imports cffi, pickle5 and
// backports_abc that way (Pillow and friends try them, and carry on when
// they are missing). Session A leaves cffi.py, pickle5.py and
// backports_abc.py in the shared workspace, each ending in ImportError so
// nothing shows; session B draws a plot, and A's code runs in B's kernel,
// with B's tool token and approvals. The same holds for a planted
// usercustomize.py or sitecustomize.py (stopped: they are looked up before
// the workspace joins sys.path).
//
// It fails while A's modules run in B; it would pass if the workspace were
// not on sys.path at all (import by explicit path), or only for modules
// that the cell itself imports.
func TestRedteamOptionalImportFromWorkspace(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	srv := newServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox()})
	url := serveHTTP(t, srv)
	a := connectHTTP(t, url, nil)
	b := connectHTTP(t, url, nil)
	run(t, b, "pass")
	run(t, a, `for m in ("cffi", "pickle5", "backports_abc", "usercustomize", "sitecustomize"):
    open(m + ".py", "w").write("import os\nos.environ['RAN_' + __name__] = 'session A'\nraise ImportError('nothing to see')\n")`)
	if res := call(t, b, "reset", map[string]any{}); res.IsError {
		t.Fatalf("reset: %s", text(res))
	}
	run(t, b, "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.savefig('b.png')")
	got := strings.TrimSpace(run(t, b, "import os\nprint(sorted(k[4:] for k in os.environ if k.startswith('RAN_')))"))
	if got != "[]" {
		t.Errorf("session A's modules ran in session B's kernel when B drew a plot: %s", got)
	}
}
