package sandbox

import (
	"context"
	"fmt"
	"os"
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
