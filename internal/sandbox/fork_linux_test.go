package sandbox

import (
	"context"
	"os"
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

// sandboxZygote returns the package's sandbox fork server for python.
func sandboxZygote(t testing.TB) *kernel.Zygote {
	t.Helper()
	needSandbox(t)
	testZygote.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		testZygote.z, testZygote.err = kernel.NewSandboxZygote(ctx, python, nil, nil)
	})
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
