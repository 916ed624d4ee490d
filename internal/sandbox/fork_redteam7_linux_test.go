package sandbox

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/testenv"
)

// probeProcess prints, one "key value" a line, what confines the process
// that runs it and what it holds: its /proc status, limits, cgroup,
// mounts, prctl state, signal dispositions, descriptors, mappings and
// interpreter. Values that differ between any two processes (pids, inode
// numbers, addresses) are left out or normalised.
const probeProcess = `
import os, sys, ctypes, re, signal
libc = ctypes.CDLL(None, use_errno=True)
arm = os.uname().machine == "aarch64"
def out(k, v):
    print(k, repr(v), flush=True)
skip = ("Name", "Pid", "PPid", "Tgid", "Ngid", "TracerPid", "NSpid", "NStgid", "NSpgid", "NSsid", "VmPeak", "VmSize", "VmLck", "VmPin", "VmHWM", "VmRSS", "RssAnon", "RssFile", "RssShmem", "VmData", "VmStk", "VmExe", "VmLib", "VmPTE", "VmSwap", "HugetlbPages", "Threads", "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches", "SigQ", "State", "FDSize", "Kthread")
for l in open("/proc/self/status"):
    k, _, v = l.partition(":")
    if k not in skip:
        out("status." + k, v.strip())
    if k == "NSpid":
        out("status.NSpid.depth", len(v.split()))
for l in open("/proc/self/limits").read().splitlines()[1:]:
    out("limit." + l[:26].strip(), l[26:].split())
out("cgroup", open("/proc/self/cgroup").read())
mnts = []
for l in open("/proc/self/mountinfo"):
    f = l.split()
    sep = f.index("-")
    mnts.append((f[4], f[5], f[sep + 1], f[sep + 3] if sep + 3 < len(f) else "", " ".join(x for x in f[6:sep] if not x.startswith(("shared:", "master:")))))
out("mounts", sorted(mnts))
for name, nr in [("securebits", 27), ("pdeathsig", 2), ("dumpable", 3), ("keepcaps", 7), ("subreaper", 37), ("thp_disable", 42), ("no_new_privs", 39), ("timing", 13), ("mce_kill", 34)]:
    if nr in (2, 37):
        v = ctypes.c_int(0)
        r = libc.prctl(nr, ctypes.byref(v), 0, 0, 0)
        out("prctl." + name, (r, v.value))
    elif nr == 34:
        out("prctl." + name, libc.prctl(nr, 0, 0, 0, 0))
    else:
        out("prctl." + name, libc.prctl(nr, 0, 0, 0, 0))
for name, which in [("spec_store_bypass", 0), ("spec_indirect_branch", 1), ("spec_l1d_flush", 2)]:
    out("prctl." + name, libc.prctl(52, which, 0, 0, 0))
out("mdwe", libc.prctl(66, 0, 0, 0, 0))
r = libc.syscall(ctypes.c_long(219 if arm else 250), ctypes.c_long(0), ctypes.c_long(-3), ctypes.c_long(0))  # keyctl: the session keyring
out("keyctl.session", (r, ctypes.get_errno()) if r < 0 else "allowed")
for f in ("oom_score_adj", "personality", "timerslack_ns", "loginuid", "sessionid", "attr/current", "coredump_filter", "autogroup"):
    try:
        v = open("/proc/self/" + f).read().strip()
        if f == "autogroup":
            v = re.sub(r"-\d+", "-N", v)
        out("proc." + f, v)
    except OSError as e:
        out("proc." + f, "error %d" % e.errno)
st = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
out("stat.pgrp_is_self", int(st[2]) == os.getpid())
out("stat.session_is_self", int(st[3]) == os.getpid())
out("stat.tty_nr", st[4])
out("stat.nice", st[16])
out("stat.rt_priority", st[37])
out("stat.policy", st[38])
out("stat.exit_signal", st[35])
out("sched", (os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0)))
out("ioprio", libc.syscall(ctypes.c_long(31 if arm else 252), 1, 0))
out("affinity", sorted(os.sched_getaffinity(0)))
out("umask", os.umask(0o22))
sigs = {}
for s in range(1, signal.NSIG):
    try:
        h = signal.getsignal(s)
    except (ValueError, OSError):
        continue
    sigs[s] = "default" if h == signal.SIG_DFL else "ignore" if h == signal.SIG_IGN else "python" if callable(h) else repr(h)
out("signals.python", sigs)
out("signals.blocked", sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])))
out("signals.wakeup_fd", signal.set_wakeup_fd(-1))
fds = []
for fd in sorted(os.listdir("/proc/self/fd"), key=int):
    try:
        l = os.readlink("/proc/self/fd/" + fd)
    except OSError:
        continue
    fds.append((int(fd), re.sub(r"\[\d+\]", "[N]", l)))
out("fds", [f for f in fds if not f[1].startswith("/proc/self/fd")])
shared, hidden = [], set()
for l in open("/proc/self/maps"):
    f = l.split(None, 5)
    path = f[5].strip() if len(f) > 5 else ""
    if f[1][3] == "s":
        shared.append((f[1], path))
    if path.startswith("/"):
        try:
            st = os.stat(path)
            dev, ino = f[3], int(f[4])
            if st.st_ino != ino:
                hidden.add(path)
        except OSError:
            hidden.add(path)
out("maps.shared", shared)
out("maps.not_in_view", sorted(hidden))
out("environ.keys", sorted(k.split(b"=")[0].decode() for k in open("/proc/self/environ", "rb").read().split(b"\0") if k))
out("cmdline", open("/proc/self/cmdline", "rb").read().split(b"\0")[:2])
out("sys.flags", tuple(sys.flags))
out("sys.path", sys.path)
out("sys.executable", sys.executable)
out("sys.argv", sys.argv)
mods = set(sys.modules)
out("modules.count>200", len(mods) > 200)
import gc
gc.unfreeze()  # the fork server freezes what it built (cowfreeze.py); kernel code can thaw it, and get_objects then lists it
held = [(k, sorted(o[k])) for o in gc.get_objects() if isinstance(o, dict) for k in ("_reports", "_kids", "_pipes", "_early") if isinstance(o.get(k), (set, dict)) and o[k]]
out("gc.fork_server_bookkeeping", held)
out("hashseed.env", os.environ.get("PYTHONHASHSEED"))
import socket, errno as _errno
def access(name, f):
    try:
        f()
        out("access." + name, "allowed")
    except OSError as e:
        out("access." + name, _errno.errorcode.get(e.errno, e.errno))
def sock(path):
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.close()
access("write-workspace", lambda: open("probe-file", "w").write("x"))
access("chmod-setuid", lambda: os.chmod("probe-file", 0o4755))
access("write-tmp", lambda: open("/tmp/probe", "w").write("x"))
access("write-dev-shm", lambda: open("/dev/shm/probe", "w").write("x"))
access("write-usr", lambda: open("/usr/probe", "w").write("x"))
access("read-etc-passwd", lambda: open("/etc/passwd").read())
access("read-shadow", lambda: open("/etc/shadow").read())
access("write-ipybox-dir", lambda: open(".ipybox/probe", "w").write("x"))
access("socket-workspace", lambda: sock("probe.sock"))
access("socket-tmp", lambda: sock("/tmp/probe.sock"))
access("socket-abstract", lambda: sock("\0ipybox-probe"))
access("mkfifo-workspace", lambda: os.mkfifo("probe.fifo"))
access("mknod-dev", lambda: os.mknod("/tmp/probe.dev", 0o600 | 0o20000, os.makedev(1, 3)))
access("symlink-workspace", lambda: os.symlink("/etc/passwd", "probe.link"))
access("hardlink-out", lambda: os.link("/etc/passwd", "/tmp/probe.hard"))
access("unshare-user", lambda: (_ for _ in ()).throw(OSError(ctypes.get_errno(), "")) if libc.unshare(0x10000000) != 0 else None)
access("io_uring", lambda: (_ for _ in ()).throw(OSError(ctypes.get_errno(), "")) if libc.syscall(ctypes.c_long(425), ctypes.c_long(1), ctypes.create_string_buffer(120)) < 0 else None)
access("tcp-connect", lambda: socket.create_connection(("1.1.1.1", 443), timeout=2))
for f in ("probe-file", "probe.sock", "probe.fifo", "probe.link"):
    try:
        os.unlink(f)
    except OSError:
        pass
out("cwd", os.getcwd())
out("euid", (os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getgroups()))
`

// forkDifferences are the differences between a cold-started and a
// forked sandboxed process that docs/sandbox.md ("Forked kernels") names,
// and why each is no protection lost.
var forkDifferences = map[string]string{
	"sys.flags":              "the fork server's -s (no user site); the kernel's init adds the session's package folder",
	"sys.path":               "python -c code: the working directory is not first (the fork server's nocwd.py)",
	"modules.count>200":      "the fork server's imports",
	"environ.keys":           "/proc/self/environ is the fork server's basic environment; os.environ is the session's",
	"stat.session_is_self":   "the forked kernel starts a session of its own (no controlling terminal either way)",
	"status.Seccomp_filters": "the fork server's own filter (the one of unsandboxed kernels) stays under the sandbox's: stricter, never looser",
}

// TestAttackForkedLikeCold compares what confines a cold-started and a
// forked sandboxed process, from inside each: any difference is a
// protection the fork path gives up, or something the fork server left
// in the kernel (its globals, signal dispositions, mappings).
func TestAttackForkedLikeCold(t *testing.T) {
	needSandbox(t)
	cold := newSbx(t, nil, &Options{Zygote: noFork{}})
	forked := newForkSbx(t, nil, &Options{Workspace: cold.ws})
	// A sibling, forked from the same fork server and alive throughout:
	// what the fork server knows of it must not reach the probe.
	sib := newLineWatcher("ready")
	newForkSbx(t, nil, nil).start(t, sib, nil, python, "-c", "import time; print('ready', flush=True); time.sleep(120)")
	sib.wait(t)
	probe := func(x *sbx) map[string]string {
		m := map[string]string{}
		for _, l := range strings.Split(x.py(t, probeProcess), "\n") {
			if k, v, ok := strings.Cut(l, " "); ok {
				m[k] = v
			}
		}
		return m
	}
	c, f := probe(cold), probe(forked)
	if len(c) < 50 {
		t.Fatalf("the probe printed %d values", len(c))
	}
	// The probe's control: what a sandbox allows and refuses, cold.
	for k, want := range map[string]string{"access.write-workspace": "'allowed'", "access.read-shadow": "'EACCES'", "access.write-usr": "'EROFS'", "access.tcp-connect": "'ENETUNREACH'"} {
		if c[k] != want {
			t.Errorf("cold %s: %s, want %s", k, c[k], want)
		}
	}
	// Each sandbox has a run directory of its own.
	c["mounts"] = strings.ReplaceAll(c["mounts"], cold.run, "RUN")
	f["mounts"] = strings.ReplaceAll(f["mounts"], forked.run, "RUN")
	for k, cv := range c {
		fv := f[k]
		if fv == cv {
			continue
		}
		if why, ok := forkDifferences[k]; ok {
			t.Logf("%s (%s): cold %s, forked %s", k, why, cv, fv)
			continue
		}
		t.Errorf("%s: cold %s, forked %s", k, cv, fv)
	}
	for k, fv := range f {
		if _, ok := c[k]; !ok {
			t.Errorf("%s: only forked: %s", k, fv)
		}
	}
}

// TestAttackForkedBrokenPipe: a peer that closes its end of a pipe or a
// socket the kernel writes to (a web server, a subprocess) must not end
// the session: in a cold-started Python the write raises BrokenPipeError
// (the interpreter ignores SIGPIPE); a forked one had SIGPIPE's default
// back (the fork server's child reset it), and died of it.
func TestAttackForkedBrokenPipe(t *testing.T) {
	x := newForkSbx(t, nil, nil)
	out := x.py(t, `
import os, signal, socket
a, b = socket.socketpair()
b.close()
try:
    a.send(b"x"); print("sent")
except BrokenPipeError:
    print("socket: BrokenPipeError")
r, w = os.pipe()
os.close(r)
try:
    os.write(w, b"x"); print("written")
except BrokenPipeError:
    print("pipe: BrokenPipeError")
print("SIGPIPE", signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN, "SIGXFSZ", signal.getsignal(signal.SIGXFSZ) == signal.SIG_IGN)
print("SIGINT", signal.getsignal(signal.SIGINT) is signal.default_int_handler, "SIGCHLD", signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL)
`)
	for _, w := range []string{"socket: BrokenPipeError", "pipe: BrokenPipeError", "SIGPIPE True SIGXFSZ True", "SIGINT True SIGCHLD True"} {
		if !strings.Contains(out, w) {
			t.Errorf("want %q in the output:\n%s", w, out)
		}
	}
}

// probeRandom prints the random state a process holds that another
// could predict: every random.Random reachable (random's own
// included), the multiprocessing authentication key when that module is
// loaded, tempfile's name sequence, and the first values of each.
const probeRandom = `
import gc, sys, random, hashlib
gc.unfreeze()  # the fork server's objects (cowfreeze.py), as kernel code can list them
seen = set()
for o in gc.get_objects():
    if isinstance(o, random.Random) and not isinstance(o, random.SystemRandom) and id(o) not in seen:
        seen.add(id(o))
        print("random", hashlib.sha256(repr(o.getstate()).encode()).hexdigest()[:16])
print("module-random", random.random())
if "multiprocessing.process" in sys.modules:
    import multiprocessing.process as mp
    print("authkey", bytes(mp.current_process().authkey).hex())
import tempfile
print("tempname", next(tempfile._get_candidate_names()))
`

// TestAttackForkedRandomState: two kernels forked from one fork server
// share no random state: kernel code of one cannot predict the other's
// random numbers, temporary names or keys from its own.
func TestAttackForkedRandomState(t *testing.T) {
	needSandbox(t)
	a := newForkSbx(t, nil, nil).py(t, probeRandom)
	b := newForkSbx(t, nil, nil).py(t, probeRandom)
	t.Logf("a:\n%s\nb:\n%s", a, b)
	if !strings.Contains(a, "module-random") {
		t.Fatalf("the probe printed %q", a)
	}
	lb := map[string]bool{}
	for l := range strings.Lines(b) {
		lb[l] = true
	}
	for l := range strings.Lines(a) {
		if lb[l] {
			t.Errorf("both forked kernels hold %q", strings.TrimSpace(l))
		}
	}
}

// sandboxedSleeper starts a sleeper in x and returns its host pid and the
// host pid of its sandbox's init (pid 1 of its pid namespace).
func sandboxedSleeper(t *testing.T, x *sbx) (kernelPid, initPid int) {
	t.Helper()
	w := newLineWatcher("ready")
	p := x.start(t, w, nil, python, "-c", "import time; print('ready', flush=True); time.sleep(120)")
	w.wait(t)
	procs := append(testenv.Descendants(p.Pid()), nsPeers(testenv.Descendants(p.Pid()))...)
	for _, q := range procs {
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", q.Pid))
		for l := range strings.Lines(string(st)) {
			if v, ok := strings.CutPrefix(l, "NSpid:"); ok {
				f := strings.Fields(v)
				if len(f) > 1 && f[len(f)-1] == "1" {
					initPid = q.Pid
				}
			}
		}
		if strings.Contains(q.Cmdline, "time.sleep(120)") {
			kernelPid = q.Pid
		}
	}
	if kernelPid == 0 || initPid == 0 {
		t.Fatalf("kernel %d, init %d among %v", kernelPid, initPid, procs)
	}
	return kernelPid, initPid
}

// TestAttackForkedNamespaces: seen from the host, a forked kernel is in
// every namespace of its sandbox's init (time and the ones its children
// get included), under the same root and cgroup, as a cold-started one
// is; a namespace it kept of the fork server's would be a way out.
func TestAttackForkedNamespaces(t *testing.T) {
	needSandbox(t)
	for _, forked := range []bool{false, true} {
		var x *sbx
		if forked {
			x = newForkSbx(t, nil, nil)
		} else {
			x = newSbx(t, nil, &Options{Zygote: noFork{}})
		}
		k, init := sandboxedSleeper(t, x)
		ents, err := os.ReadDir("/proc/self/ns")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			kn, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", k, e.Name()))
			in, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", init, e.Name()))
			if err1 != nil || err2 != nil || kn != in {
				t.Errorf("forked %v: namespace %s: kernel %s (%v), init %s (%v)", forked, e.Name(), kn, err1, in, err2)
			}
		}
		for _, f := range []string{"cgroup", "uid_map", "gid_map", "setgroups"} {
			kb, _ := os.ReadFile(fmt.Sprintf("/proc/%d/%s", k, f))
			ib, _ := os.ReadFile(fmt.Sprintf("/proc/%d/%s", init, f))
			if string(kb) != string(ib) || len(kb) == 0 {
				t.Errorf("forked %v: %s: kernel %q, init %q", forked, f, kb, ib)
			}
		}
		var ks, is unix.Stat_t
		e1 := unix.Stat(fmt.Sprintf("/proc/%d/root/", k), &ks)
		e2 := unix.Stat(fmt.Sprintf("/proc/%d/root/", init), &is)
		if e1 != nil || e2 != nil || ks.Ino != is.Ino || ks.Dev != is.Dev {
			t.Errorf("forked %v: the kernel's root is not its init's (%v %v)", forked, e1, e2)
		}
	}
}

// TestAttackForkedTraceMe: kernel code of a forked kernel makes the fork
// server (its parent, outside its pid namespace) its tracer
// (PTRACE_TRACEME) and stops. The fork server took the
// stop for the kernel's exit: the sandbox ended (status 255) and the
// real exit stayed behind as a report for a later kernel of the same pid.
// (A cold-started one's init, its tracer then, takes the stop for an exit
// too, and its sandbox ends: the kernel ends its own session, as an exit
// would; the init cannot detach it, since a tracer is one thread and the
// init's Go threads are not the one that forked.) Now the stop is no
// exit: a helper continues the kernel, which ends as it chooses; the fork
// server forks on, and a sibling kernel lives on.
func TestAttackForkedTraceMe(t *testing.T) {
	needSandbox(t)
	sib := newLineWatcher("ready")
	ps := newForkSbx(t, nil, nil).start(t, sib, nil, python, "-c", "import time; print('ready', flush=True); time.sleep(120)")
	sib.wait(t)
	traceMe(t, newForkSbx(t, nil, nil), true)
	if got := newForkSbx(t, nil, nil).py(t, "print('forked')"); !strings.Contains(got, "forked") {
		t.Errorf("after the attack, a fork prints %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := ps.Wait(ctx); ctx.Err() == nil {
		t.Errorf("the sibling ended during the attack: %v", err)
	}
}

// traceMe runs TestAttackForkedTraceMe's payload in x: the program makes
// its parent its tracer (the fork server, or a cold one's init) and stops.
func traceMe(t *testing.T, x *sbx, forked bool) {
	out := x.py(t, attemptPrelude+`
import signal, time
for i in range(20):
    if os.fork() == 0:
        time.sleep(0.2); os._exit(0)
attempt("traceme", lambda: libc.ptrace(ctypes.c_long(0), ctypes.c_long(0), None, None))  # PTRACE_TRACEME
me = os.getpid()
if os.fork() == 0:
    time.sleep(1); os.kill(me, signal.SIGCONT); os._exit(0)
os.kill(me, signal.SIGSTOP)
print("resumed", flush=True)
time.sleep(0.5)
print("done", flush=True)
`)
	if !strings.Contains(out, "resumed\ndone") {
		t.Errorf("forked %v: the kernel that stopped did not resume: %q", forked, out)
	}
}

// TestAttackForkedCloneParent: kernel code of a forked kernel gives the
// fork server children of its own (clone with CLONE_PARENT: the new
// process's parent is the kernel's, the fork server), thousands of them,
// which exit at once. The fork server kept each one's exit status, as
// that of a kernel reaped before its pid was known, for good: its memory
// grew with every one, and a later kernel that got the same pid (pids
// wrap) would have been told at once that it had exited. Now it keeps a
// status only while a fork is pending, and none past it. The fork server
// forks on, and a sibling lives.
func TestAttackForkedCloneParent(t *testing.T) {
	needSandbox(t)
	z, err := kernel.NewSandboxZygote(context.Background(), python, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { z.Close() })
	sib := newLineWatcher("ready")
	ps := newSbx(t, nil, &Options{Zygote: z}).start(t, sib, nil, python, "-c", "import time; print('ready', flush=True); time.sleep(120)")
	sib.wait(t)
	var fs []int
	for _, pid := range findMarker(kernel.ZygoteMarker) {
		if slices.ContainsFunc(testenv.Descendants(pid), func(q testenv.Proc) bool { return strings.Contains(q.Cmdline, "time.sleep(120)") }) {
			fs = append(fs, pid)
		}
	}
	if len(fs) != 1 {
		t.Fatalf("fork servers of this test: %v", fs)
	}
	rss := func() int {
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", fs[0]))
		for l := range strings.Lines(string(st)) {
			if v, ok := strings.CutPrefix(l, "RssAnon:"); ok {
				n, _ := strconv.Atoi(strings.Fields(v)[0])
				return n
			}
		}
		t.Fatalf("no RssAnon in the fork server's status")
		return 0
	}
	before := rss()
	x := newSbx(t, nil, &Options{Zygote: z})
	var outb, errb strings.Builder
	p := x.start(t, &outb, &errb, python, "-c", attemptPrelude+strings.ReplaceAll(`
import time
n = 0
for i in range(STRAYS):
    pid = libc.syscall(ctypes.c_long(220 if os.uname().machine == "aarch64" else 56), ctypes.c_long(0x8000 | 17), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))  # clone(CLONE_PARENT | SIGCHLD)
    if pid == 0:
        os._exit(0)
    n += pid > 0
print("strays", n, flush=True)
`, "STRAYS", strconv.Itoa(cloneStrays)))
	if err := waitFor(t, p, 5*time.Minute); err != nil || !strings.Contains(outb.String(), "strays "+strconv.Itoa(cloneStrays)) {
		t.Fatalf("the payload (%v) made %q\n%s", err, outb.String(), errb.String())
	}
	if got := newSbx(t, nil, &Options{Zygote: z}).py(t, "print('forked')"); !strings.Contains(got, "forked") {
		t.Errorf("after the strays, a fork prints %q", got)
	}
	after := rss()
	t.Logf("the fork server's RssAnon: %d kB before %d strays, %d kB after", before, cloneStrays, after)
	if after-before > 512 {
		t.Errorf("the fork server's memory grew by %d kB with %d strays of a kernel's", after-before, cloneStrays)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := ps.Wait(ctx); ctx.Err() == nil {
		t.Errorf("the sibling ended during the attack: %v", err)
	}
}

// cloneStrays is how many children TestAttackForkedCloneParent gives the
// fork server.
const cloneStrays = 8000
