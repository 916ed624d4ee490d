package kernel_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/testenv"
)

// The changes of ipykernel 7 (PyPI's; Debian's is 6.17) that ipybox
// handles, one test each. scripts/test.sh runs the kernel-facing tests
// with both stacks (IPYBOX_PYTHON names the second); each test here says
// what each version does, so that both runs check something.

// ipykernelVersion returns the major and minor version of the ipykernel
// that py imports.
func ipykernelVersion(t *testing.T, py string) (major, minor int) {
	t.Helper()
	out, err := exec.Command(py, "-c", "import ipykernel; print(ipykernel.__version__)").Output()
	if err != nil {
		t.Fatalf("%s: ipykernel's version: %v", py, err)
	}
	v := strings.TrimSpace(string(out))
	if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil {
		t.Fatalf("ipykernel version %q: %v", v, err)
	}
	t.Logf("ipykernel %s (%s)", v, py)
	return major, minor
}

// unrouted records the message types the kernel client logged as meant for
// no pending request.
type unrouted struct {
	mu    sync.Mutex
	types []string
}

func (u *unrouted) Enabled(context.Context, slog.Level) bool { return true }
func (u *unrouted) WithAttrs([]slog.Attr) slog.Handler       { return u }
func (u *unrouted) WithGroup(string) slog.Handler            { return u }
func (u *unrouted) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "kernel: message for no pending request" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "type" {
			u.mu.Lock()
			u.types = append(u.types, a.Value.String())
			u.mu.Unlock()
		}
		return true
	})
	return nil
}

func (u *unrouted) seen(typ string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, s := range u.types {
		if s == typ {
			return true
		}
	}
	return false
}

// TestIPykernel7Welcome: ipykernel ≥ 7.2 publishes iopub_welcome (with no
// parent) when a client subscribes to IOPub. It must neither count as the
// handshake's IOPub message (which must be the kernel_info request's own)
// nor reach a cell's output; it is dropped, and logged at debug level.
// Older kernels send none.
func TestIPykernel7Welcome(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	major, minor := ipykernelVersion(t, py)
	log := &unrouted{}
	k := startKernel(t, &kernel.Options{Logger: slog.New(log)})
	res, err := k.Execute(context.Background(), "print('first')", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "first" {
		t.Errorf("the first cell's text = %q, want %q", res.Text, "first")
	}
	want := major > 7 || major == 7 && minor >= 2
	if got := log.seen("iopub_welcome"); got != want {
		t.Errorf("iopub_welcome seen = %v, want %v for ipykernel %d.%d (unrouted messages: %v)", got, want, major, minor, log.types)
	}
}

// TestIPykernel7Subshells: ipykernel 7 announces kernel subshells
// (kernel_info_reply's supported_features) and runs a shell-channel
// thread beside the main one. ipybox sends every request on the main
// shell, where cells still run one at a time and in order, and a
// cell's busy/idle and output keep its parent: two cells sent at once
// do not mix their output.
func TestIPykernel7Subshells(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	major, _ := ipykernelVersion(t, py)
	k := startKernel(t, nil)
	ctx := context.Background()
	res, err := k.Execute(ctx, "from ipykernel.kernelbase import Kernel\n"+
		"k = get_ipython().kernel\n"+
		"print(getattr(k, '_supports_kernel_subshells', False))", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "False"
	if major >= 7 {
		want = "True"
	}
	if res.Text != want {
		t.Errorf("the kernel supports subshells: %q, want %s for ipykernel %d", res.Text, want, major)
	}
	var wg sync.WaitGroup
	texts := make([]string, 4)
	errs := make([]error, 4)
	for i := range texts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := k.Execute(ctx, fmt.Sprintf("import time\nfor j in range(3):\n    print('cell%d', j, flush=True)\n    time.sleep(0.02)", i), nil)
			if err == nil {
				texts[i] = r.Text
			}
			errs[i] = err
		}()
	}
	wg.Wait() // bound: each Execute ends with its cell
	for i, txt := range texts {
		if errs[i] != nil {
			t.Errorf("cell %d: %v", i, errs[i])
			continue
		}
		want := fmt.Sprintf("cell%d 0\ncell%d 1\ncell%d 2", i, i, i)
		if txt != want {
			t.Errorf("cell %d's text = %q, want %q (output of one cell in another's?)", i, txt, want)
		}
	}
}

// TestIPykernel7ControlThread: ipykernel 7 answers the control channel
// from a thread of its own, and runs on anyio. An interrupt is still
// SIGINT to the process group, which must reach a cell blocked in
// time.sleep and in a thread's join; the kernel keeps its state, top-level
// await runs on the kernel's event loop, and a shutdown ends the kernel
// promptly. (A cell awaiting asyncio.sleep ignores SIGINT on both 6.17 and
// 7.x: ipybox restarts the kernel then, as for any cell that ignores an
// interrupt; TestIgnoredInterruptRestarts.)
func TestIPykernel7ControlThread(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	ipykernelVersion(t, py)
	k := startKernel(t, nil)
	ctx := context.Background()
	if _, err := k.Execute(ctx, "kept = 42", nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, code string }{
		{"time.sleep", "import time\ntime.sleep(60)"},
		{"a thread's join", "import threading, time\nth = threading.Thread(target=time.sleep, args=(60,), daemon=True)\nth.start()\nth.join()"},
	} {
		start := time.Now()
		_, err := k.Execute(ctx, c.code, &kernel.ExecOptions{Timeout: time.Second})
		var te *kernel.TimeoutError
		if !errors.As(err, &te) {
			t.Fatalf("%s: err = %v, want a TimeoutError", c.name, err)
		}
		if te.Restarted {
			t.Errorf("%s: the interrupt did not stop the cell; the kernel was restarted", c.name)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("%s: the interrupt took %v", c.name, d)
		}
	}
	res, err := k.Execute(ctx, "import asyncio\nawait asyncio.sleep(0)\nkept", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "42" {
		t.Errorf("state after the interrupts: %q, want 42", res.Text)
	}
	start := time.Now()
	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Close took %v: the shutdown request was not answered promptly", d)
	}
}
