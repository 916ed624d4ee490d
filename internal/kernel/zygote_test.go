//go:build linux

package kernel_test

import (
	"context"
	"errors"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/testenv"
)

func startZygote(t *testing.T) (*kernel.Zygote, string) {
	t.Helper()
	py := testenv.NeedsPython(t)
	z, err := kernel.NewZygote(context.Background(), py, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "LANG=C.UTF-8"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { z.Close() })
	return z, py
}

// TestZygoteKernels: kernels forked by the zygote behave as cold-started
// ones, and share nothing with each other.
func TestZygoteKernels(t *testing.T) {
	testenv.CheckGoroutines(t)
	z, py := startZygote(t)
	ctx := context.Background()
	startK := func(env ...string) *kernel.Kernel {
		k, err := kernel.Start(ctx, &kernel.Options{Python: py, Dir: t.TempDir(), Launcher: z, Env: env})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { k.Close() })
		return k
	}
	a := startK("ONLY_A=1")
	b := startK()
	res, err := a.Execute(ctx, "import os, random\nx = 41\nprint(os.environ.get('ONLY_A'), os.getcwd() != '/', random.random())", nil)
	if err != nil {
		t.Fatal(err)
	}
	fa := strings.Fields(res.Text)
	res, err = b.Execute(ctx, "import os, random\nprint(os.environ.get('ONLY_A'), 'x' in dir(), random.random())", nil)
	if err != nil {
		t.Fatal(err)
	}
	fb := strings.Fields(res.Text)
	if len(fa) != 3 || len(fb) != 3 || fa[0] != "1" || fa[1] != "True" || fb[0] != "None" || fb[1] != "False" {
		t.Fatalf("a: %q, b: %q", fa, fb)
	}
	if fa[2] == fb[2] {
		t.Errorf("both kernels drew the same random number %s: the zygote's random state was shared", fa[2])
	}
	ga, _ := syscall.Getpgid(a.Pid())
	gb, _ := syscall.Getpgid(b.Pid())
	if a.Pid() == b.Pid() || ga != a.Pid() || gb != b.Pid() {
		t.Errorf("kernels %d and %d do not lead process groups of their own (%d, %d)", a.Pid(), b.Pid(), ga, gb)
	}

	// Interrupt reaches the cell; state survives. The interrupt waits for
	// the cell to run: one sent before is ignored, and the cell sleeps on.
	var once sync.Once
	_, err = a.Execute(ctx, sleepCell, &kernel.ExecOptions{
		OnEvent: func(e kernel.Event) {
			if o, ok := e.(*kernel.Output); ok && strings.Contains(o.Text, "sleeping") {
				once.Do(func() { a.Interrupt() })
			}
		},
	})
	var pe *kernel.PythonError
	if !errors.As(err, &pe) || pe.Name != "KeyboardInterrupt" {
		t.Fatalf("interrupt: %v", err)
	}
	if res, err := a.Execute(ctx, "x + 1", nil); err != nil || res.Text != "42" {
		t.Fatalf("state after the interrupt: %v %+v", err, res)
	}

	// Death is seen, and the next call forks a fresh kernel.
	pid := a.Pid()
	syscall.Kill(pid, syscall.SIGKILL)
	res, err = a.Execute(ctx, "1", nil)
	diedOrReported(t, "after SIGKILL", res, err)
	if res, err := a.Execute(ctx, "2", nil); err != nil || res.Text != "2" || a.Pid() == pid {
		t.Fatalf("after death: %v %+v", err, res)
	}
}

// TestZygoteDeath: kernels die with their zygote, and the zygote comes back
// for the next start.
func TestZygoteDeath(t *testing.T) {
	t.Parallel()
	z, py := startZygote(t)
	ctx := context.Background()
	k, err := kernel.Start(ctx, &kernel.Options{Python: py, Dir: t.TempDir(), Launcher: z})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	kpid := k.Pid()
	zpid := 0
	for _, p := range testenv.Processes() {
		if p.Pid == kpid {
			zpid = p.PPid
		}
	}
	if zpid <= 1 {
		t.Fatalf("no zygote parent for kernel %d", kpid)
	}
	syscall.Kill(zpid, syscall.SIGKILL)
	// The kernel dies with its zygote: soon, not at once (the kill is
	// delivered, and the zygote's exit signals the kernel, asynchronously;
	// a call made meanwhile can still be answered).
	deadline := time.Now().Add(10 * time.Second)
	for testenv.Alive(kpid) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if testenv.Alive(kpid) {
		t.Fatalf("kernel %d outlived its zygote", kpid)
	}
	// The next call either sees it dead (ErrKernelDied) or, when the host
	// saw the death first, runs in a fresh kernel and reports the death in
	// Result.Restarted.
	res, err := k.Execute(ctx, "1", nil)
	diedOrReported(t, "after the zygote died", res, err)
	if res, err := k.Execute(ctx, "3", nil); err != nil || res.Text != "3" {
		t.Fatalf("a fresh zygote: %v %+v", err, res)
	}
}

// diedOrReported checks the first call after a kernel was killed: it saw
// the death (ErrKernelDied) or, when the host saw it first, ran in a fresh
// kernel and reported the death in Result.Restarted.
func diedOrReported(t *testing.T, what string, res *kernel.Result, err error) {
	t.Helper()
	switch {
	case errors.Is(err, kernel.ErrKernelDied):
	case err == nil && res.Restarted != nil:
	default:
		t.Fatalf("%s: %v (result %+v), want ErrKernelDied or a reported restart", what, err, res)
	}
}

// BenchmarkZygoteStart is start to first result of a kernel forked by the
// zygote, beside a cold start, alternating in one run.
func BenchmarkZygoteStart(b *testing.B) {
	py := testenv.NeedsPython(b)
	z, err := kernel.NewZygote(context.Background(), py, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "LANG=C.UTF-8"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer z.Close()
	ctx := context.Background()
	once := func(l kernel.Launcher) time.Duration {
		t0 := time.Now()
		k, err := kernel.Start(ctx, &kernel.Options{Python: py, Dir: b.TempDir(), Launcher: l})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := k.Execute(ctx, "1", nil); err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		k.Close()
		return d
	}
	var forked, cold []time.Duration
	for range b.N {
		forked = append(forked, once(z))
		cold = append(cold, once(kernel.DirectLauncher{}))
	}
	slices.Sort(forked)
	slices.Sort(cold)
	f, c := forked[len(forked)/2], cold[len(cold)/2]
	b.ReportMetric(float64(f.Microseconds())/1000, "forked-ms")
	b.ReportMetric(float64(c.Microseconds())/1000, "cold-ms")
	b.ReportMetric(float64(f)/float64(c), "ratio")
}

// zygoteWrapper returns an interpreter for a zygote whose next start can
// be made to hang: a script that runs py, or, once the returned function
// has been called, a Python that sleeps instead of importing ipykernel
// (a restart that never finishes).
func zygoteWrapper(t *testing.T, py string) (string, func()) {
	t.Helper()
	dir := t.TempDir()
	marker := dir + "/hang"
	wrapper := dir + "/python3"
	script := "#!/bin/sh\nif [ -e " + marker + " ]; then exec " + py + " -c 'import time; time.sleep(600)'; fi\nexec " + py + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper, func() {
		if err := os.WriteFile(marker, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// closeDuringStart starts a kernel from z in the background, waits until
// stuck() says that start is stuck in the zygote, then checks that Close
// returns within its bound, and that the start gives up too.
func closeDuringStart(t *testing.T, z *kernel.Zygote, py string, stuck func() bool) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		k, err := kernel.Start(context.Background(), &kernel.Options{Python: py, Dir: t.TempDir(), Launcher: z})
		if err == nil {
			k.Close()
		}
		errc <- err
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !stuck() {
		select {
		case err := <-errc:
			t.Fatalf("the start ended before Close: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the start did not reach the zygote")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t0 := time.Now()
	z.Close()
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("Close took %v behind a Start", d)
	}
	select {
	case err := <-errc:
		if err == nil {
			t.Error("the start succeeded after Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the start did not give up after Close")
	}
}

// TestZygoteCloseDuringRestart: Close during a Start that is restarting
// a dead zygote (whose imports never finish here) returns at once; it
// does not wait the restart's minute.
func TestZygoteCloseDuringRestart(t *testing.T) {
	testenv.CheckGoroutines(t)
	py := testenv.NeedsPython(t)
	wrapper, hang := zygoteWrapper(t, py)
	z, err := kernel.NewZygote(context.Background(), wrapper, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	old := kernel.ZygotePid(z)
	hang()
	syscall.Kill(old, syscall.SIGKILL)
	for !kernel.ZygoteDead(z) {
		time.Sleep(10 * time.Millisecond)
	}
	var sleeper int
	closeDuringStart(t, z, wrapper, func() bool {
		for _, p := range testenv.Processes() {
			if p.PPid == os.Getpid() && p.Pid != old && strings.Contains(p.Cmdline, "time.sleep(600)") {
				sleeper = p.Pid
				// and the start waits for its imports
				return blockedIn("(*Zygote).proc")
			}
		}
		return false
	})
	waitGone(t, sleeper, "the restarting zygote")
}

// TestZygoteCloseDuringFork: Close during a Start that waits for the
// zygote's fork (the zygote is stopped, so the answer never comes)
// returns at once; it does not wait the fork's 30 s.
func TestZygoteCloseDuringFork(t *testing.T) {
	testenv.CheckGoroutines(t)
	py := testenv.NeedsPython(t)
	z, err := kernel.NewZygote(context.Background(), py, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	zpid := kernel.ZygotePid(z)
	if err := testenv.Suspend(zpid); err != nil {
		t.Fatal(err)
	}
	closeDuringStart(t, z, py, func() bool { return blockedIn("(*Zygote).Start") })
	waitGone(t, zpid, "the stopped zygote")
}

// blockedIn reports whether a goroutine is blocked in a select right in
// fn, a function of package kernel as stacks name it ("(*Zygote).Start"):
// the marker that a start has reached the wait a test means to interrupt.
func blockedIn(fn string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		lines := strings.Split(g, "\n")
		if !strings.Contains(lines[0], "[select") {
			continue
		}
		// The first frame that is not the runtime's (older tracebacks show
		// gopark and selectgo; function lines are the untabbed ones).
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "runtime.") {
				continue
			}
			if strings.Contains(l, "/internal/kernel."+fn+"(") {
				return true
			}
			break
		}
	}
	return false
}

// waitGone waits until process pid has gone (Close kills it; the kill is
// delivered, and the process reaped, asynchronously), and fails t after a
// bound.
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); testenv.Alive(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("%s %d outlived Close", what, pid)
			return
		}
	}
}
