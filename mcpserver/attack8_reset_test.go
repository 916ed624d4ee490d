package mcpserver

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// attack8Server is a sandboxed server with a warm pool of one and the
// sandbox fork server (ipybox mcp's defaults), in a workspace of its own.
func attack8Server(t *testing.T, zygote bool) (*Server, string) {
	t.Helper()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	srv := newServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox(), Sessions: SessionOptions{Pool: 1, PoolMax: 1, SandboxZygote: zygote}})
	return srv, ws
}

// attack8PkgRoot is Python that sets root to the kernel's package folder
// (PYTHONUSERBASE).
const attack8PkgRoot = `import os, sys, pathlib, threading, time
root = pathlib.Path(os.environ["PYTHONUSERBASE"])
`

// TestAttack8ResetMergeFIFOHang: kernel code races the host's move of its
// package folder at a swap-reset (adopt → merge). merge decides from the
// parent's ReadDir that "lib" is a folder (the new kernel has one too) and
// then os.ReadDir's it by path, which opens it without O_DIRECTORY and
// following links. The old kernel, still alive during adopt (it is closed
// only after), swaps "lib" for a FIFO once the move has begun (many files
// sorted before "lib" give it time): the host's open blocks until a writer
// comes, the reset never returns, and the session's startMu stays held.
// The kernel releases the FIFO after 45 s, so that the test ends.
func TestAttack8ResetMergeFIFOHang(t *testing.T) {
	t.Parallel()
	srv, ws := attack8Server(t, true)
	cs := connectHTTP(t, serveHTTP(t, srv), nil)
	got := run(t, cs, attack8PkgRoot+`
sp = [p for p in sys.path if p.startswith(str(root)) and p.endswith("site-packages")]
print(sorted(os.listdir(root)), sp)
for i in range(40000):
    (root / ("a%05d" % i)).write_text("x")
log = open("attack8-fifo.log", "w", buffering=1)
def race():
    while (root / "a00000").exists():
        time.sleep(0.0005)
    os.rename(root / "lib", root / "lib_real")
    os.mkfifo(root / "lib")
    log.write("swapped %f\n" % time.time())
    time.sleep(45)
    try:
        fd = os.open(root / "lib", os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        log.write("released a blocked reader %f\n" % time.time())
    except OSError as e:
        log.write("no reader: %r %f\n" % (e, time.time()))
threading.Thread(target=race, daemon=True).start()
print("armed")`)
	t.Logf("kernel: %s", got)
	if !strings.Contains(got, "armed") {
		t.Fatalf("setup: %q", got)
	}
	testenv.WaitFor(t, 60*time.Second, "the pool to fill", func() bool { return srv.factory.warm.Ready() == 1 })
	done := make(chan string, 1)
	start := time.Now()
	go func() {
		res := call(t, cs, "reset", map[string]any{})
		done <- text(res)
	}()
	select {
	case r := <-done:
		t.Logf("reset returned after %v: %q", time.Since(start), r)
	case <-time.After(20 * time.Second):
		logb, _ := os.ReadFile(filepath.Join(ws, "attack8-fifo.log"))
		t.Errorf("BROKEN: reset did not return within 20 s (kernel log: %q): the host's merge opened a FIFO that kernel code put in the session's package folder", logb)
		r := <-done
		t.Logf("reset returned after %v, once the kernel released the FIFO: %q", time.Since(start), r)
	}
	logb, _ := os.ReadFile(filepath.Join(ws, "attack8-fifo.log"))
	t.Logf("kernel log: %s", logb)
}

// TestAttack8OldKernelAfterSwap: the kernel replaced at a swap-reset is
// closed in the background. Before the reset, its code starts a thread
// that, every 20 ms, logs the time and the answer of a tool call with its
// token, creates a file in its package folder (racing the host's
// RemoveAll of that folder), and writes through a directory descriptor
// it holds to a package folder that the host moves into the new kernel's.
// Held: the old kernel stops within seconds of the reset, its token stops
// working, its old package folder does not survive, and after the server
// closes no kernel process, run folder, package or snapshot folder of the
// session remains.
func TestAttack8OldKernelAfterSwap(t *testing.T) {
	srv, ws := attack8Server(t, true)
	cs := connectHTTP(t, serveHTTP(t, srv), nil)
	got := run(t, cs, attack8PkgRoot+`
import ipybox_runtime
sp = [p for p in sys.path if p.startswith(str(root)) and p.endswith("site-packages")][0]
ev = pathlib.Path(sp, "evilpkg"); ev.mkdir()
(ev / "__init__.py").write_text("")
dfd = os.open(ev, os.O_RDONLY | os.O_DIRECTORY)
log = open("attack8-alive.log", "w", buffering=1)
def loop():
    n = 0
    while n < 1500:
        n += 1
        try:
            ipybox_runtime.run_tool("nosuchserver", "t", {}, timeout=2)
            r = "ok"
        except Exception as e:
            r = type(e).__name__ + ":" + str(e)[:80].replace("\n", " ")
        try:
            (root / ("z%06d" % n)).write_text("x")
            w = "pkg-ok"
        except OSError as e:
            w = "pkg-" + type(e).__name__
        try:
            fd = os.open("late_%d.py" % n, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=dfd)
            os.write(fd, b"V=1\n"); os.close(fd)
            w += " late-ok"
        except OSError as e:
            w += " late-" + type(e).__name__
        log.write("%f %s | %s\n" % (time.time(), w, r))
        time.sleep(0.02)
threading.Thread(target=loop, daemon=True).start()
time.sleep(0.3)
print(root.name, [a for a in sys.argv if a.endswith(".json")])`)
	t.Logf("old kernel: %s", got)
	oldPkg := strings.Fields(got)[0]
	testenv.WaitFor(t, 60*time.Second, "the pool to fill", func() bool { return srv.factory.warm.Ready() == 1 })
	res := call(t, cs, "reset", map[string]any{})
	resetAt := time.Now()
	if res.IsError || !strings.Contains(text(res), "started in advance") {
		t.Fatalf("reset: %q, want a swap", text(res))
	}
	time.Sleep(5 * time.Second)
	after := run(t, cs, `import os, sys, pathlib
root = pathlib.Path(os.environ["PYTHONUSERBASE"])
sp = [p for p in sys.path if p.startswith(str(root)) and p.endswith("site-packages")][0]
ev = pathlib.Path(sp, "evilpkg")
print(root.name, len(list(ev.glob("late_*.py"))) if ev.exists() else -1, len(list(root.glob("z*"))))`)
	t.Logf("new kernel (its package folder, late files, z files): %s", after)
	logb, _ := os.ReadFile(filepath.Join(ws, "attack8-alive.log"))
	lines := strings.Split(strings.TrimSpace(string(logb)), "\n")
	var lastAt float64
	var afterReset []string
	for _, l := range lines {
		var ts float64
		if _, err := fmtSscan(l, &ts); err != nil {
			continue
		}
		lastAt = ts
		if ts > float64(resetAt.UnixNano())/1e9 {
			afterReset = append(afterReset, l)
		}
	}
	lived := time.Duration((lastAt - float64(resetAt.UnixNano())/1e9) * float64(time.Second))
	t.Logf("old kernel's last line %v after the reset returned; %d lines after it; first after: %q; last: %q", lived, len(afterReset), first(afterReset), lines[len(lines)-1])
	if lived > 3*time.Second {
		t.Errorf("BROKEN: the replaced kernel ran code %v after the reset returned", lived)
	}
	for _, l := range afterReset {
		if strings.Contains(l, "nosuchserver") && !strings.Contains(l, "401") && !strings.Contains(strings.ToLower(l), "connect") && !strings.Contains(strings.ToLower(l), "refused") {
			t.Logf("tool server answered the replaced kernel after the reset: %q", l)
		}
	}
	if err := srv.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	for _, kind := range []string{"packages", "snapshots"} {
		ents, _ := os.ReadDir(filepath.Join(ws, ".ipybox", kind))
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Logf("after Close, .ipybox/%s: %v", kind, names)
		for _, n := range names {
			if n == oldPkg {
				t.Errorf("BROKEN: the replaced kernel's package folder %s survived the server", n)
			}
		}
	}
	if k := kernels(t, os.Getpid()); len(k) > 0 {
		t.Errorf("kernel processes after Close: %v", k)
	}
}

func fmtSscan(s string, ts *float64) (int, error) { return fmt.Sscan(strings.Fields(s + " x")[0], ts) }

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// attack8Orphan is Python that leaves a detached grandchild (setsid, every
// inherited descriptor closed) which, every 200 ms for 90 s, logs the time
// and the kernel connection files it can see, to log in the workspace.
const attack8Orphan = `import os, time, glob
log = os.path.abspath(%q)
pid = os.fork()
if pid == 0:
    try:
        os.setsid()
        if os.fork() == 0:
            os.closerange(3, 4096)
            end = time.time() + 90
            while time.time() < end:
                seen = sorted(glob.glob("/tmp/ipybox-*/kernel/kernel.json") + glob.glob("/run/user/*/ipybox/*/kernel/kernel.json"))
                with open(log, "a") as f:
                    f.write("%%f %%s\n" %% (time.time(), ",".join(seen)))
                time.sleep(0.2)
    finally:
        os._exit(0)
os.waitpid(pid, 0)
time.sleep(0.5)
print(open(log).read().splitlines()[-1])`

// attack8LastLine returns the time and the rest of the last line of a log
// of attack8Orphan.
func attack8LastLine(t *testing.T, path string) (time.Time, string) {
	t.Helper()
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	l := lines[len(lines)-1]
	var ts float64
	fmtSscan(l, &ts)
	rest := ""
	if f := strings.Fields(l); len(f) > 1 {
		rest = f[1]
	}
	return time.Unix(0, int64(ts*1e9)), rest
}

// TestAttack8OrphanOutlivesReset: kernel code leaves a detached process
// in its sandbox, then the session resets: by a swap (a kernel ready in
// the pool) and in place (no pool), with forked kernels and cold ones.
// Held when the orphan ends with the reset (or at the latest with the
// server), and sees no connection file but its own kernel's.
func TestAttack8OrphanOutlivesReset(t *testing.T) {
	for _, c := range []struct {
		name   string
		zygote bool
		pool   int
	}{{"fork-swap", true, 1}, {"fork-inplace", true, 0}, {"cold-swap", false, 1}, {"cold-inplace", false, 0}} {
		t.Run(c.name, func(t *testing.T) {
			testenv.NeedsPython(t)
			testenv.NeedsTool(t, "bwrap")
			ws := t.TempDir()
			srv := newServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox(), Sessions: SessionOptions{Pool: c.pool, PoolMax: c.pool, SandboxZygote: c.zygote}})
			cs := connectHTTP(t, serveHTTP(t, srv), nil)
			got := run(t, cs, fmt.Sprintf(attack8Orphan, "attack8-orphan.log"))
			t.Logf("orphan's first view: %s", got)
			if c.pool > 0 {
				testenv.WaitFor(t, 60*time.Second, "the pool to fill", func() bool { return srv.factory.warm.Ready() == 1 })
			}
			res := call(t, cs, "reset", map[string]any{})
			resetAt := time.Now()
			t.Logf("reset: %s", text(res))
			after := run(t, cs, "import sys\nprint([a for a in sys.argv if a.endswith('.json')])")
			t.Logf("new kernel's connection file: %s", after)
			time.Sleep(3 * time.Second)
			last, seen := attack8LastLine(t, filepath.Join(ws, "attack8-orphan.log"))
			if d := last.Sub(resetAt); d > time.Second {
				t.Errorf("the orphan of the reset kernel ran on %v after the reset (it sees connection files %s)", d.Round(time.Millisecond), seen)
			}
			if err := srv.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			closedAt := time.Now()
			time.Sleep(2 * time.Second)
			last, _ = attack8LastLine(t, filepath.Join(ws, "attack8-orphan.log"))
			if d := last.Sub(closedAt); d > 500*time.Millisecond {
				t.Errorf("BROKEN: the orphan still runs %v after the server closed", d.Round(time.Millisecond))
			}
		})
	}
}
