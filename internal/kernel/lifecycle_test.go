package kernel_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/testenv"
)

// waitDead waits (bounded) until the host has seen k's kernel die.
func waitDead(t *testing.T, k *kernel.Kernel) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); k.Alive(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the host did not see the kernel die within 15s")
		}
	}
}

// TestDeathBetweenCallsIsReported: a kernel that dies between calls
// (killed, or exit() in a cell) is reported by the next call's Result,
// once, with when and why; a death a call already returned is not
// reported again; an explicit Restart reports nothing.
func TestDeathBetweenCallsIsReported(t *testing.T) {
	t.Parallel()
	k := startKernel(t, &kernel.Options{HeartbeatInterval: 200 * time.Millisecond})
	ctx := context.Background()
	run := func(code string) *kernel.Result {
		t.Helper()
		res, err := k.Execute(ctx, code, nil)
		if err != nil {
			t.Fatalf("%s: %v", code, err)
		}
		return res
	}
	run("x = 1")
	before := time.Now()
	testenv.Signal(k.Pid(), syscall.SIGKILL)
	waitDead(t, k)
	res := run("print('fresh' if 'x' not in globals() else 'old')")
	if res.Text != "fresh" {
		t.Errorf("after the death: %q", res.Text)
	}
	if d := res.Restarted; d == nil || !strings.Contains(d.Cause, "killed") || d.At.Before(before.Add(-time.Second)) || !strings.Contains(d.Error(), d.At.Format("15:04:05")) {
		t.Errorf("Restarted = %v, want the death by SIGKILL with its time", d)
	}
	t.Logf("reported: %v", res.Restarted)
	if res.Restarted != nil && strings.Contains(res.Restarted.Cause, "--existing") {
		t.Errorf("the report quotes the kernel's start-up banner: %v", res.Restarted)
	}
	if res := run("pass"); res.Restarted != nil {
		t.Errorf("the death was reported twice: %v", res.Restarted)
	}

	// exit() in a cell: the cell itself succeeds; the next call says so.
	run("exit()")
	waitDead(t, k)
	if res := run("pass"); res.Restarted == nil {
		t.Error("a kernel ended by exit() was replaced without a word")
	}

	// A death a call returned as its error is not reported again.
	_, err := k.Execute(ctx, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)", nil)
	if !errors.Is(err, kernel.ErrKernelDied) {
		t.Fatalf("a cell that kills its kernel: err = %v", err)
	}
	if res := run("pass"); res.Restarted != nil {
		t.Errorf("a death already returned was reported again: %v", res.Restarted)
	}

	// An explicit Restart is no news either.
	testenv.Signal(k.Pid(), syscall.SIGKILL)
	waitDead(t, k)
	if err := k.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if res := run("pass"); res.Restarted != nil {
		t.Errorf("after Restart: %v", res.Restarted)
	}
}

// TestImportGuardLifted: the kernel starts without the terminal shell and
// prompt_toolkit, and user code can still import and use all that the
// start kept out (IPython.terminal.embed, debugpy's absence is not a
// block, jedi), directly and from a forked kernel.
func TestImportGuardLifted(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	z, err := kernel.NewZygote(context.Background(), py, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { z.Close() })
	for _, tc := range []struct {
		name string
		opts *kernel.Options
	}{
		{"direct", nil},
		{"zygote", &kernel.Options{Launcher: z}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := startKernel(t, tc.opts)
			res, err := k.Execute(context.Background(), "import sys\n"+
				"print('at start:', 'prompt_toolkit' in sys.modules, 'IPython.terminal.embed' in sys.modules)\n"+
				"import IPython.terminal.embed as e, IPython\n"+
				"print('real:', hasattr(e, 'InteractiveShellEmbed'), callable(IPython.embed))\n"+
				"import importlib.util\n"+
				"print('jedi importable:', importlib.util.find_spec('jedi') is not None or 'no jedi installed')", nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"at start: False False", "real: True True", "jedi importable: True"} {
				if !strings.Contains(res.Text, want) {
					t.Errorf("output %q, want %q", res.Text, want)
				}
			}
		})
	}
}
