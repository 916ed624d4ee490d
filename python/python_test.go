//go:build linux

// Package python_test runs the Python API's unittest suite (python/tests)
// from go test, so that scripts/test.sh and CI run it: against the built
// binary, a real kernel and the npm server-everything, with each Python
// 3.10+ found, Debian's (the one with ipykernel) and python3 on PATH (a
// pyenv build here, without ipykernel: the package needs only the
// standard library, and ipybox finds the kernel's Python itself). Linux
// only: the suite checks processes through /proc.
package python_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv"
)

// interpreters returns the Pythons to run the suite with, by real path.
func interpreters(t *testing.T) []string {
	kernelPy := testenv.NeedsPython(t)
	var out []string
	seen := map[string]bool{}
	for _, p := range []string{kernelPy, "python3"} {
		b, err := exec.Command(p, "-c", "import sys; print(sys.version_info >= (3, 10), sys.executable)").Output()
		if err != nil {
			continue
		}
		ok, exe, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
		real, err := filepath.EvalSymlinks(exe)
		if err != nil || ok != "True" || seen[real] {
			continue
		}
		seen[real] = true
		out = append(out, exe)
	}
	if len(out) == 0 {
		testenv.Missing(t, "a Python 3.10 or newer")
	}
	return out
}

// TestPythonAPI runs python -m unittest in python/ with each interpreter,
// at once. Nothing may be skipped: every part the suite needs is given to
// it.
func TestPythonAPI(t *testing.T) {
	t.Parallel()
	pys := interpreters(t)
	everything := testenv.NPMBin(t, "mcp-server-everything")
	bin := testenv.Binary(t)
	for _, py := range pys {
		t.Run(strings.ReplaceAll(py, "/", "_"), func(t *testing.T) {
			// Each interpreter's run has its own workspaces: the runs overlap.
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-s", "tests", "-t", ".", "-v")
			// ipybox mcp keeps its approval policy and log in the user's
			// config folder: the suite gets one of its own.
			cmd.Env = append(os.Environ(), "IPYBOX_BIN="+bin, "IPYBOX_TEST_EVERYTHING="+everything, "PYTHONDONTWRITEBYTECODE=1", "XDG_CONFIG_HOME="+t.TempDir())
			cmd.WaitDelay = 10 * time.Second
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s -m unittest: %v\n%s", py, err, out)
			}
			m := regexp.MustCompile(`(?m)^Ran (\d+) tests? `).FindSubmatch(out)
			if m == nil || strings.Contains(string(out), "skipped") {
				t.Fatalf("%s -m unittest: no test ran, or some were skipped:\n%s", py, out)
			}
			t.Logf("%s: ran %s tests", py, m[1])
		})
	}
}
