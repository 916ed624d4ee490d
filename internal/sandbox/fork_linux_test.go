package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/testenv"
)

// forkEnv, set to 1, runs every test of this package that makes its
// sandbox with newSbx against forked kernels (Options.Zygote): the attack
// suites unchanged, against the fork seam.
const forkEnv = "IPYBOX_TEST_SANDBOX_FORK"

var testZygote struct {
	once sync.Once
	z    *kernel.Zygote
	err  error
}

// With forkEnv, the package's fork server starts before the tests: its
// goroutines (reading its output) are not a leak of the first test that
// forks.
func init() {
	beforeTests = append(beforeTests, func() {
		if forkedByDefault() {
			startTestZygote()
		}
	})
}

func startTestZygote() {
	testZygote.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		testZygote.z, testZygote.err = kernel.NewSandboxZygote(ctx, python, nil, nil)
	})
}

// sandboxZygote returns the package's sandbox fork server for python.
func sandboxZygote(t testing.TB) *kernel.Zygote {
	t.Helper()
	needSandbox(t)
	startTestZygote()
	if testZygote.err != nil {
		t.Fatal(testZygote.err)
	}
	return testZygote.z
}

// forkedByDefault reports whether newSbx forks (forkEnv).
func forkedByDefault() bool { return os.Getenv(forkEnv) == "1" }

func newForkSbx(t testing.TB, cfg *Config, opts *Options) *sbx {
	t.Helper()
	var o Options
	if opts != nil {
		o = *opts
	}
	o.Zygote = sandboxZygote(t)
	return newSbx(t, cfg, &o)
}

// TestForkedPayload: a python -c payload forked into a sandbox runs with
// the sandbox's view, pid namespace and restrictions.
func TestForkedPayload(t *testing.T) {
	x := newForkSbx(t, nil, nil)
	out := x.py(t, `
import os, sys
print("pid", os.getpid())
print("ppid", os.getppid())
print("uid", os.getuid(), os.getgid())
print("cwd", os.getcwd())
print("procs", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
print("status", [l for l in open("/proc/self/status") if l.startswith(("Cap", "NoNewPrivs", "Seccomp"))])
print("fds", sorted(os.listdir("/proc/self/fd")))
try:
    open("/etc/shadow").read(); print("shadow readable")
except OSError as e:
    print("shadow denied", e)
`)
	t.Log(out)
	for _, w := range []string{"shadow denied", "cwd " + x.ws, "NoNewPrivs:\\t1", "CapEff:\\t0000000000000000", "CapBnd:\\t0000000000000000", "Seccomp:\\t2"} {
		if !strings.Contains(out, w) {
			t.Errorf("want %q in the output", w)
		}
	}
	_ = testenv.NeedsPython
}

// nsPeers returns the host's processes that share a pid namespace, other
// than the host's own, with one of procs, and are not in procs: a forked
// kernel is in its sandbox's pid namespace without descending from bwrap
// on the host.
func nsPeers(procs []testenv.Proc) []testenv.Proc {
	self, _ := os.Readlink("/proc/self/ns/pid")
	known := map[int]bool{}
	spaces := map[string]bool{}
	for _, p := range procs {
		known[p.Pid] = true
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", p.Pid)); err == nil && ns != self {
			spaces[ns] = true
		}
	}
	var out []testenv.Proc
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || known[pid] {
			continue
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err == nil && spaces[ns] {
			cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			out = append(out, testenv.Proc{Pid: pid, Cmdline: string(cl)})
		}
	}
	return out
}

// TestAttackForkSeam attacks what forking adds: kernel code of one forked
// sandbox tries to reach its sibling (another session's sandbox, forked
// from the same fork server), the fork server, and what it may have
// inherited from either (memory, descriptors, environment).
func TestAttackForkSeam(t *testing.T) {
	needSandbox(t)
	if testing.Short() {
		t.Skip("tier 3")
	}
	secret := "sibling-secret-" + randHex(16)
	a := newForkSbx(t, nil, nil)
	outA := newLineWatcher("ready")
	pa := a.startEnv(t, []string{"SIBLING_SECRET=" + secret}, outA, python, "-c", `
import os, time
token = os.environ["SIBLING_SECRET"]
kept = [token * 3]
open("/tmp/sibling-file", "w").write(token)
print("ready", os.getpid(), flush=True)
time.sleep(120)
`)
	// The secret travels in A's environment, as a session's token does.
	outA.wait(t)

	b := newForkSbx(t, nil, nil)
	out := b.py(t, attemptPrelude+`
# First, before the init is done with the sockets it set the kernel up on.
def abstract_sockets():
    names = [l.split()[-1] for l in open("/proc/net/unix").read().splitlines()[1:] if l.split()[-1].startswith("@")]
    if names:
        raise OSError(0, "abstract sockets visible: %r" % names)
    return "none"
attempt("no-abstract-sockets", abstract_sockets)
import signal, re
secret = `+strconv.Quote(secret)+`.encode()
def procs():
    return sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
attempt("see-only-self-and-init", lambda: (_ for _ in ()).throw(OSError(0, "sees %r" % procs())) if procs() != [1, os.getpid()] else "ok")
def kill_all():
    try:
        os.kill(-1, signal.SIGKILL)  # every process it may signal but itself and pid 1
    except ProcessLookupError:
        return "nobody to signal"
    return "sent"
attempt("kill-everything-visible", kill_all)
def ptrace_init():
    if libc.ptrace(16, 1, 0, 0) != 0:  # PTRACE_ATTACH to the init
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
    return "attached"
attempt("ptrace-init", ptrace_init)
def parent():
    p = os.getppid()
    if p not in (0, 1):
        raise OSError(0, "a parent outside the sandbox is visible: %d" % p)
    return p
attempt("no-visible-parent", parent)
def fds():
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.append((int(fd), os.readlink("/proc/self/fd/" + fd)))
        except OSError:
            pass
    extra = [f for f in out if f[0] > 2 and not f[1].startswith("/proc/")]
    if extra:
        raise OSError(0, "inherited descriptors %r" % extra)
    return "none"
attempt("no-inherited-descriptors", fds)
def environ():
    data = open("/proc/self/environ", "rb").read()
    if secret in data or b"SIBLING_SECRET" in data:
        raise OSError(0, "a sibling's environment is visible")
    return "clean"
attempt("no-sibling-environ", environ)
def sibling_tmp():
    if os.path.exists("/tmp/sibling-file"):
        raise OSError(0, "a sibling's /tmp is visible")
    return "private"
attempt("no-sibling-tmp", sibling_tmp)
`)
	t.Log(out)
	for _, w := range []string{
		"see-only-self-and-init ALLOWED", "kill-everything-visible ALLOWED", "ptrace-init DENIED",
		"no-visible-parent ALLOWED", "no-inherited-descriptors ALLOWED",
		"no-sibling-environ ALLOWED", "no-abstract-sockets ALLOWED", "no-sibling-tmp ALLOWED",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("want %q", w)
		}
	}
	// The sibling and the fork server outlived the attack.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err := pa.Wait(ctx)
	if ctx.Err() == nil {
		t.Errorf("the sibling kernel died during the attack: %v", err)
	}
	cancel()
	// Nothing of A's session is in the memory of a kernel forked after it
	// (kernel code reads its own memory at will), nor in the fork server's.
	outC := newLineWatcher("ready")
	c := newForkSbx(t, nil, nil)
	pc := c.start(t, outC, nil, python, "-c", "import time; print('ready', flush=True); time.sleep(120)")
	outC.wait(t)
	peers := nsPeers([]testenv.Proc{{Pid: pc.Pid()}})
	peers = append(peers, nsPeers(testenv.Descendants(pc.Pid()))...)
	scanned := 0
	for _, p := range peers {
		if !strings.Contains(p.Cmdline, "time.sleep(120)") {
			continue
		}
		scanned++
		if where := memHolds(t, p.Pid, secret); where != "" {
			t.Errorf("a sibling's secret is in the memory of kernel %d at %s", p.Pid, where)
		}
	}
	if scanned == 0 {
		t.Errorf("no forked kernel found to scan among %v", peers)
	}
	// The control: the scan finds the secret where it is, in A.
	control := 0
	for _, p := range nsPeers([]testenv.Proc{{Pid: pa.Pid()}}) {
		if memHolds(t, p.Pid, secret) != "" {
			control++
		}
	}
	for _, p := range nsPeers(testenv.Descendants(pa.Pid())) {
		if memHolds(t, p.Pid, secret) != "" {
			control++
		}
	}
	if control == 0 {
		t.Error("the memory scan does not find the secret in the kernel that holds it")
	}
	zy := findMarker(kernel.ZygoteMarker)
	if len(zy) == 0 {
		t.Error("no fork server process found to scan")
	}
	// No process of the fork server stays outside the sandbox for a
	// kernel: the child that joined the sandbox exited once it had forked
	// the kernel, whose parent is now the fork server itself (a child
	// subreaper), outside its pid namespace.
	for _, p := range peers {
		if !strings.Contains(p.Cmdline, "time.sleep(120)") {
			continue
		}
		ppid := statusField(p.Pid, "PPid:")
		if !slices.Contains(zy, ppid) || statusField(ppid, "PPid:") != os.Getpid() {
			t.Errorf("kernel %d: its parent %d is not the fork server this test started (fork server processes: %v)", p.Pid, ppid, zy)
		}
	}
	// A fork server process that runs as the sandbox's uid (a child on
	// its way into a sandbox) has no capability.
	for _, pid := range zy {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil || os.Getuid() != 0 || !strings.Contains(string(st), "\nUid:\t"+strconv.Itoa(MappedID)) {
			continue
		}
		for _, w := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000"} {
			if !strings.Contains(string(st), w) {
				t.Errorf("fork server child %d: want %q in its status:\n%s", pid, w, st)
			}
		}
	}
	for _, pid := range zy {
		if where := memHolds(t, pid, secret); where != "" {
			t.Errorf("a session's secret is in the memory of fork server process %d at %s", pid, where)
		}
	}
}

// statusField is the number after field in /proc/pid/status (0: none).
func statusField(pid int, field string) int {
	st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for l := range strings.Lines(string(st)) {
		if v, ok := strings.CutPrefix(l, field); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// memHolds returns where pid's readable memory holds needle ("" nowhere).
func memHolds(t *testing.T, pid int, needle string) string {
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return ""
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Errorf("open the memory of %d: %v", pid, err)
		return ""
	}
	defer mem.Close()
	for _, l := range strings.Split(string(maps), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || f[1][0] != 'r' || len(f) > 5 && strings.HasPrefix(f[5], "[v") {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		a, _ := strconv.ParseUint(lo, 16, 64)
		b, _ := strconv.ParseUint(hi, 16, 64)
		buf := make([]byte, b-a)
		n, _ := mem.ReadAt(buf, int64(a))
		if strings.Contains(string(buf[:n]), needle) {
			return f[0] + " " + strings.Join(f[5:], " ")
		}
	}
	return ""
}

// startEnv starts argv in the sandbox with extra environment variables.
func (x *sbx) startEnv(t testing.TB, env []string, stdout io.Writer, argv ...string) kernel.HostProcess {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := x.Start(ctx, &kernel.Spec{
		Path: argv[0], Args: argv[1:], Env: append(x.env(t), env...), Dir: x.ws, RunDir: x.run, Stdout: stdout,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill(context.Background()) })
	return p.(kernel.HostProcess)
}

// TestForkedKernel: an ipykernel forked into its sandbox answers,
// interrupts and restarts like a cold-started one.
func TestForkedKernel(t *testing.T) {
	testenv.CheckGoroutines(t)
	needSandbox(t)
	z, err := kernel.NewSandboxZygote(context.Background(), python, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { z.Close() })
	cold := newSbx(t, nil, &Options{Zygote: noFork{}})
	x := newSbx(t, nil, &Options{Workspace: cold.ws, Zygote: z})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := func(l kernel.Launcher) (*kernel.Kernel, time.Duration) {
		t0 := time.Now()
		k, err := kernel.Start(ctx, &kernel.Options{Python: python, Launcher: l, Dir: x.ws})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := k.Execute(ctx, "pass", nil); err != nil {
			k.Close()
			t.Fatal(err)
		}
		return k, time.Since(t0)
	}
	var ct, ft time.Duration
	for i := 0; i < 2; i++ {
		c, t1 := start(cold.Sandbox)
		c.Close()
		f, t2 := start(x)
		f.Close()
		ct, ft = t1, t2
	}
	t.Logf("sandboxed start to first result: cold %v, forked %v (a log, not a check: the machine is shared)", ct, ft)

	k, _ := start(x)
	defer k.Close()
	res, err := k.Execute(ctx, fmt.Sprintf(`
import os, socket, sys
print("cwd ok" if os.getcwd() == %q else "cwd " + os.getcwd())
print("pids", sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()))
try:
    open("/etc/shadow").read(); print("shadow readable")
except OSError:
    print("shadow denied")
try:
    socket.create_connection(("1.1.1.1", 443), timeout=2); print("network open")
except OSError:
    print("network closed")
print("bytecode", sys.dont_write_bytecode)
`, x.ws), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Text)
	for _, w := range []string{"cwd ok", "shadow denied", "network closed"} {
		if !strings.Contains(res.Text, w) {
			t.Errorf("cell output %q, want %q", res.Text, w)
		}
	}
	cctx, ccancel := context.WithTimeout(ctx, time.Second)
	_, err = k.Execute(cctx, "import time; time.sleep(30)", nil)
	ccancel()
	if err == nil {
		t.Fatal("a 30 s sleep finished within 1 s")
	}
	pid := k.Pid()
	res, err = k.Execute(ctx, "print('alive')", nil)
	if err != nil || !strings.Contains(res.Text, "alive") || k.Pid() != pid {
		t.Errorf("after the interrupt: %v %v (pid %d, was %d): want the same kernel, alive", res, err, k.Pid(), pid)
	}
	if err := k.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	res, err = k.Execute(ctx, "print('restarted')", nil)
	if err != nil || !strings.Contains(res.Text, "restarted") {
		t.Errorf("after a restart: %v %v", res, err)
	}
}

// noFork is a Forker that forks nothing: a Sandbox with it starts every
// kernel cold, whatever forkEnv says.
type noFork struct{}

func (noFork) Python() string { return "" }
func (noFork) Join(context.Context, *kernel.JoinRequest) error {
	return errors.New("noFork forks nothing")
}
