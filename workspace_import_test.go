package ipybox_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
)

// TestWorkspaceModules: the cells import modules the workspace holds, and
// those import each other; the standard library and installed packages
// never import from the workspace, and a workspace module never shadows
// one of theirs (sessions share the workspace: see docs/sandbox.md).
func TestWorkspaceModules(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	for name, src := range map[string]string{
		"helpers.py":    "from helper_two import VALUE\n",
		"helper_two.py": "VALUE = 42\n",
		"json.py":       "raise SystemExit('a workspace json.py ran')\n",
		"cffi.py":       "ORIGIN = 'workspace'\n", // a module a library tries
	} {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ex := start(t, &ipybox.Options{WorkDir: ws})
	got := run(t, ex, `import json, importlib, helpers
print("helpers", helpers.VALUE)
print("json", json.__file__.endswith("json/__init__.py"))
m = importlib.import_module("helper_two")
print("import_module", m.VALUE)
def library_import():
    # What a library does: import from the code of a module that is not
    # the user's. exec with the globals of an installed module stands for it.
    g = {"__name__": "somelib"}
    exec(compile("import cffi\nresult = cffi.__file__", "/usr/lib/python3/dist-packages/somelib.py", "exec"), g)
    return g["result"]
try:
    print("library got", library_import())
except ImportError:
    print("library: no cffi")`).Text
	for _, want := range []string{"helpers 42", "json True", "import_module 42", "library: no cffi"} {
		if !strings.Contains(got, want) {
			t.Errorf("want %q in:\n%s", want, got)
		}
	}
}
