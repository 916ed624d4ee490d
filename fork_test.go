//go:build linux

package ipybox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/defaults"
	"github.com/ipybox/ipybox/internal/testenv"
)

// run executes code and returns its trimmed text, failing t on an error.
func frun(t *testing.T, ex *ipybox.Executor, code string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := ex.Execute(ctx, code, nil)
	if err != nil {
		t.Fatalf("%q: %v", code, err)
	}
	return strings.TrimSpace(res.Text)
}

// alive reports whether pid exists.
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// waitGone waits (bounded) until pid has gone.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d is still alive", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestForkProcess forks an unsandboxed kernel (direct, and from a
// zygote): the fork holds the source's namespace at the fork, changes in
// either are unseen by the other, both keep working, the fork has its own
// tool token and reseeded random, and closing either does not end the
// other.
func TestForkProcess(t *testing.T) {
	testenv.NeedsPython(t)
	for _, name := range []string{"direct", "zygote", "new app", "ipykernel 7"} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if name == "new app" {
				ipybox.ForkNewApp(t)
			}
			o := &ipybox.Options{WorkDir: t.TempDir()}
			if name == "ipykernel 7" {
				// PyPI's stack: the rebind knows ipykernel 7's app too.
				o.Python, _ = testenv.PyPIPython(t)
			}
			if name == "zygote" {
				z, err := ipybox.NewZygote(ctx, "", nil)
				if err != nil {
					t.Fatal(err)
				}
				defer z.Close()
				o.Zygote = z
			}
			src, err := ipybox.Start(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			frun(t, src, "import random, os, json\nxs = [1, 2, 3]\ndef f(v):\n    return v * k\nk = 7\nrandom.seed(1)\nfh = open('f.txt', 'w')")
			forks, err := src.Fork(ctx, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			f := forks[0]
			defer f.Close()
			if f.ForkInfo() == nil || f.ForkInfo().Method != "process" {
				t.Fatalf("ForkInfo = %+v, want a process fork", f.ForkInfo())
			}
			if got := frun(t, f, "print(xs, f(6), k)"); got != "[1, 2, 3] 42 7" {
				t.Fatalf("fork sees %q", got)
			}
			// A function defined in the fork sees the source's names as
			// its globals, and __main__ is the namespace.
			if got := frun(t, f, "def g():\n    return k + len(xs)\nimport sys\nprint(g(), sys.modules['__main__'].__dict__ is globals())"); got != "10 True" {
				t.Fatalf("fork's new function: %q", got)
			}
			// A cell's value shows through the shell's display hook; ipybox's
			// init ran once more in the fork, and its hooks are not doubled.
			res, err := f.Execute(ctx, "class H:\n    def _repr_html_(self):\n        return '<b>h</b>'\nH()", nil)
			if err != nil || len(res.Displays) != 1 || !res.Displays[0].Result || res.Displays[0].Data["text/html"] != "<b>h</b>" {
				t.Fatalf("fork's cell value: %v, %+v", err, res)
			}
			if got := frun(t, f, "print(sum(cb.__name__ == '_ipybox_restore_cwd' for cb in get_ipython().events.callbacks['post_run_cell']))"); got != "1" {
				t.Fatalf("the fork has %s cwd hooks, want 1", got)
			}
			// The app's log handler wrote to the source's stderr copy:
			// in the copy that descriptor is /dev/null, not a channel that
			// took its number.
			if got := frun(t, f, "get_ipython().kernel.log.error('IPKernel ' * 64)\nprint('alive')"); got != "alive" {
				t.Fatalf("fork after a log line: %q", got)
			}
			// The source's names are the user's (a snapshot saves them,
			// %who lists them), not start-up names of the fork's app.
			if got := frun(t, f, "print('xs' in get_ipython().run_line_magic('who_ls', ''))"); got != "True" {
				t.Fatalf("the fork hides the source's names: %q", got)
			}
			frun(t, f, "xs.append(4); k = 1")
			if got := frun(t, src, "print(xs, f(6))"); got != "[1, 2, 3] 42" {
				t.Fatalf("source sees the fork's change: %q", got)
			}
			frun(t, src, "del k")
			if got := frun(t, f, "print(xs, f(6))"); got != "[1, 2, 3, 4] 6" {
				t.Fatalf("fork sees %q", got)
			}
			// The fork's channels are its own: a new ZeroMQ context and new
			// heartbeat, iopub and control threads, running; a rebound
			// fork keeps its source's shell (a new app makes a new one).
			chans := "from ipykernel.kernelapp import IPKernelApp as A\na = A.instance()\n" +
				"print(id(get_ipython()), id(a.context), id(a.heartbeat), a.heartbeat.is_alive(), a.iopub_thread.thread.is_alive(), a.control_thread.is_alive())"
			cs, cf := strings.Fields(frun(t, src, chans)), strings.Fields(frun(t, f, chans))
			if len(cs) != 6 || len(cf) != 6 || cs[1] == cf[1] || cs[2] == cf[2] || cf[3]+cf[4]+cf[5] != "TrueTrueTrue" {
				t.Fatalf("the fork's channels: source %v, fork %v", cs, cf)
			}
			if rebound := name != "new app"; (cs[0] == cf[0]) != rebound {
				t.Fatalf("the fork's shell: source %s, fork %s (rebound %v)", cs[0], cf[0], rebound)
			}
			tokS := frun(t, src, "print(os.environ['IPYBOX_TOOL_TOKEN'])")
			tokF := frun(t, f, "print(os.environ['IPYBOX_TOOL_TOKEN'])")
			if tokS == tokF || tokF == "" {
				t.Fatalf("the fork has the source's tool token")
			}
			if a, b := frun(t, src, "print(random.random())"), frun(t, f, "print(random.random())"); a == b {
				t.Fatalf("source and fork draw the same random stream: %s", a)
			}
			pidS, _ := strconv.Atoi(frun(t, src, "print(os.getpid())"))
			pidF, _ := strconv.Atoi(frun(t, f, "print(os.getpid())"))
			if pidS == pidF || pidF == 0 {
				t.Fatalf("pids %d %d", pidS, pidF)
			}
			if err := src.Close(); err != nil {
				t.Fatal(err)
			}
			waitGone(t, pidS)
			if got := frun(t, f, "print(xs[-1])"); got != "4" {
				t.Fatalf("fork after the source's close: %q", got)
			}
			// A reset of a fork is a fresh kernel, not another copy.
			if err := f.Reset(ctx); err != nil {
				t.Fatal(err)
			}
			waitGone(t, pidF)
			if got := frun(t, f, "print('xs' in globals())"); got != "False" {
				t.Fatalf("after a reset the fork still has the namespace: %q", got)
			}
			pidF, _ = strconv.Atoi(frun(t, f, "import os; print(os.getpid())"))
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			waitGone(t, pidF)
		})
	}
}

// TestRewind undoes a cell that deleted a variable and mutated a list,
// then two cells at once; past the boundaries kept it says how far it can
// go; the boundaries' processes end with Close.
func TestRewind(t *testing.T) {
	testenv.NeedsPython(t)
	t.Run("rebind", func(t *testing.T) { testRewind(t, "") })
	t.Run("new app", func(t *testing.T) {
		ipybox.ForkNewApp(t)
		testRewind(t, "")
	})
	t.Run("ipykernel 7", func(t *testing.T) {
		py, _ := testenv.PyPIPython(t)
		testRewind(t, py)
	})
}

func testRewind(t *testing.T, python string) {
	ctx := context.Background()
	ws := t.TempDir()
	ex, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: ws, RewindDepth: 3, Python: python})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	frun(t, ex, "xs = [1, 2]\nv = 'keep'")
	frun(t, ex, "del v\nxs.append(3)")
	t0 := time.Now()
	if _, err := ex.Rewind(ctx, 1); err != nil {
		t.Fatal(err)
	}
	t.Logf("rewind took %v", time.Since(t0))
	res, err := ex.Execute(ctx, "print(xs, v)", nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(res.Text) != "[1, 2] keep" || !strings.Contains(res.Note, "rewound 1 cell") {
		t.Fatalf("after rewind: %q, note %q", res.Text, res.Note)
	}
	frun(t, ex, "xs.append(9)")
	frun(t, ex, "xs.append(10)")
	// Boundaries now: before "print", before append(9), before append(10).
	_, err = ex.Rewind(ctx, 4)
	if err == nil || !strings.Contains(err.Error(), "1 to 3 cells") {
		t.Fatalf("rewind past the bound: %v", err)
	}
	rep, err := ex.Rewind(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Left != 1 {
		t.Fatalf("report %+v", rep)
	}
	if got := frun(t, ex, "print(xs)"); got != "[1, 2]" {
		t.Fatalf("after rewinding 2: %q", got)
	}
	pids := checkpointPids(t, ws)
	if len(pids) == 0 {
		t.Fatal("no kept boundary found")
	}
	if err := ex.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range pids {
		waitGone(t, p)
	}
}

// checkpointPids lists this user's processes whose parent is not this
// test and that lead their group with the kernel's interpreter in the
// workspace ws: the kept boundaries and forks (for the leak checks). The
// machine is shared: a kernel of another test or user is not one of them.
func checkpointPids(t *testing.T, ws string) []int {
	t.Helper()
	ws, _ = filepath.EvalSymlinks(ws)
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err != nil || cwd != ws {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !strings.Contains(string(env), "IPYBOX_TOOL_TOKEN") {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) > 2 && f[1] != strconv.Itoa(os.Getpid()) {
			out = append(out, pid)
		}
	}
	return out
}

// TestForkMany makes 4 forks at once: each holds the namespace and works
// on its own; every process ends with Close, and no goroutine is left.
func TestForkMany(t *testing.T) {
	testenv.CheckGoroutines(t)
	testenv.NeedsPython(t)
	ctx := context.Background()
	src, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	frun(t, src, "n = [0]")
	forks, err := src.Fork(ctx, 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for i, f := range forks {
		frun(t, f, "n[0] += "+strconv.Itoa(i+1))
		pid, _ := strconv.Atoi(frun(t, f, "import os; print(os.getpid())"))
		pids = append(pids, pid)
	}
	for i, f := range forks {
		if got := frun(t, f, "print(n[0])"); got != strconv.Itoa(i+1) {
			t.Fatalf("fork %d: n = %s", i, got)
		}
	}
	if got := frun(t, src, "print(n[0])"); got != "0" {
		t.Fatalf("source: n = %s", got)
	}
	if _, err := src.Fork(ctx, defaults.MaxForks+1, nil); err == nil {
		t.Fatal("a fork of more than MaxForks was made")
	}
	for _, f := range forks {
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pids {
		waitGone(t, p)
	}
	if got := frun(t, src, "print(n[0])"); got != "0" {
		t.Fatalf("source after its forks closed: n = %s", got)
	}
}

// TestForkBusy: a fork or a rewind of a session that is running a cell
// refuses with ErrBusy, and works once the cell has ended.
func TestForkBusy(t *testing.T) {
	testenv.NeedsPython(t)
	ctx := context.Background()
	src, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: t.TempDir(), RewindDepth: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for ev, err := range src.Stream(ctx, "print('go', flush=True)\nimport time; time.sleep(3)", nil) {
			if err != nil {
				done <- err
				return
			}
			if _, ok := ev.(*ipybox.Output); ok {
				select {
				case <-started:
				default:
					close(started)
				}
			}
		}
		done <- nil
	}()
	<-started
	if _, err := src.Fork(ctx, 1, nil); !errors.Is(err, ipybox.ErrBusy) {
		t.Fatalf("fork of a busy session: %v", err)
	}
	if _, err := src.Rewind(ctx, 1); !errors.Is(err, ipybox.ErrBusy) {
		t.Fatalf("rewind of a busy session: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	forks, err := src.Fork(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	forks[0].Close()
}

// TestForkSourceRunsWhileForkPrepares: a fork holds its source only for
// its fork cell, so that the source's cells run while the fork prepares
// (its tool server, run folder and kernel options); the fork copies the
// state after them. Before, the source was held from the call on, and the
// cell below waited for the whole preparation.
func TestForkSourceRunsWhileForkPrepares(t *testing.T) {
	testenv.NeedsPython(t)
	ctx := context.Background()
	src, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	frun(t, src, "y = 1")
	ran := make(chan error, 2)
	ipybox.ForkPreparing(t, func() {
		// The source's cell, sent while the fork prepares: it must end
		// before the preparation does.
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := src.Execute(c, "y = 5", nil)
		ran <- err
	})
	forks, err := src.Fork(ctx, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forks {
		defer f.Close()
	}
	for range 2 {
		if err := <-ran; err != nil {
			t.Fatalf("the source's cell during the fork's preparation: %v", err)
		}
	}
	for i, f := range forks {
		if got := frun(t, f, "print(y)"); got != "5" {
			t.Errorf("fork %d: y = %q, want the state after the source's cells, 5", i, got)
		}
	}
	if got := frun(t, src, "print(y)"); got != "5" {
		t.Errorf("source: y = %q, want 5", got)
	}
}

// TestForkConfined forks a sandboxed and a container kernel: through a
// snapshot, into a fresh kernel of the same backend. The fork holds the
// state and says how it was made; its kernel cannot read its source's
// snapshot folder (the masks hide it), nor find its source's tool token in
// any process it can see.
func TestForkConfined(t *testing.T) {
	testenv.NeedsPython(t)
	for _, backend := range []string{"sandbox", "container"} {
		t.Run(backend, func(t *testing.T) {
			ws := t.TempDir()
			o := snapshotOpts(ws, "src")
			if backend == "sandbox" {
				testenv.NeedsTool(t, "bwrap")
				o.Sandbox = ipybox.DefaultSandbox()
			} else {
				testenv.NeedsDocker(t)
				o.Container = &ipybox.ContainerConfig{}
			}
			src := start(t, o)
			ctx := context.Background()
			frun(t, src, "xs = [1, 2, 3]\ndef f(v):\n    return v + 1\nimport os")
			forks, err := src.Fork(ctx, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			f := forks[0]
			defer f.Close()
			if fi := f.ForkInfo(); fi == nil || fi.Method != "snapshot" || !strings.Contains(fi.Note, "snapshot") {
				t.Fatalf("ForkInfo = %+v", fi)
			}
			if got := frun(t, f, "print(xs, f(1))"); got != "[1, 2, 3] 2" {
				t.Fatalf("fork sees %q", got)
			}
			tok := frun(t, src, "print(os.environ['IPYBOX_TOOL_TOKEN'])")
			srcSnap := src.SnapshotDir()
			if backend == "container" {
				srcSnap = "/workspace/.ipybox/snapshots/src"
			}
			probe := `import os, glob
found = []
for p in glob.glob('/proc/[0-9]*/environ'):
    try:
        if TOK in open(p).read():
            found.append(p)
    except OSError:
        pass
try:
    print('listed', os.listdir(SNAP))
except OSError as e:
    print('refused', type(e).__name__)
print('found', found)`
			code := "TOK = " + strconv.Quote(tok) + "\nSNAP = " + strconv.Quote(srcSnap) + "\n" + probe
			got := frun(t, f, code)
			if !strings.Contains(got, "refused") || !strings.Contains(got, "found []") {
				t.Fatalf("the fork reached its source: %s", got)
			}
			frun(t, f, "xs.append(4)")
			if got := frun(t, src, "print(xs)"); got != "[1, 2, 3]" {
				t.Fatalf("source sees the fork's change: %q", got)
			}
		})
	}
}

// TestForkShellApproval: ipybox's init runs again in a process fork,
// whose modules the source's init already wrapped: a shell command in the
// fork is asked about once, not twice, and the process guards still hold.
func TestForkShellApproval(t *testing.T) {
	testenv.NeedsPython(t)
	ctx := context.Background()
	var mu sync.Mutex
	asks := 0
	src, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: t.TempDir(), ApproveShellCommands: true, RequireShellEscape: true,
		Approver: func(context.Context, *ipybox.ApprovalRequest) error {
			mu.Lock()
			asks++
			mu.Unlock()
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return asks
	}
	frun(t, src, "!echo hi")
	frun(t, src, "%%bash\necho there")
	n0 := count()
	fs, err := src.Fork(ctx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fs[0].Close()
	frun(t, fs[0], "!echo hi")
	frun(t, fs[0], "%%bash\necho there")
	if n := count() - n0; n != n0 {
		t.Fatalf("the source asked %d times, the fork %d times for the same commands", n0, n)
	}
	out := frun(t, fs[0], "import subprocess\ntry:\n    subprocess.run(['true'])\nexcept PermissionError:\n    print('refused')")
	if out != "refused" {
		t.Fatalf("the process guard in the fork: %q", out)
	}
}

// TestAttackForkPid: kernel code in the source chooses what the fork cell
// reports. A pid that is the host's, pid 1, not a pid, or a process that
// does not lead its own group is refused, nothing is signalled, and the
// source keeps working.
func TestAttackForkPid(t *testing.T) {
	testenv.NeedsPython(t)
	ctx := context.Background()
	src, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	frun(t, src, `import os, subprocess, ipybox_runtime._fork as F
from IPython.display import publish_display_data
victim = subprocess.Popen(["sleep", "60"])
def lie(pid):
    def request(data):
        publish_display_data({F.REPORT_MIME: {"pid": pid}})
    F.request = request`)
	victim := frun(t, src, "print(victim.pid)")
	for _, pid := range []string{"os.getppid()", "1", "-5", "0", "victim.pid", "'12'"} {
		frun(t, src, "lie("+pid+")")
		t0 := time.Now()
		_, err := src.Fork(ctx, 1, nil)
		if err == nil || !(strings.Contains(err.Error(), "adopt pid") || strings.Contains(err.Error(), "malformed")) {
			t.Fatalf("a fork that reported pid %s: %v", pid, err)
		}
		if d := time.Since(t0); d > 10*time.Second {
			t.Fatalf("the refusal of pid %s took %v: it was adopted and waited for", pid, d)
		}
	}
	if got := frun(t, src, "print(victim.poll())"); got != "None" {
		t.Fatalf("the victim %s was signalled: %s", victim, got)
	}
	frun(t, src, "victim.kill()")
}

// TestRewindReportsDeath: with boundaries kept, a kernel killed between
// cells is still reported in the next cell's Result.Restarted (the
// boundary's fork cell does not swallow the report), whether or not the
// host has seen the death yet.
func TestRewindReportsDeath(t *testing.T) {
	testenv.NeedsPython(t)
	ctx := context.Background()
	ex, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: t.TempDir(), RewindDepth: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	for _, wait := range []bool{false, true} {
		pid, _ := strconv.Atoi(frun(t, ex, "import os; print(os.getpid())"))
		syscall.Kill(pid, syscall.SIGKILL)
		if wait {
			waitGone(t, pid)
		}
		res, err := ex.Execute(ctx, "print('after')", nil)
		if err != nil {
			t.Fatalf("wait=%v: %v", wait, err)
		}
		if res.Restarted == nil {
			t.Fatalf("wait=%v: the kernel's death was not reported: %+v", wait, res)
		}
	}
}

// TestForkInterrupt: a rebound fork and a rewound kernel take an interrupt
// (a cell past its deadline) as any kernel does, and keep their state: the
// signal handling is the source app's, set up again in the copy.
func TestForkInterrupt(t *testing.T) {
	testenv.NeedsPython(t)
	ctx := context.Background()
	for _, name := range []string{"fork", "rewind"} {
		t.Run(name, func(t *testing.T) {
			src, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: t.TempDir(), RewindDepth: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			frun(t, src, "x = 41")
			k := src
			if name == "fork" {
				forks, err := src.Fork(ctx, 1, nil)
				if err != nil {
					t.Fatal(err)
				}
				k = forks[0]
				defer k.Close()
			} else {
				frun(t, src, "x = 0")
				if _, err := src.Rewind(ctx, 1); err != nil {
					t.Fatal(err)
				}
			}
			res, err := k.Execute(ctx, "import time\nwhile True: time.sleep(0.01)", &ipybox.ExecOptions{Timeout: time.Second})
			if err == nil || res == nil || res.Restarted != nil {
				t.Fatalf("a cell past its deadline: %v, %+v", err, res)
			}
			if got := frun(t, k, "print(x + 1)"); got != "42" {
				t.Fatalf("after the interrupt: %q", got)
			}
		})
	}
}

// TestForkReportsFailure: a copy that cannot become a kernel (here ipybox's
// init raises in a fork; a kept boundary's bind raises) makes the start
// fail with the copy's own error, not only "process exited".
func TestForkReportsFailure(t *testing.T) {
	testenv.NeedsPython(t)
	ctx := context.Background()
	src, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: t.TempDir(), RewindDepth: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	frun(t, src, "import ipybox_runtime._fork as F\ndef broken(*a):\n    raise RuntimeError('init-broke-here')\nF._run_init = broken")
	_, err = src.Fork(ctx, 1, nil)
	if err == nil || !strings.Contains(err.Error(), "init-broke-here") {
		t.Fatalf("a fork whose init raised: %v", err)
	}
	// The boundary fails once adopted (a copy that dies at once is not
	// adopted, and its cell is not undoable).
	frun(t, src, "def slow(*a):\n    import time\n    time.sleep(2)\n    broken()\nF._bind = slow")
	frun(t, src, "x = 1") // kept a boundary, which fails
	_, err = src.Rewind(ctx, 1)
	if err == nil || !strings.Contains(err.Error(), "init-broke-here") {
		t.Fatalf("a rewind to a boundary that failed: %v", err)
	}
	// The session goes on in a fresh kernel, and says so.
	res, err := src.Execute(ctx, "print('x' in globals())", nil)
	if err != nil || strings.TrimSpace(res.Text) != "False" {
		t.Fatalf("after the failed rewind: %v, %+v", err, res)
	}
}
