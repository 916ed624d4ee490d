package statedir

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/testenv/ci"
)

func TestEnsure(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	dir, err := Ensure(ws)
	if err != nil || dir != filepath.Join(ws, ".ipybox") {
		t.Fatalf("Ensure: %q, %v", dir, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, ".gitignore"))
	if err != nil || !strings.HasSuffix(string(b), "\n*\n") {
		t.Fatalf(".gitignore: %q, %v", b, err)
	}
	// A .gitignore the user changed is kept.
	os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("mine\n"), 0o644)
	if _, err := Ensure(ws); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".gitignore")); string(b) != "mine\n" {
		t.Errorf("an existing .gitignore was replaced: %q", b)
	}
}

// TestEnsureRefusesLink: a .ipybox that is a link is not followed.
func TestEnsureRefusesLink(t *testing.T) {
	t.Parallel()
	ws, elsewhere := t.TempDir(), t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(ws, ".ipybox")); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(ws); err == nil {
		t.Error("Ensure followed a link at .ipybox")
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("written through the link: %v", ents)
	}
}

// TestGitStatusClean: in a repository that is the workspace, the state
// folder does not show in git status.
func TestGitStatusClean(t *testing.T) {
	t.Parallel()
	git := ci.NeedsTool(t, "git")
	ws := t.TempDir()
	if out, err := exec.Command(git, "-C", ws, "init", "-q").CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	dir, err := Ensure(ws)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "servers.json"), []byte("{}"), 0o600)
	out, err := exec.Command(git, "-C", ws, "status", "--porcelain", "--untracked-files=all").CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Errorf("git status: %q %v; want nothing", out, err)
	}
}
