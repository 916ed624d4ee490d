package testenv

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// PyPIPython returns the interpreter of the venv that scripts/setup.sh
// makes for PyPI's kernel stack (scripts/pyvenv.sh pystack: ipykernel 7,
// pinned and hashed), in $IPYBOX_CACHE_DIR (default the user's cache
// folder's ipybox/), and the version of ipykernel it imports. It skips
// locally and fails in CI when the venv is missing.
func PyPIPython(t testing.TB) (python, ipykernelVersion string) {
	t.Helper()
	NeedsPython(t)
	py := filepath.Join(venvRoot(), "pystack", "bin", "python")
	out, err := exec.Command(py, "-I", "-c", "import ipykernel; print(ipykernel.__version__)").Output()
	if err != nil {
		Missing(t, "PyPI's kernel stack at %s (%v); run scripts/setup.sh (scripts/pyvenv.sh pystack)", py, err)
	}
	return py, strings.TrimSpace(string(out))
}
