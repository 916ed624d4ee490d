package kernel_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv"
	"github.com/ipybox/ipybox/kernel"
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

func TestSmoke(t *testing.T) {
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
}

// TestHeartbeatDetectsHang: a stopped kernel keeps its process and sockets,
// so only the heartbeat can tell it is gone.
func TestHeartbeatDetectsHang(t *testing.T) {
	k := startKernel(t, &kernel.Options{HeartbeatInterval: 200 * time.Millisecond, HeartbeatMisses: 3})
	ctx := context.Background()
	pid := k.Pid()
	time.AfterFunc(300*time.Millisecond, func() { syscall.Kill(pid, syscall.SIGSTOP) })
	begin := time.Now()
	_, err := k.Execute(ctx, "import time\ntime.sleep(30)", nil)
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
	go func() {
		_, err := k.Execute(context.Background(), "import time\ntime.sleep(30)", nil)
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	begin := time.Now()
	k.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Error("the running cell reported success")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Execute still blocked after Close")
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("Close took %v", d)
	}
}
