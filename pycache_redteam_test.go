package ipybox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestRedteamPycachePoisoning: the host's own module in the workspace,
// lib/mod.py, is never touched by kernel code; a person reviews it (and
// git status, where __pycache__ is ignored) and runs it on the host. But
// Python runs lib/__pycache__/mod.cpython-3XX.pyc instead of the source
// whenever the cache's header carries the source's mtime and size, which
// kernel code can read. Kernel code compiles its own code into that cache
// with the header of the host's file; the host's `python3 -c "import mod"`
// (or pytest, or anything that imports it) runs the kernel's code.
//
// It fails while the host runs the planted bytecode; it would pass if
// __pycache__ (and *.pyc) were on the host-read list, so that kernel code
// could neither make nor change them.
func TestRedteamPycachePoisoning(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	ws := t.TempDir()
	marker := filepath.Join(t.TempDir(), "host-ran-kernel-bytecode")
	os.MkdirAll(filepath.Join(ws, "lib"), 0o755)
	if err := os.WriteFile(filepath.Join(ws, "lib", "mod.py"), []byte("VALUE = 'the host wrote me'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws})
	// The path the host's Python reads, spelled out: the kernel's own
	// cache_from_source may point elsewhere (a cache prefix).
	got := run(t, ex, `import os, sys, importlib.util, marshal, struct
src = "lib/mod.py"
st = os.stat(src)
code = compile("open("+repr(`+pyStr(marker)+`)+", 'w').write('x')\nVALUE = 'the host wrote me'\n", os.path.abspath(src), "exec")
pyc = os.path.join("lib", "__pycache__", "mod." + sys.implementation.cache_tag + ".pyc")
data = importlib.util.MAGIC_NUMBER + struct.pack("<III", 0, int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF) + marshal.dumps(code)
try:
    os.makedirs(os.path.dirname(pyc), exist_ok=True)
    open(pyc, "wb").write(data); print("planted", pyc)
except OSError as e:
    print("refused", e)`).Text
	if !strings.HasPrefix(strings.TrimSpace(got), "refused") {
		t.Errorf("kernel code planted bytecode in the workspace's __pycache__: %s", got)
	}
	cmd := exec.Command(py, "-c", "import mod; print(mod.VALUE)")
	cmd.Dir = filepath.Join(ws, "lib")
	out, _ := cmd.CombinedOutput()
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the host imported its own lib/mod.py and ran bytecode that kernel code planted in __pycache__ (%s; host printed %q)",
			strings.TrimSpace(got), strings.TrimSpace(string(out)))
	}
}
