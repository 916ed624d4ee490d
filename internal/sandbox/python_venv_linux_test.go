package sandbox

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ipybox/ipybox/internal/testenv"
)

// TestSystemPythonTellsVenvs checks that a virtual environment made from
// the system's interpreter is not taken for it: its bin/python is a link
// to /usr/bin/python3, but its packages (the prefix the sandbox must bind)
// are beside the link. Taken for the system's, its prefix was never bound
// and the kernel could not start in the sandbox ("interpreter ... is not
// visible"); PyPI's kernel stack lives in such a virtualenv
// (scripts/pyvenv.sh).
func TestSystemPythonTellsVenvs(t *testing.T) {
	t.Parallel()
	sys := "/usr/bin/python3"
	if _, err := os.Stat(sys); err != nil {
		testenv.Missing(t, "no %s on this system", sys)
	}
	if !systemPython(sys) {
		t.Errorf("systemPython(%s) = false, want true", sys)
	}
	venv := t.TempDir()
	bin := filepath.Join(venv, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"python", "python3"} {
		if err := os.Symlink(sys, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(venv, "pyvenv.cfg"), []byte("home = /usr/bin\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"python", "python3"} {
		if p := filepath.Join(bin, name); systemPython(p) {
			t.Errorf("systemPython(%s) = true for a virtualenv's link to %s; want false (its prefix must be bound)", p, sys)
		}
	}
	// A link to the system's interpreter outside any virtualenv is the
	// system's.
	plain := filepath.Join(t.TempDir(), "python3")
	if err := os.Symlink(sys, plain); err != nil {
		t.Fatal(err)
	}
	if !systemPython(plain) {
		t.Errorf("systemPython(%s) = false for a plain link to %s, want true", plain, sys)
	}
}
