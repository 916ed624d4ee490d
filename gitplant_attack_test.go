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

// TestAttackDeepRepoConfig: a repository deeper than the names searched
// near the root is write-protected too (kernel code would otherwise add
// core.fsmonitor to its config); a plain repository that kernel code
// makes (git init) survives the session's end, while one whose config can
// run a command does not stay where git finds it.
func TestAttackDeepRepoConfig(t *testing.T) {
	t.Parallel()
	testenv.NeedsTool(t, "git")
	ws := t.TempDir()
	deep := filepath.Join(ws, "a", "b", "c", "d", "proj")
	if out, err := exec.Command("git", "init", "-q", deep).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws})
	res := run(t, ex, `import os, subprocess
try:
    open("a/b/c/d/proj/.git/config", "a").write("[core]\n\tfsmonitor = touch /tmp/x\n")
    print("WROTE")
except OSError as e:
    print("protected", type(e).__name__)
print(subprocess.run(["git", "init", "-q", "made-inside"], capture_output=True).returncode)
os.makedirs("evil/.git/objects"); os.makedirs("evil/.git/refs")
open("evil/.git/HEAD", "w").write("ref: refs/heads/main\n")
open("evil/.git/config", "w").write("[core]\n\tpager = sh -c x\n")`)
	if !strings.Contains(res.Text, "protected") {
		t.Errorf("kernel code wrote the config of a repository 5 levels down: %q", res.Text)
	}
	if err := ex.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Text, "\n0\n") {
		t.Errorf("git init inside the sandbox failed: %q", res.Text)
	} else if _, err := os.Stat(filepath.Join(ws, "made-inside", ".git", "HEAD")); err != nil {
		t.Errorf("a plain repository made inside was disabled: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(ws, "evil", ".git")); err == nil {
		t.Errorf("evil/.git, with core.pager, is still where git finds it")
	}
	matches, _ := filepath.Glob(filepath.Join(ws, "evil", ".git.ipybox-quarantine-*"))
	if len(matches) != 1 {
		t.Errorf("want evil/.git renamed aside, found %v", matches)
	}
}
