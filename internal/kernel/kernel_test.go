package kernel_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/testenv"
)

func startKernel(t *testing.T, opts *kernel.Options) *kernel.Kernel {
	t.Helper()
	py := testenv.NeedsPython(t)
	var o kernel.Options
	if opts != nil {
		o = *opts
	}
	o.Python = py
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k, err := kernel.Start(ctx, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// sleepCell prints "sleeping" and sleeps for 30 s: a cell to interrupt
// when its "sleeping" arrives, which is while it sleeps. The print is not
// flushed: ipykernel sends it from its IO thread 0.2 s later, when the cell
// is in time.sleep. (A flush waits for the IO thread; an interrupt landing
// in that wait can surface as "RuntimeError: release unlocked lock".) And the
// print and the sleep are one statement, a call, so the interrupt cannot
// fall between two statements, where IPython can fail to format the
// KeyboardInterrupt.
const sleepCell = "import time\ndef _sleep():\n    print('sleeping')\n    time.sleep(30)\n_sleep()"

func TestSmoke(t *testing.T) {
	t.Parallel()
	start := time.Now()
	k := startKernel(t, nil)
	t.Logf("start: %v", time.Since(start))
	ctx := context.Background()
	res, err := k.Execute(ctx, "print('hi')\n2+2", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "hi\n4" {
		t.Errorf("text = %q", res.Text)
	}
	_, err = k.Execute(ctx, "1/0", nil)
	var pe *kernel.PythonError
	if !errors.As(err, &pe) || pe.Name != "ZeroDivisionError" {
		t.Fatalf("err = %v", err)
	}
	t.Log(pe.TracebackText())

	// IPython sends no error message when it cannot format the traceback
	// (as with a KeyboardInterrupt that lands between two statements); the
	// execute_reply still names the exception.
	_, err = k.Execute(ctx, "class Unshown(Exception):\n    def _render_traceback_(self):\n        raise ValueError('no')\nraise Unshown('boom')", nil)
	if !errors.As(err, &pe) || pe.Name != "Unshown" || pe.Value != "boom" {
		t.Fatalf("an exception IPython cannot format: err = %v, want Unshown: boom", err)
	}
}

// TestHeartbeatDetectsHang: a stopped kernel keeps its process and sockets,
// so only the heartbeat can tell it is gone.
func TestHeartbeatDetectsHang(t *testing.T) {
	t.Parallel()
	k := startKernel(t, &kernel.Options{HeartbeatInterval: 200 * time.Millisecond, HeartbeatMisses: 3})
	ctx := context.Background()
	pid := k.Pid()
	// Stop the kernel once the cell runs.
	var begin time.Time
	var once sync.Once
	_, err := k.Execute(ctx, "import time\nprint('running', flush=True)\ntime.sleep(30)", &kernel.ExecOptions{OnEvent: func(e kernel.Event) {
		if o, ok := e.(*kernel.Output); ok && strings.Contains(o.Text, "running") {
			once.Do(func() {
				begin = time.Now()
				testenv.Suspend(pid)
			})
		}
	}})
	if !errors.Is(err, kernel.ErrKernelDied) || !strings.Contains(err.Error(), "heartbeat") {
		t.Fatalf("err = %v, want ErrKernelDied from the heartbeat", err)
	}
	if d := time.Since(begin); d > 3*time.Second {
		t.Errorf("detected after %v", d)
	}
	res, err := k.Execute(ctx, "1 + 1", nil)
	if err != nil || res.Text != "2" {
		t.Fatalf("next call: %v, %+v", err, res)
	}
	if k.Pid() == pid {
		t.Error("the hung kernel was not replaced")
	}
}

func TestCloseDuringCell(t *testing.T) {
	testenv.CheckGoroutines(t)
	k := startKernel(t, nil)
	done := make(chan error, 1)
	started := make(chan struct{})
	var once sync.Once
	go func() {
		_, err := k.Execute(context.Background(), "import time\nprint('started', flush=True)\ntime.sleep(30)", &kernel.ExecOptions{
			OnEvent: func(e kernel.Event) {
				if s, ok := e.(*kernel.Output); ok && strings.Contains(s.Text, "started") {
					once.Do(func() { close(started) })
				}
			},
		})
		done <- err
	}()
	select {
	case <-started: // the cell runs: Close now ends a running cell
	case err := <-done:
		t.Fatalf("the cell ended before Close: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the cell did not start within 30s")
	}
	begin := time.Now()
	k.Close()
	select {
	case err := <-done:
		if !errors.Is(err, kernel.ErrClosed) {
			t.Errorf("the running cell got %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Execute still blocked after Close")
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("Close took %v", d)
	}
}

// TestCloseDuringRestart: Close does not wait for a kernel start in
// progress (up to StartTimeout): the start gives up, and Restart returns
// ErrClosed.
func TestCloseDuringRestart(t *testing.T) {
	testenv.CheckGoroutines(t)
	py := testenv.NeedsPython(t)
	dir := t.TempDir()
	// An interpreter that, once "slow" exists, says it began and then
	// takes 20 s to start.
	wrapper := filepath.Join(dir, "python3")
	script := "#!/bin/sh\nif [ -e " + dir + "/slow ]; then /usr/bin/touch " + dir + "/began; /bin/sleep 20; fi\nexec " + py + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k, err := kernel.Start(ctx, &kernel.Options{Python: wrapper, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	os.WriteFile(filepath.Join(dir, "slow"), nil, 0o644)
	restarted := make(chan error, 1)
	go func() { restarted <- k.Restart(context.Background()) }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "began")); err == nil {
			break // the restart is starting the slow interpreter
		}
		if time.Now().After(deadline) {
			t.Fatal("the restart did not begin within 30s")
		}
	}
	begin := time.Now()
	if err := k.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if d := time.Since(begin); d > 3*time.Second {
		t.Errorf("Close took %v behind a start in progress", d)
	}
	select {
	case err := <-restarted:
		if !errors.Is(err, kernel.ErrClosed) {
			t.Errorf("Restart = %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Restart still blocked after Close")
	}
}
