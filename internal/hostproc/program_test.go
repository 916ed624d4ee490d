package hostproc

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestProgramInside: the spellings of "a program kernel code can change"
// (break B of issue 34's fresh round): a file in the workspace; a link
// there to a program outside (kernel code replaces the link); a venv's
// interpreter, a link to the base outside, whose site-packages are in the
// workspace; the same venv reached through a link from outside; a program
// outside that is a link into the workspace. A program outside, and a
// venv outside, are not.
func TestProgramInside(t *testing.T) {
	ws, out := t.TempDir(), t.TempDir()
	sys := filepath.Join(out, "python3")
	write := func(p string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, p string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	write(sys)
	write(filepath.Join(ws, "bin", "python3"))
	link(sys, filepath.Join(ws, "links", "python3"))
	link(sys, filepath.Join(ws, ".venv", "bin", "python"))
	write(filepath.Join(ws, ".venv", "pyvenv.cfg"))
	link(filepath.Join(ws, ".venv"), filepath.Join(out, "venvlink"))
	link(filepath.Join(ws, "bin", "python3"), filepath.Join(out, "intows"))
	link(sys, filepath.Join(out, "venv", "bin", "python"))
	write(filepath.Join(out, "venv", "pyvenv.cfg"))
	w := []string{ws}
	for _, p := range []string{
		filepath.Join(ws, "bin", "python3"),
		filepath.Join(ws, "links", "python3"),
		filepath.Join(ws, ".venv", "bin", "python"),
		filepath.Join(out, "venvlink", "bin", "python"),
		filepath.Join(out, "intows"),
	} {
		if ProgramInside(p, w) == "" {
			t.Errorf("%s: not seen as in the workspace", p)
		}
		if _, err := Prepare(exec.Command(p), w); err == nil {
			t.Errorf("%s: Prepare let it start on the host", p)
		}
	}
	for _, p := range []string{sys, filepath.Join(out, "venv", "bin", "python")} {
		if got := ProgramInside(p, w); got != "" {
			t.Errorf("%s: seen as in %s", p, got)
		}
	}
}
