package sandbox

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
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

// TestIsPythonName: Command asks only interpreters named like Python for
// their prefixes (asking runs the program on the host with -I -c ...).
func TestIsPythonName(t *testing.T) {
	t.Parallel()
	for p, want := range map[string]bool{
		"/v/bin/python": true, "/v/bin/python3": true, "/usr/bin/python3.11": true,
		"/usr/bin/npx": false, "/usr/bin/node": false, "/v/bin/python-config": false, "/v/bin/pythonx": false, "/v/bin/uvx": false,
	} {
		if got := isPythonName(p); got != want {
			t.Errorf("isPythonName(%s) = %v, want %v", p, got, want)
		}
	}
}

// TestCommandBindsVenvPrefix: Command, like a kernel's start, shows a
// venv interpreter's prefix (PyPI's kernel stack, outside /usr and the
// workspace): ipybox mcp runs the virtualenv and pip helpers with it.
// Before, Command refused it: "command ... is not visible in the sandbox".
func TestCommandBindsVenvPrefix(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	py, want := testenv.PyPIPython(t)
	x := newSbx(t, nil, nil)
	cmd, err := x.Command(context.Background(), py, []string{"-I", "-c", "import ipykernel; print(ipykernel.__version__)"}, []string{"PATH=/usr/bin"}, "")
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != want {
		t.Errorf("%s in the sandbox: %q, %v: %s; want ipykernel %s", py, out, err, errb.String(), want)
	}
}
