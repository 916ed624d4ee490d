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

// hostGitStatus runs `git status` on the host in dir, as a user would (or a
// shell prompt, or an agent that checks the tree when it starts), with no
// global or system config and with the walk up stopped at stop's parent.
func hostGitStatus(t *testing.T, dir, stop string) string {
	t.Helper()
	git := testenv.NeedsTool(t, "git")
	cmd := exec.Command(git, "status")
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CEILING_DIRECTORIES=" + filepath.Dir(stop),
	}
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// TestRedteamBareLayoutFromSockets: the guard refuses to complete a bare
// repository's layout (HEAD beside objects/ and refs/), but it hands only
// the calls that create names through open, mkdir, mknod, link, symlink
// and rename. bind(2) on a unix socket also creates a name, and git's test
// for a repository folder is access(objects, X_OK) and access(refs, X_OK):
// a socket (mode 0777 &^ umask) passes. So kernel code writes HEAD and
// config in a folder (no layout yet, so both are allowed), binds sockets
// named objects and refs beside them, and the folder is a repository whose
// config the host's git obeys: `git status` in it, or in any folder below
// it, runs core.fsmonitor on the host.
//
// It fails while the host runs the command; it passes when bind is refused
// at those names (or a socket is not counted by git).
func TestRedteamBareLayoutFromSockets(t *testing.T) {
	t.Parallel()
	testenv.NeedsTool(t, "git")
	ws := t.TempDir()
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws})
	for _, at := range []string{"evil", "."} { // a folder, and the workspace root itself
		marker := filepath.Join(t.TempDir(), "host-ran-fsmonitor")
		got := run(t, ex, `import os, socket
d = `+pyStr(at)+`
os.makedirs(os.path.join(d, "sub"), exist_ok=True)
out = []
def step(name, fn):
    try:
        fn(); out.append(name + ":ok")
    except OSError as e:
        out.append(name + ":" + (e.strerror or str(e)))
step("HEAD", lambda: open(os.path.join(d, "HEAD"), "w").write("ref: refs/heads/main\n"))
step("config", lambda: open(os.path.join(d, "config"), "w").write(
    "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = " + os.path.abspath(d) +
    "\n\tfsmonitor = \"touch `+marker+`; false\"\n"))
for n in ("objects", "refs"):
    step("bind " + n, lambda: socket.socket(socket.AF_UNIX).bind(os.path.join(d, n)))
print(" ".join(out))`).Text
		t.Logf("%s: %s", at, got)
		hostGitStatus(t, filepath.Join(ws, at, "sub"), ws)
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("git status on the host, in %s/sub, ran core.fsmonitor from a config that kernel code wrote: "+
				"the folder became a bare repository through sockets bound at objects and refs (%s)", at, strings.TrimSpace(got))
		}
	}
}
