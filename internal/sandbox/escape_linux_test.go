package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"github.com/ipybox/ipybox/internal/egress"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/testenv"
)

// The attack tests of issue 10 and 18: each class is attacked from inside a
// real sandbox, with several variants, and the host is checked afterwards.

// TestAttackHostGlobalKnobs: host-global kernel knobs must not be writable,
// and uid 0 inside must not be host root.
func TestAttackHostGlobalKnobs(t *testing.T) {
	t.Parallel()
	corePattern, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
	for _, mode := range []RootMode{RootMinimal, RootHost} {
		t.Run(string(mode), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.RootMode = mode
			x := newSbx(t, cfg, nil)
			x.attempts(t, "", []check{
				{"core-pattern", `write("/proc/sys/kernel/core_pattern", b"|/tmp/evil %p")`, false, "EROFS"},
				{"drop-caches", `write("/proc/sys/vm/drop_caches", b"3")`, false, "EROFS"},
				{"sysctl-hostname", `write("/proc/sys/kernel/hostname", b"evil")`, false, "EROFS"},
				{"sysrq", `write("/proc/sysrq-trigger", b"b")`, false, ""},
				{"oom-adj", `write("/proc/self/oom_score_adj", b"-1000")`, false, "EROFS"},
				{"remount-proc", `run("mount", "-o", "remount,rw", "/proc")`, false, ""},
				{"mount-proc", `cmount("/tmp")`, false, "EPERM"},
				{"sys-kernel", `write("/sys/kernel/mm/transparent_hugepage/enabled", b"always")`, false, ""},
				{"sys-cgroup", `write("/sys/fs/cgroup/cgroup.procs", b"1")`, false, ""},
				{"setrlimit-up", `__import__("resource").setrlimit(__import__("resource").RLIMIT_NPROC, (10**6, 10**6))`, false, ""},
				// A control: the proc files of the process itself still read.
				{"proc-read", `read("/proc/self/status")[:5]`, true, "Name"},
				{"fd-write", `open("/proc/self/fd/%d" % os.open("fdw.txt", os.O_CREAT | os.O_WRONLY), "w").write("x")`, true, ""},
			})
		})
	}
	if after, _ := os.ReadFile("/proc/sys/kernel/core_pattern"); !bytes.Equal(after, corePattern) {
		t.Errorf("core_pattern changed on the host: %q -> %q", corePattern, after)
	}
}

// TestMappedUID: when ipybox runs as root, nothing of the sandbox runs as
// host root, and what it writes lands with the workspace owner's ids.
func TestMappedUID(t *testing.T) {
	t.Parallel()
	if !runsAsRoot() {
		t.Skip("the mapping applies when ipybox runs as root")
	}
	ws := t.TempDir() // 0700, under another 0700 directory: MappedID cannot reach it on its own
	x := newSbx(t, nil, &Options{Workspace: ws})
	out := newLineWatcher("ready")
	p := x.start(t, out, nil, python, "-c", `
import os, sys, time
print("ids", os.getuid(), os.geteuid(), os.getgid(), flush=True)
open("made-inside.txt", "w").write("x")
print("ready", flush=True)
time.sleep(60)  # stay until killed
`)
	out.wait(t)
	if !strings.Contains(out.String(), "ids 0 0 0") {
		t.Errorf("inside ids:\n%s", out.String())
	}
	procs := testenv.Descendants(p.Pid())
	procs = append(procs, testenv.Proc{Pid: p.Pid()})
	procs = append(procs, nsPeers(procs)...) // a forked kernel (IPYBOX_TEST_SANDBOX_FORK)
	seen := 0
	for _, pr := range procs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pr.Pid))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 5 && f[0] == "Uid:" {
				seen++
				for _, id := range f[1:] {
					if id != strconv.Itoa(MappedID) {
						t.Errorf("process %d (%s) runs as host uid %s (Uid: %v); want %d everywhere", pr.Pid, pr.Cmdline, id, f[1:], MappedID)
					}
				}
			}
		}
	}
	if seen < 3 { // bwrap, the init, the program
		t.Errorf("only %d processes of the sandbox checked", seen)
	}
	st, err := os.Stat(filepath.Join(ws, "made-inside.txt"))
	if err != nil {
		t.Fatal(err)
	}
	p.Kill(context.Background())
	waitFor(t, p, 10*time.Second)
	wsInfo, err := os.Stat(ws)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.Sys().(*syscall.Stat_t).Uid, wsInfo.Sys().(*syscall.Stat_t).Uid; got != want {
		t.Errorf("a file written inside belongs to host uid %d; want the workspace owner %d", got, want)
	}
}

// TestAttackHostMetadata: the host's later tools must not run commands that
// kernel code planted in the workspace (git, shells, editors, Claude Code).
func TestAttackHostMetadata(t *testing.T) {
	t.Parallel()
	git := testenv.NeedsTool(t, "git")
	ws := t.TempDir()
	mark := filepath.Join(t.TempDir(), "fsmonitor-ran")
	runGit := func(dir string, args ...string) (string, error) {
		cmd := exec.Command(git, args...)
		cmd.Dir = dir
		cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM=1"}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := runGit(ws, "init", "-q"); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	sub := filepath.Join(ws, "sub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := runGit(sub, "init", "-q"); err != nil {
		t.Fatalf("git init sub: %v\n%s", err, out)
	}
	writeFile(t, filepath.Join(ws, ".vscode", "settings.json"), "{}")
	x := newSbx(t, nil, &Options{Workspace: ws})
	fsmon := fmt.Sprintf(`b"[core]\n\tfsmonitor = touch %s\n"`, mark)
	x.attempts(t, "", []check{
		{"git-config", `write(".git/config", ` + fsmon + `)`, false, "EACCES"},
		{"git-config-append", `open(".git/config", "a").write("x")`, false, ""},
		{"git-hook", `write(".git/hooks/pre-commit", b"#!/bin/sh\ntouch /tmp/x")`, false, "EACCES"},
		{"git-commondir", `write(".git/commondir", b"../evil-git")`, false, "EACCES"},
		{"git-info", `write(".git/info/attributes", b"* filter=evil")`, false, "EACCES"},
		{"git-rename", `os.rename(".git", "old-git")`, false, "EACCES"},
		{"git-rmdir", `os.rmdir(".git")`, false, ""},
		{"git-replace-by-file", `os.replace("some-file", ".git")`, false, ""},
		{"git-nested-config", `write("sub/.git/config", ` + fsmon + `)`, false, "EACCES"},
		{"git-nested-rename", `os.rename("sub/.git", "sub/old")`, false, "EACCES"},
		{"claude-settings", `(os.makedirs(".claude", exist_ok=True), write(".claude/settings.json", b'{"hooks": {}}'))`, false, "EACCES"},
		{"claude-commands", `os.makedirs(".claude/commands")`, false, "EACCES"},
		{"claude-rename", `os.rename(".claude", "x")`, false, "EACCES"},
		{"vscode-tasks", `write(".vscode/tasks.json", b"{}")`, false, "EACCES"},
		{"vscode-existing", `write(".vscode/settings.json", b"{}")`, false, "EACCES"},
		{"idea", `os.makedirs(".idea/x")`, false, "EACCES"},
		{"git-deep", `os.makedirs("a/b/c/d/e/f/g/.git/hooks")`, false, "EACCES"},
		{"vscode-deep", `os.makedirs("a/b/c/d/e/f/g/h/.vscode")`, false, "EACCES"},
		{"mcp-json", `write(".mcp.json", b'{"mcpServers": {"evil": {"command": "touch"}}}')`, false, "EACCES"},
		{"gitmodules", `write(".gitmodules", b"x")`, false, "EACCES"},
		{"gitconfig", `write(".gitconfig", b"x")`, false, "EACCES"},
		{"ripgreprc", `write(".ripgreprc", b"--pre=evil")`, false, "EACCES"},
		// Controls: ordinary files are writable.
		{"ordinary", `write("some-file", b"x")`, true, ""},
		{"ordinary-sub", `write("sub/file.txt", b"x")`, true, ""},
	})
	for _, dir := range []string{ws, sub} {
		if out, err := runGit(dir, "status"); err != nil {
			t.Errorf("git status in %s: %v\n%s", dir, err, out)
		}
	}
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("host git ran a command planted from inside the sandbox")
	}
}

// TestAttackSymlinkedMetadata: a link at a protected name cannot be
// protected, so the sandbox refuses to start rather than run unprotected.
func TestAttackSymlinkedMetadata(t *testing.T) {
	t.Parallel()
	for _, name := range []string{".git", ".claude", ".mcp.json", ".env"} {
		t.Run(name, func(t *testing.T) {
			ws := t.TempDir()
			if err := os.Mkdir(filepath.Join(ws, "evil"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("evil", filepath.Join(ws, name)); err != nil {
				t.Fatal(err)
			}
			x := newSbx(t, nil, &Options{Workspace: ws})
			p, err := x.Start(context.Background(), &kernel.Spec{Path: python, Args: []string{"-c", "pass"}, Dir: ws, RunDir: x.run})
			if p != nil {
				p.Kill(context.Background())
				p.Wait(context.Background())
			}
			if err == nil || !strings.Contains(err.Error(), "is a symbolic link") || !strings.Contains(err.Error(), name) {
				t.Fatalf("Start = %v, want an error naming the link %s", err, name)
			}
		})
	}
}

// TestAttackSecretReads: the secrets of the workspace cannot be read from
// inside, however they are reached.
func TestAttackSecretReads(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	secret := "SECRET-" + randHex(8)
	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, ".env"), "API_KEY="+secret+"\n")
	writeFile(t, filepath.Join(ws, ".env.production"), "DB="+secret+"\n")
	writeFile(t, filepath.Join(ws, "app", ".env"), "NESTED="+secret+"\n")
	writeFile(t, filepath.Join(ws, ".ipybox", "servers.json"), `{"s": {"url": "https://x/?k=${API_KEY}"}}`)
	writeFile(t, filepath.Join(ws, "creds", "service.json"), `{"key": "`+secret+`"}`)
	// A hard link made beforehand (say, by kernel code of an earlier
	// session, before the file held secrets).
	if err := os.Link(filepath.Join(ws, ".env"), filepath.Join(ws, "innocent.txt")); err != nil {
		t.Fatal(err)
	}
	x := newSbx(t, nil, &Options{Workspace: ws, Secrets: func() []string {
		return []string{filepath.Join(ws, "creds", "service.json")}
	}})
	x.attempts(t, `
os.symlink(".env", "link-to-env")
os.symlink(os.getcwd() + "/.env.production", "abs-link")
`, []check{
		{"env", `read(".env")`, false, "EACCES"},
		{"env-production", `read(".env.production")`, false, "EACCES"},
		{"env-nested", `read("app/.env")`, false, "EACCES"},
		{"env-symlink", `read("link-to-env")`, false, "EACCES"},
		{"env-abs-symlink", `read("abs-link")`, false, "EACCES"},
		{"env-proc-root", `read("/proc/self/root" + os.getcwd() + "/.env")`, false, "EACCES"},
		{"env-proc-cwd", `read("/proc/self/cwd/.env")`, false, "EACCES"},
		{"env-hardlink-before", `read("innocent.txt")`, false, "EACCES"},
		{"env-hardlink-now", `os.link(".env", "new-link")`, false, ""},
		{"env-copy", `__import__("shutil").copy(".env", "copy")`, false, ""},
		{"servers-json", `read(".ipybox/servers.json")`, false, "ENOENT"},
		{"ipybox-list", `os.listdir(".ipybox")`, true, "[]"},
		{"named-secret", `read("creds/service.json")`, false, "EACCES"},
		{"env-unmount", `run("umount", ".env")`, false, ""},
		// The names stay listable; their content does not leak.
		{"list", `sorted(f for f in os.listdir(".") if f.startswith(".env"))`, true, "'.env', '.env.production'"},
	})
	// The host still reads them.
	if b, err := os.ReadFile(filepath.Join(ws, ".env")); err != nil || !strings.Contains(string(b), secret) {
		t.Errorf("the host cannot read .env: %q %v", b, err)
	}
}

// TestAttackHomeDotfiles: in the host root mode, the home's dot files
// (credentials) are masked; the rest of the home stays visible.
func TestAttackHomeDotfiles(t *testing.T) {
	needSandbox(t)
	home := worldReadableDir(t)
	t.Setenv("HOME", home)
	writeFile(t, filepath.Join(home, ".ssh", "id_ed25519"), "PRIVATE KEY")
	writeFile(t, filepath.Join(home, ".netrc"), "machine x password y")
	writeFile(t, filepath.Join(home, ".config", "gh", "hosts.yml"), "oauth_token: z")
	writeFile(t, filepath.Join(home, "notes.txt"), "public")
	for _, p := range []string{home, filepath.Join(home, ".ssh"), filepath.Join(home, ".config"), filepath.Join(home, ".config", "gh")} {
		os.Chmod(p, 0o755)
	}
	for _, p := range []string{".ssh/id_ed25519", ".netrc", ".config/gh/hosts.yml", "notes.txt"} {
		os.Chmod(filepath.Join(home, p), 0o644)
	}
	cfg := DefaultConfig()
	cfg.RootMode = RootHost
	x := newSbx(t, cfg, nil)
	x.attempts(t, "", []check{
		{"ssh-key", fmt.Sprintf("read(%q)", filepath.Join(home, ".ssh", "id_ed25519")), false, ""},
		{"ssh-list", fmt.Sprintf("os.listdir(%q)", filepath.Join(home, ".ssh")), false, "EACCES"},
		{"netrc", fmt.Sprintf("read(%q)", filepath.Join(home, ".netrc")), false, "EACCES"},
		{"gh-token", fmt.Sprintf("read(%q)", filepath.Join(home, ".config", "gh", "hosts.yml")), false, ""},
		{"notes", fmt.Sprintf("read(%q)", filepath.Join(home, "notes.txt")), true, "public"},
	})
}

// TestLimits: a fork bomb and a large allocation end as errors inside; the
// host and another sandbox keep working.
func TestLimits(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Limits = Limits{Memory: 1 << 30, Pids: 64}
	x := newSbx(t, cfg, nil)
	other := newSbx(t, nil, nil)
	out := x.py(t, attemptPrelude+`
import resource
attempt("alloc-3g", lambda: len(bytearray(3 << 30)))
attempt("alloc-small", lambda: len(bytearray(100 << 20)))
print("limits", resource.getrlimit(resource.RLIMIT_DATA), resource.getrlimit(resource.RLIMIT_NPROC), flush=True)
kids = []
def bomb():
    while True:
        pid = os.fork()
        if pid == 0:
            import time; time.sleep(30); os._exit(0)
        kids.append(pid)
attempt("fork-bomb", bomb)
print("forked", len(kids), flush=True)
import signal
for k in kids:
    os.kill(k, signal.SIGKILL)
for k in kids:
    os.waitpid(k, 0)
attempt("raise-limit", lambda: resource.setrlimit(resource.RLIMIT_NPROC, (1000, 1000)))
`)
	for _, want := range []string{"alloc-3g DENIED MemoryError", "alloc-small ALLOWED", "fork-bomb DENIED BlockingIOError EAGAIN",
		fmt.Sprintf("limits (%d, %d) (64, 64)", 1<<30, 1<<30), "raise-limit DENIED ValueError"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
	var n int
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "forked" {
			n, _ = strconv.Atoi(f[1])
		}
	}
	if n < 10 || n > 64 {
		t.Errorf("the bomb forked %d processes; want it stopped below 64", n)
	}
	// Meanwhile, and after, other work goes on.
	if got := other.py(t, "import os; print(os.fork() and 'parent' or os._exit(0))"); !strings.Contains(got, "parent") {
		t.Errorf("another sandbox cannot fork: %q", got)
	}
	if err := exec.Command("true").Run(); err != nil {
		t.Errorf("the host cannot start a process: %v", err)
	}
}

// TestLimitsConfig: limits are parsed, defaulted and validated.
func TestLimitsConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		json       string
		mem        int64
		pids       int
		wantErr    string
		wantString string
	}{
		{`{}`, DefaultMemory, DefaultPids, "", "memory 2GiB per process"},
		{`{"limits": {"memory": "512m", "pids": 100}}`, 512 << 20, 100, "", "memory 512MiB"},
		{`{"limits": {"memory": 1073741824}}`, 1 << 30, DefaultPids, "", "1GiB"},
		{`{"limits": {"memory": "unlimited", "pids": -1}}`, 0, 0, "", "memory unlimited per process (RLIMIT_DATA), unlimited processes"},
		{`{"limits": {"memory": "1m"}}`, 0, 0, "too small for Python", ""},
		{`{"limits": {"pids": 3}}`, 0, 0, "too small for a kernel", ""},
		{`{"limits": {"memory": "lots"}}`, 0, 0, `size "lots"`, ""},
		{`{"limits": {"cpu": 1}}`, 0, 0, "unknown field", ""},
	}
	for _, tt := range tests {
		c, err := ParseConfig([]byte(tt.json))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: error %v, want %q", tt.json, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.json, err)
			continue
		}
		if c.Limits.memory() != tt.mem || c.Limits.pids() != tt.pids || !strings.Contains(c.Limits.String(), tt.wantString) {
			t.Errorf("%s: memory %d pids %d (%s); want %d %d %q", tt.json, c.Limits.memory(), c.Limits.pids(), c.Limits, tt.mem, tt.pids, tt.wantString)
		}
	}
	for in, want := range map[string]int64{"2g": 2 << 30, "2GiB": 2 << 30, "1.5G": 3 << 29, "512MB": 512 << 20, "4096": 4096, "64k": 64 << 10} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}

// TestAttackProxyIPForms: with every public name allowed (ipybox mcp's
// default network), IP literals in any spelling, numeric names and names
// that resolve to loopback or private addresses are refused with 403, not
// tried (a 502 would mean the guard let them through to a dial).
func TestAttackProxyIPForms(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	if err := cfg.AllowDomains(AnyPublicDomain); err != nil {
		t.Fatal(err)
	}
	x := newSbx(t, cfg, &Options{proxy: &egress.Options{
		Resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
			switch host {
			case "loopback.test":
				return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}, nil
			case "metadata.test":
				return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
			case "mapped.test":
				return []netip.Addr{netip.MustParseAddr("::ffff:10.0.0.1"), netip.MustParseAddr("::127.0.0.1")}, nil
			}
			return nil, fmt.Errorf("no such host %s", host)
		},
	}})
	var checks []check
	for i, host := range []string{
		"[::127.0.0.1]", "[::7f00:1]", "[::ffff:127.0.0.1]", "[::ffff:0:7f00:1]", "[64:ff9b::7f00:1]", "[2002:7f00:1::1]",
		"[::]", "[::1]", "0.0.0.0", "127.0.0.1", "2130706433", "0x7f.1", "127.1", "017700000001", "127.0.0.1.",
		"loopback.test", "metadata.test", "mapped.test", "LOOPBACK.test.",
	} {
		checks = append(checks,
			check{fmt.Sprintf("connect-%d", i), fmt.Sprintf("raw_connect(%q)", host), false, "403"},
			check{fmt.Sprintf("get-%d", i), fmt.Sprintf("raw_get(%q)", host), false, "403"})
	}
	x.attempts(t, `
def _ask(req):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(req.encode())
    data = s.recv(4096).decode(errors="replace")
    s.close()
    status = data.split(" ", 2)[1] if data.startswith("HTTP/") else "?"
    if status != "200":
        raise OSError(0, status + " " + data.splitlines()[0])
    return data
def raw_connect(host):
    return _ask("CONNECT %s:80 HTTP/1.1\r\nHost: %s:80\r\n\r\n" % (host, host))
def raw_get(host):
    return _ask("GET http://%s:80/ HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n" % host)
`, checks)
}

// TestAttackSetuidPlant: kernel code in the sandbox tries every way to
// leave a setuid or setgid file in the workspace (with ipybox as root,
// the file would be root's on the host). Each is refused; the workspace
// and every other host path the sandbox writes are mounted nosuid and
// nodev inside as well; and the file kernel code planted runs on the host,
// as another user, as that user.
func TestAttackSetuidPlant(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	extra := t.TempDir()
	cfg := DefaultConfig()
	cfg.Filesystem.AllowWrite = []string{extra}
	x := newSbx(t, cfg, &Options{Workspace: ws})
	x.attempts(t, `
import shutil, stat, tarfile, io
shutil.copy("/usr/bin/id", "planted")
def tar_extract():
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w") as tf:
        i = tarfile.TarInfo("from-tar"); i.mode = 0o4755; i.size = 3; tf.addfile(i, io.BytesIO(b"abc"))
    open("t.tar", "wb").write(b.getvalue())
    run("tar", "-xpf", "t.tar")
    if os.stat("from-tar").st_mode & 0o6000:
        return "setuid kept"
    raise OSError(errno.EPERM, "no setuid bit")
mounts = read("/proc/self/mountinfo").decode()
def mount_opts(path):
    for line in mounts.splitlines():
        f = line.split()
        if f[4] == path:
            return f[5]
    raise OSError(errno.ENOENT, path)
`, []check{
		{"chmod", `os.chmod("planted", 0o4755)`, false, "EPERM"},
		{"chmod-setgid", `os.chmod("planted", 0o2755)`, false, "EPERM"},
		{"fchmod", `os.fchmod(os.open("planted", os.O_RDONLY), 0o4755)`, false, "EPERM"},
		{"open-mode", `os.close(os.open("new", os.O_CREAT | os.O_WRONLY, 0o6755))`, false, "EPERM"},
		{"mknod", `os.mknod("node", stat.S_IFREG | 0o4755)`, false, "EPERM"},
		{"shell", `run("sh", "-c", "chmod u+s planted")`, false, ""},
		{"install", `run("install", "-m", "4755", "planted", "installed")`, false, ""},
		{"tar", `tar_extract()`, false, "Operation not permitted"},
		{"fchmodat2", `libc.syscall(ctypes.c_long(452), ctypes.c_long(-100), ctypes.c_char_p(b"planted"), ctypes.c_long(0o4755), ctypes.c_long(0)) == 0 or 1/0`, false, "ZeroDivisionError"},
		{"io-uring", `sys_call(425, 8, ctypes.addressof(ctypes.create_string_buffer(120)))`, false, "EPERM"},
		{"ws-nosuid", `"nosuid" in mount_opts(os.getcwd()) and "nodev" in mount_opts(os.getcwd()) or 1/0`, true, ""},
		{"extra-nosuid", fmt.Sprintf(`"nosuid" in mount_opts(%q) and "nodev" in mount_opts(%q) or 1/0`, extra, extra), true, ""},
		{"chmod-plain", `os.chmod("planted", 0o755)`, true, ""},
	})
	if bad := setugidBelow(t, ws); len(bad) > 0 {
		t.Fatalf("setuid or setgid files on the host: %v", bad)
	}
	if os.Geteuid() != 0 {
		return
	}
	os.Chmod(ws, 0o755)
	os.Chmod(filepath.Dir(ws), 0o755)
	cmd := exec.Command(filepath.Join(ws, "planted"), "-u")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("run the planted file as nobody: %v", err)
	}
	if got := strings.TrimSpace(string(out)); got != "65534" {
		t.Fatalf("the planted file ran as uid %s for nobody", got)
	}
}

// setugidBelow lists the files below dir with a setuid or setgid bit.
func setugidBelow(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			out = append(out, p)
		}
		return nil
	})
	return out
}
