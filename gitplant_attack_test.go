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

// TestAttackDeepRepoConfig: a repository at any depth is write-protected
// (kernel code would otherwise add core.fsmonitor to its config), and
// kernel code cannot make a repository in the workspace at all: not with
// git init, not by hand, not laid out bare. The refusal is a plain
// permission error inside; nothing is left for host git to find.
func TestAttackDeepRepoConfig(t *testing.T) {
	t.Parallel()
	testenv.NeedsTool(t, "git")
	ws := t.TempDir()
	deep := filepath.Join(ws, "a", "b", "c", "d", "e", "f", "proj")
	if out, err := exec.Command("git", "init", "-q", deep).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws})
	res := run(t, ex, `import os, subprocess
def attempt(name, f):
    try:
        f()
        print(name, "DONE")
    except OSError as e:
        print(name, "refused", type(e).__name__)
attempt("deep-config", lambda: open("a/b/c/d/e/f/proj/.git/config", "a").write("[core]\n\tfsmonitor = touch /tmp/x\n"))
print("git-init", subprocess.run(["git", "init", "-q", "made-inside"], capture_output=True).returncode)
attempt("by-hand", lambda: os.makedirs("evil/.git/objects"))
def bare():
    os.makedirs("bare/objects"); os.makedirs("bare/refs")
    open("bare/HEAD", "w").write("ref: refs/heads/main\n")
attempt("bare", bare)`)
	if err := ex.Close(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"deep-config refused PermissionError", "by-hand refused PermissionError", "bare refused PermissionError"} {
		if !strings.Contains(res.Text, want) {
			t.Errorf("want %q in %q", want, res.Text)
		}
	}
	if strings.Contains(res.Text, "git-init 0") {
		t.Errorf("git init succeeded inside the sandbox: %q", res.Text)
	}
	for _, p := range []string{"made-inside/.git", "evil/.git", "bare/HEAD"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
			t.Errorf("%s exists on the host", p)
		}
	}
}
