package ipybox_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/pyruntime"
	"github.com/ipybox/ipybox/internal/testenv"
)

// privateDirty is Python that prints the process's private dirty memory
// in kB, from its own smaps_rollup.
const privateDirty = `def _pd():
    for l in open("/proc/self/smaps_rollup"):
        if l.startswith("Private_Dirty:"):
            return int(l.split()[1])
`

// kbs parses the whitespace-separated integers a cell printed.
func kbs(t *testing.T, text string) []int {
	t.Helper()
	var out []int
	for _, f := range strings.Fields(text) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("output %q: want integers", text)
		}
		out = append(out, n)
	}
	return out
}

// forkedKinds are kernels forked from a fork server: unsandboxed and
// sandboxed.
func forkedKinds(t *testing.T) map[string]func(t *testing.T) *ipybox.Executor {
	kinds := attack10Kinds(t)
	for k := range kinds {
		if k != "forked" {
			delete(kinds, k)
		}
	}
	if _, err := exec.LookPath("bwrap"); err == nil {
		kinds["sandboxed-forked"] = func(t *testing.T) *ipybox.Executor {
			return start(t, &ipybox.Options{Sandbox: ipybox.DefaultSandbox(), Zygote: sandboxZygote(t, "")})
		}
	}
	return kinds
}

// TestForkServerFreezesHeap: a full garbage collection in a forked kernel
// does not copy the fork server's heap (cowfreeze.py). Without the
// freeze, one gc.collect() made an idle sandboxed kernel's private memory
// 7.4 MB larger.
func TestForkServerFreezesHeap(t *testing.T) {
	t.Parallel()
	for name, mk := range forkedKinds(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ex := mk(t)
			out := run(t, ex, privateDirty+`import gc
before = _pd()
gc.collect()
print(gc.get_freeze_count(), before, _pd())`).Text
			v := kbs(t, out)
			if len(v) != 3 {
				t.Fatalf("output %q: want the frozen count and two sizes", out)
			}
			if v[0] < 10000 {
				t.Errorf("gc.get_freeze_count() = %d in a forked kernel, want the fork server's objects (tens of thousands) frozen", v[0])
			}
			if grew := v[2] - v[1]; grew > 3000 {
				t.Errorf("a full collection made the kernel's private memory %d kB larger (%d -> %d kB), want under 3000: it copied the fork server's heap", grew, v[1], v[2])
			}
		})
	}
}

// TestIdleTrim: once a kernel has been idle for 2 s after a cell, the
// free pages of its C heap go back to the system (idletrim.py). The cell
// makes 500 blocks of 100 kB (malloc's, under its mmap threshold) and
// frees every other one: 25 MB of holes between live blocks, which malloc
// keeps until a trim.
func TestIdleTrim(t *testing.T) {
	t.Parallel()
	kinds := attack10Kinds(t)
	maps.Copy(kinds, forkedKinds(t))
	for name, mk := range kinds {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ex := mk(t)
			out := run(t, ex, privateDirty+`base = _pd()
blocks = [b"x" * 100_000 for _ in range(500)]
del blocks[::2]
print(base, _pd())`).Text
			v := kbs(t, out)
			if len(v) != 2 {
				t.Fatalf("output %q: want two sizes", out)
			}
			base, holes := v[0], v[1]
			if holes-base < 40000 {
				t.Fatalf("50 MB of blocks, every other one freed: %d kB over the start, want the holes kept (40000 kB at least): the test shows nothing", holes-base)
			}
			time.Sleep(3 * time.Second)
			after := kbs(t, run(t, ex, privateDirty+"print(_pd())").Text)
			if len(after) != 1 {
				t.Fatalf("want one size")
			}
			if after[0]-base > 37000 {
				t.Errorf("private memory %d kB at the start, %d kB with 25 MB of holes among 25 MB of blocks, %d kB after 3 s idle: want the holes given back (at most 37000 kB over the start)", base, holes, after[0])
			}
		})
	}
}

// TestSandboxInitEnv: the sandbox's init, which runs before the filter,
// the guard and Landlock, starts with nothing of ipybox's environment nor
// the session's (initEnv; bwrap sets PWD, the folder it starts it in),
// and the kernel gets the session's.
func TestSandboxInitEnv(t *testing.T) {
	t.Parallel()
	testenv.NeedsTool(t, "bwrap")
	if os.Geteuid() != 0 {
		t.Skip("skipped (needs root): the init is not dumpable, and only root reads its environment from the host")
	}
	for name, o := range map[string]func(t *testing.T) *ipybox.Options{
		"cold": func(t *testing.T) *ipybox.Options {
			return &ipybox.Options{Sandbox: ipybox.DefaultSandbox(), KernelEnv: map[string]string{"INIT_ENV_MARK": "here"}}
		},
		"forked": func(t *testing.T) *ipybox.Options {
			return &ipybox.Options{Sandbox: ipybox.DefaultSandbox(), Zygote: sandboxZygote(t, ""), KernelEnv: map[string]string{"INIT_ENV_MARK": "here"}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ex := start(t, o(t))
			out := strings.Fields(run(t, ex, `import os; print(os.readlink("/proc/self/ns/pid"), os.environ.get("INIT_ENV_MARK", "unset"))`).Text)
			if len(out) != 2 {
				t.Fatalf("output %q: want the pid namespace and the session's variable", out)
			}
			if out[1] != "here" {
				t.Errorf("the kernel sees INIT_ENV_MARK=%s, want the session's value", out[1])
			}
			var inits []string
			for _, p := range testenv.Descendants(os.Getpid()) {
				ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", p.Pid))
				if err != nil || ns != out[0] || !strings.Contains(p.Cmdline, " __sandbox-init run ") {
					continue
				}
				env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.Pid))
				if err != nil {
					t.Fatalf("the init's environment: %v", err)
				}
				inits = append(inits, string(env))
			}
			if len(inits) != 1 {
				t.Fatalf("the environments of the inits in the kernel's pid namespace: %q, want one", inits)
			}
			// bwrap sets PWD, the folder it starts the init in.
			vars := strings.Split(strings.TrimSuffix(inits[0], "\x00"), "\x00")
			if slices.ContainsFunc(vars, func(kv string) bool { return !strings.HasPrefix(kv, "PWD=") }) {
				t.Errorf("the init's environment is %q, want bwrap's PWD alone", vars)
			}
		})
	}
}

// TestForkedKernelsShareInitCode: a kernel forked from a fork server
// takes the definitions of ipybox's init code from the fork server
// (pyruntime.Preload), a cold one runs them itself, and init code whose
// source is not the fork server's (here: a kernel that changed the mark)
// runs its own source, not the module it finds.
func TestForkedKernelsShareInitCode(t *testing.T) {
	t.Parallel()
	kinds := attack10Kinds(t)
	delete(kinds, "ipykernel7")
	maps.Copy(kinds, forkedKinds(t))
	const probe = `import sys
m = sys.modules.get("_ipybox_kernel_init")
print(m is not None and len(getattr(m, "__ipybox_hash__", "")) == 16, any(getattr(cb, "__name__", "") == "_ipybox_restore_cwd" for cb in get_ipython().events.callbacks["post_run_cell"]))`
	for name, mk := range kinds {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ex := mk(t)
			want := "False True" // cold: its own definitions; the init ran
			if strings.Contains(name, "forked") {
				want = "True True"
			}
			if got := run(t, ex, probe).Text; got != want {
				t.Fatalf("preloaded init module, init ran: %q, want %q", got, want)
			}
			if !strings.Contains(name, "forked") {
				return
			}
			// A module whose mark is not this source's is not used: its
			// setup would say so.
			run(t, ex, `import sys
m = sys.modules["_ipybox_kernel_init"]
m.__ipybox_hash__ = "0" * 16
def setup(config):
    raise SystemExit("the stale module's setup ran")
m.setup = setup`)
			code := pyruntime.InitCode(pyruntime.InitConfig{WorkDir: ex.Workspace()})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := ex.Execute(ctx, code, nil)
			if err != nil || strings.Contains(res.Text, "stale") {
				t.Fatalf("init code with a stale module: %v, %+v", err, res)
			}
		})
	}
}

// TestForkServerCompactsModuleNames: in a forked kernel, sys.modules'
// names lie on a few pages (cowfreeze.py), so that a set of them (every
// kernel's start makes one) copies those pages alone; in a cold kernel
// they lie where the imports made them. Modules are found by name as
// before.
func TestForkServerCompactsModuleNames(t *testing.T) {
	t.Parallel()
	kinds := forkedKinds(t)
	kinds["cold"] = func(t *testing.T) *ipybox.Executor { return start(t, nil) }
	const probe = `import sys, json, importlib
pages = len({id(k) >> 12 for k in sys.modules})
print(len(sys.modules) > 400, pages, importlib.import_module("json") is json, sys.modules["ipykernel.kernelapp"].__name__)`
	for name, mk := range kinds {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ex := mk(t)
			f := strings.Fields(run(t, ex, probe).Text)
			if len(f) != 4 || f[0] != "True" || f[2] != "True" || f[3] != "ipykernel.kernelapp" {
				t.Fatalf("probe: %q, want over 400 modules, found by name", f)
			}
			pages, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: the names of sys.modules lie on %d pages", name, pages)
			if name == "cold" && pages < 100 {
				t.Errorf("a cold kernel's module names lie on %d pages, want 100 or more: the probe shows nothing", pages)
			}
			if name != "cold" && pages > 60 {
				t.Errorf("a forked kernel's module names lie on %d pages, want at most 60", pages)
			}
		})
	}
}
