package sandbox

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestKernelInSandbox runs a real ipykernel through the Launcher: a cell
// runs in the workspace, the sandbox holds, an interrupt (SIGINT through
// Process.Signal) stops a running cell without a restart, and Close is
// quick.
func TestKernelInSandbox(t *testing.T) {
	testenv.CheckGoroutines(t)
	py := testenv.NeedsPython(t)
	x := newSbx(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	start := func(l kernel.Launcher) (*kernel.Kernel, time.Duration) {
		t0 := time.Now()
		k, err := kernel.Start(ctx, &kernel.Options{Python: py, Launcher: l, Dir: x.ws})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := k.Execute(ctx, "pass", nil); err != nil {
			k.Close()
			t.Fatal(err)
		}
		return k, time.Since(t0)
	}
	// Each kind starts twice; the second start has the interpreter's
	// answers cached, as every start after the first does.
	var dt, st time.Duration
	for i := 0; i < 2; i++ {
		d, t1 := start(kernel.DirectLauncher{})
		d.Close()
		s, t2 := start(x)
		s.Close()
		dt, st = t1, t2
	}
	t.Logf("start to first result: direct %v, sandboxed %v (%.2fx; a log, not a check: the machine is shared)",
		dt, st, float64(st)/float64(dt))

	k, _ := start(x)
	defer k.Close()
	res, err := k.Execute(ctx, fmt.Sprintf(`
import os, socket
print("cwd ok" if os.getcwd() == %q else "cwd " + os.getcwd())
try:
    open("/etc/shadow").read(); print("shadow readable")
except OSError:
    print("shadow denied")
try:
    socket.create_connection(("1.1.1.1", 443), timeout=2); print("network open")
except OSError:
    print("network closed")
`, x.ws), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"cwd ok", "shadow denied", "network closed"} {
		if !strings.Contains(res.Text, w) {
			t.Errorf("cell output %q, want %q", res.Text, w)
		}
	}

	// The cell's budget runs out; the kernel interrupts it and lives on.
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
	t0 := time.Now()
	if err := k.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	t.Logf("sandboxed kernel closed in %v", time.Since(t0))
}
