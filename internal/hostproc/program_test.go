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

// TestLookPath: a program ipybox runs on the host is found on PATH only
// outside the folders kernel code can write: an entry in the workspace
// (an activated venv's bin), a relative entry, and a link from outside
// into the workspace are passed over for the next entry; with nothing
// else, the error names what was skipped.
func TestLookPath(t *testing.T) {
	ws, out, links := t.TempDir(), t.TempDir(), t.TempDir()
	write := func(p string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(ws, ".venv", "bin", "tool"))
	write(filepath.Join(ws, "rel", "tool"))
	write(filepath.Join(out, "tool"))
	if err := os.Symlink(filepath.Join(ws, ".venv", "bin", "tool"), filepath.Join(links, "tool")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(ws)
	sep := string(os.PathListSeparator)
	t.Setenv("PATH", filepath.Join(ws, ".venv", "bin")+sep+"rel"+sep+sep+links+sep+out)
	got, err := LookPath("tool", []string{ws})
	if err != nil || got != filepath.Join(out, "tool") {
		t.Fatalf("LookPath = %q, %v; want %s", got, err, filepath.Join(out, "tool"))
	}
	t.Setenv("PATH", filepath.Join(ws, ".venv", "bin")+sep+links)
	if got, err := LookPath("tool", []string{ws}); err == nil {
		t.Fatalf("LookPath = %q, want an error: every tool on PATH is kernel code's", got)
	}
	if _, err := LookPath(filepath.Join(ws, ".venv", "bin", "tool"), []string{ws}); err == nil {
		t.Errorf("LookPath of a path in the workspace: want an error")
	}
	if _, err := exec.LookPath("sh"); err == nil {
		t.Setenv("PATH", "/usr/bin:/bin")
		if _, err := LookPath("sh", []string{ws}); err != nil {
			t.Errorf("LookPath(sh) with a system PATH: %v", err)
		}
	}
}
