package seccomp

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/testenv/ci"
)

// guardWorkspace makes a workspace as a user would have it: a repository
// at the root whose core.hooksPath is a folder of the tree (tools/hooks),
// a nested repository five levels down with hooks in scripts/githooks, a
// bare repository, a .vscode folder and a .env.
func guardWorkspace(t *testing.T) string {
	t.Helper()
	git := ci.NeedsTool(t, "git")
	ws := t.TempDir()
	sh := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command(git, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	sh(ws, "init", "-q")
	sh(ws, "config", "core.hooksPath", "tools/hooks")
	nested := filepath.Join(ws, "a", "b", "c", "d", "e")
	os.MkdirAll(nested, 0o755)
	sh(nested, "init", "-q")
	sh(nested, "config", "core.hooksPath", "scripts/githooks")
	sh(nested, "config", "include.path", "../scripts/shared.gitconfig") // relative to .git: e/scripts
	os.MkdirAll(filepath.Join(ws, "store.git"), 0o755)
	sh(filepath.Join(ws, "store.git"), "init", "-q", "--bare")
	for _, d := range []string{"tools/hooks", "a/b/c/d/e/scripts/githooks", ".vscode", "src"} {
		os.MkdirAll(filepath.Join(ws, d), 0o755)
	}
	os.WriteFile(filepath.Join(ws, ".env"), []byte("TOKEN=secret\n"), 0o600)
	os.WriteFile(filepath.Join(nested, "scripts", "shared.gitconfig"), []byte("[core]\n\tbare = false\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "a/b/c/d/e/scripts/githooks/pre-commit"), []byte("#!/bin/sh\n"), 0o644)
	return ws
}

// snapshot records every path below ws and its content, to tell what an
// attack changed.
func snapshot(t *testing.T, ws string) map[string]string {
	t.Helper()
	m := map[string]string{}
	filepath.Walk(ws, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(ws, p)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			m[rel] = "link:" + l
		case fi.IsDir():
			m[rel] = "dir " + fi.Mode().String()
		case !fi.Mode().IsRegular():
			m[rel] = fi.Mode().String() // a FIFO: never opened
		default:
			b, _ := os.ReadFile(p)
			m[rel] = fi.Mode().String() + " " + string(b)
		}
		return nil
	})
	return m
}

// TestGuardRefusesHostPaths is the attack table: each snippet is kernel
// code trying to leave a file that a host program would run or obey. It
// must fail, and the workspace must be as before.
func TestGuardRefusesHostPaths(t *testing.T) {
	py := python(t)
	attacks := []struct{ name, code string }{
		{"new .git at depth", `os.makedirs("src/x/y/z/.git/hooks")`},
		{"repository under node_modules", `os.makedirs("node_modules/pkg/.git/hooks")`},
		{"repository under .venv", `os.makedirs(".venv/lib/python3/site-packages/p/.git")`},
		{"repository under venv", `os.makedirs("venv/src/.git")`},
		{"husky under node_modules", `os.makedirs("node_modules/pkg/.husky")`},
		{"new .git at the root of a fresh folder", `os.mkdir("newproj"); os.mkdir("newproj/.git")`},
		{".git as a file", `open("src/.git", "w").write("gitdir: /tmp/evil\n")`},
		{".git in upper case", `os.mkdir("src/.GIT")`},
		{".git with a zero-width joiner", "os.mkdir(\"src/.g\u200cit\")"},
		{".git with a trailing dot", `os.mkdir("src/.git.")`},
		{".git's NTFS short name", `os.mkdir("src/GIT~1")`},
		{"hook in the root repository", `open(".git/hooks/pre-commit", "w").write("#!/bin/sh\nid\n")`},
		{"root config", `open(".git/config", "a").write("[core]\n\tfsmonitor = ./evil\n")`},
		{"truncate root config", `os.truncate(".git/config", 0)`},
		{"remove the index", `os.unlink(".git/HEAD")`},
		{"rename .git away", `os.rename(".git", "git-old")`},
		{"rename a folder to .git", `os.makedirs("src/fake/hooks"); os.rename("src/fake", "src/.git")`},
		{"hooksPath of the root repository", `open("tools/hooks/pre-commit", "w").write("#!/bin/sh\nid\n")`},
		{"hooksPath folder replaced", `os.rename("tools/hooks", "tools/old"); os.mkdir("tools/hooks")`},
		{"hooksPath of a nested repository", `open("a/b/c/d/e/scripts/githooks/post-checkout", "w").write("x")`},
		{"nested hook made executable", `os.chmod("a/b/c/d/e/scripts/githooks/pre-commit", 0o755)`},
		{"include.path of a nested repository", `open("a/b/c/d/e/scripts/shared.gitconfig", "a").write("[core]\n\tfsmonitor = ./evil\n")`},
		{"bare repository's hook", `open("store.git/hooks/post-update", "w").write("x")`},
		{"bare repository's config", `open("store.git/config", "a").write("[core]\n\tsshCommand = ./evil\n")`},
		{"new bare layout HEAD last", `os.makedirs("src/b/objects"); os.makedirs("src/b/refs"); open("src/b/HEAD", "w").write("ref: refs/heads/main\n")`},
		{"new bare layout HEAD first", `os.makedirs("src/c"); open("src/c/HEAD", "w").write("ref: refs/heads/main\n"); os.makedirs("src/c/objects")`},
		{"new bare layout by rename", `os.makedirs("src/d"); open("src/d/HEAD", "w").write("x"); os.makedirs("src/tmpobj"); os.rename("src/tmpobj", "src/d/refs")`},
		{"vscode tasks", `open(".vscode/tasks.json", "w").write("{}")`},
		{"vscode at depth", `os.makedirs("src/p/q/.vscode")`},
		{"claude settings at depth", `os.makedirs("src/p/.claude")`},
		{"mcp.json", `open("src/.mcp.json", "w").write("{}")`},
		{"cursor mcp", `os.makedirs(".cursor")`},
		{"gemini settings", `os.makedirs("src/.gemini")`},
		{"codex config", `os.makedirs(".codex")`},
		{"envrc", `open("src/.envrc", "w").write("id\n")`},
		{"env", `open(".env", "a").write("X=1\n")`},
		{"env variant", `open("src/.env.local", "w").write("X=1\n")`},
		{"npmrc", `open(".npmrc", "w").write("script-shell=/tmp/x\n")`},
		{"pre-commit config", `open(".pre-commit-config.yaml", "w").write("repos: []\n")`},
		{"gitattributes", `open("src/.gitattributes", "w").write("* filter=x\n")`},
		{"husky", `os.makedirs(".husky/_")`},
		{"bashrc", `open("src/.bashrc", "w").write("id\n")`},
		{"ipybox state", `os.makedirs(".ipybox")`},
		{"generated tools", `os.makedirs("mcptools/evil")`},
		{"ipython kernel config", `open("ipython_kernel_config.py", "w").write("print(1)\n")`},
		{"link to a hook", `os.link(".git/HEAD", "src/head-alias")`},
		{"symlink then write", `os.symlink("../.git/hooks/post-commit", "src/s"); open("src/s", "w").write("x")`},
		{"dangling symlink created through", `os.symlink(".git", "src/t"); open("src/t", "w").write("gitdir: /tmp/x\n")`},
		{"symlink named .git", `os.symlink("/tmp", "src/.git")`},
		{"fifo named .envrc", `os.mkfifo("src/.envrc")`},
		{"through /proc/self/fd", `d = os.open("src", os.O_RDONLY); os.mkdir("/proc/self/fd/%d/.git" % d)`},
		{"through /dev/fd", `d = os.open(".git", os.O_RDONLY); open("/dev/fd/%d/hooks/post-merge" % d, "w").write("x")`},
		{"through dir_fd", `d = os.open(".git", os.O_RDONLY); open("hooks/pre-push", "w", opener=lambda p, f: os.open(p, f, 0o755, dir_fd=d)).write("x")`},
		{"O_TMPFILE then link", `fd = os.open("src", os.O_TMPFILE | os.O_WRONLY, 0o755); os.write(fd, b"x"); os.link("/proc/self/fd/%d" % fd, ".git/hooks/pre-rebase")`},
		{"chdir into .git", `os.chdir(".git/hooks"); open("commit-msg", "w").write("x")`},
		{"rename over a hook", `open("src/h", "w").write("x"); os.rename("src/h", ".git/hooks/pre-commit")`},
		{"shell redirection", `import subprocess; r = subprocess.run("echo x > .git/hooks/pre-commit", shell=True); assert r.returncode == 0`},
		{"shell mkdir", `import subprocess; r = subprocess.run("mkdir -p src/k/.git", shell=True); assert r.returncode == 0`},
		{"git init inside", `import subprocess; r = subprocess.run(["git", "init", "-q", "src/g"], capture_output=True); assert r.returncode == 0, r.stderr`},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			ws := guardWorkspace(t)
			before := snapshot(t, ws)
			code := "import os\ntry:\n" + indent(a.code) + "\nexcept Exception as e:\n    print('DENIED', type(e).__name__, e)\nelse:\n    print('DONE')\n"
			out, stderr, _ := run(t, &Policy{Roots: []string{ws}, Workspace: ws}, ws, py, "-c", code)
			after := snapshot(t, ws)
			changed := diff(before, after)
			if !strings.HasPrefix(out, "DENIED") {
				t.Errorf("the attack ran: %s%s", out, stderr)
			}
			if bad := dangerous(changed); len(bad) > 0 {
				t.Errorf("a host-read path changed: %v", bad)
			}
			if bare := bareLayouts(t, ws); len(bare) > 0 {
				t.Errorf("a folder is laid out as a git repository: %v", bare)
			}
		})
	}
}

// dangerous keeps the changed paths that host programs read (an attack may
// create harmless folders before it is refused).
func dangerous(changed []string) []string {
	var out []string
	for _, c := range changed {
		low := strings.ToLower(c)
		for _, w := range []string{".git", "git~1", "tools/hooks", "githooks", "shared.gitconfig", "store.git", ".vscode", ".claude", ".mcp.json",
			".cursor", ".gemini", ".codex", ".envrc", ".env", ".npmrc", ".pre-commit", ".gitattributes", ".husky", ".bashrc", ".ipybox",
			"mcptools", "ipython_kernel"} {
			if strings.Contains(low, w) || strings.Contains(low, ".g\u200cit") {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// bareLayouts lists the folders below ws, but the bare repository the
// test made, that git would take for a repository.
func bareLayouts(t *testing.T, ws string) []string {
	var out []string
	filepath.Walk(ws, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.IsDir() || p == filepath.Join(ws, "store.git") || filepath.Base(p) == ".git" {
			return nil
		}
		has := func(n string) bool { _, err := os.Lstat(filepath.Join(p, n)); return err == nil }
		if has("HEAD") && (has("objects") || has("refs") || has("commondir")) {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func diff(a, b map[string]string) []string {
	var out []string
	for k, v := range b {
		if a[k] != v {
			out = append(out, k)
		}
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			out = append(out, k+" (removed)")
		}
	}
	return out
}

func indent(code string) string {
	var b strings.Builder
	for _, l := range strings.Split(code, "\n") {
		b.WriteString("    " + l + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// TestGuardLetsOrdinaryWorkThrough checks that what kernel code does every
// day still works under the guard, with the same results as without it.
func TestGuardLetsOrdinaryWorkThrough(t *testing.T) {
	py := python(t)
	ws := guardWorkspace(t)
	code := `import os, sys, shutil, tempfile, subprocess, stat
os.makedirs("src/pkg/sub", exist_ok=True)
open("src/pkg/__init__.py", "w").write("x = 1\n")
with open("data.csv", "w") as f: f.write("a,b\n1,2\n")
with open("data.csv", "a") as f: f.write("3,4\n")
os.rename("data.csv", "src/data.csv")
shutil.copy("src/data.csv", "src/data2.csv")
try:
    os.link("src/data.csv", "src/data3.csv")
except PermissionError:
    print("no hard link")
os.symlink("data.csv", "src/alias.csv")
open("src/alias.csv", "a").write("5,6\n")
os.truncate("src/data2.csv", 8)
os.chmod("src/data.csv", 0o640)
print(oct(os.stat("src/data.csv").st_mode & 0o777))
fd = os.open("src/excl", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
os.close(fd)
try:
    os.open("src/excl", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
except FileExistsError:
    print("excl ok")
print(oct(os.stat("src/excl").st_mode & 0o777))
os.unlink("src/excl")
open(".gitignore", "w").write("*.pyc\n")
open("HEAD", "w").write("just a file\n")
os.mkdir("src/objects")
os.mkdir("git")
os.mkdir("src/.github")
open("src/.github/workflow.yml", "w").write("x")
open("/dev/null", "w").write("x")
with open("/dev/stdout", "w") as f: f.write("stdout ok\n")
d = tempfile.mkdtemp()
os.makedirs(d + "/.git/hooks")
open(d + "/.git/hooks/pre-commit", "w").write("private tmp is not the host's")
fd = os.open("src", os.O_TMPFILE | os.O_WRONLY, 0o644); os.write(fd, b"t"); os.link("/proc/self/fd/%d" % fd, "src/tmpfile"); os.close(fd)
dfd = os.open("src", os.O_RDONLY)
os.mkdir("viafd", dir_fd=dfd)
open("src/viafd/f", "w").write("x")
shutil.rmtree("src/pkg")
r = subprocess.run("echo shell > src/shell.txt && mkdir -p src/deep/er && cp src/shell.txt src/deep/er/", shell=True)
print("shell", r.returncode)
os.rename("src/alias.csv", "src/alias2.csv")
print(open("src/deep/er/shell.txt").read().strip(), open("src/viafd/f").read())
print("all ok")
`
	out, stderr, rc := run(t, &Policy{Roots: []string{ws}, Workspace: ws}, ws, py, "-c", code)
	if rc != 0 {
		t.Fatalf("exit %d\n%s%s", rc, out, stderr)
	}
	want := "no hard link\n0o640\nexcl ok\n0o644\nstdout ok\nshell 0\nshell x\nall ok\n"
	if out != want {
		t.Fatalf("got\n%s\nwant\n%s\nstderr: %s", out, want, stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "src/data.csv")); string(b) != "a,b\n1,2\n3,4\n5,6\n" {
		t.Fatalf("data.csv = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "src/data2.csv")); string(b) != "a,b\n1,2\n" {
		t.Fatalf("data2.csv = %q (truncated to 8)", b)
	}
}

func TestKernelVersion(t *testing.T) {
	for in, want := range map[string][2]int{"6.18.44-fc-v657": {6, 18}, "5.14.0-427.el9.x86_64": {5, 14}, "4.19.0+": {4, 19}} {
		ma, mi, ok := kernelVersion(in)
		if !ok || ma != want[0] || mi != want[1] {
			t.Errorf("kernelVersion(%q) = %d, %d, %v", in, ma, mi, ok)
		}
	}
	if _, _, ok := kernelVersion("weird"); ok {
		t.Error("kernelVersion(weird) ok")
	}
	if err := GuardSupported(); err != nil {
		t.Logf("this host cannot run the guard: %v", err)
	}
}
