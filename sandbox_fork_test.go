//go:build linux

package ipybox_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
)

// TestSandboxForkedExecutor: an Executor whose sandboxed kernels are
// forked (NewSandboxZygote) runs cells, tool-server calls and resets in a
// sandbox of its own, and two of them share no process.
func TestSandboxForkedExecutor(t *testing.T) {
	z := sandboxZygote(t, "")
	a := startSandboxed(t, &ipybox.Options{Zygote: z})
	b := startSandboxed(t, &ipybox.Options{Zygote: z, WorkDir: a.Workspace()})
	probe := `import os
print(sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()), os.getppid())
try:
    open("/etc/shadow"); print("shadow readable")
except OSError:
    print("shadow denied")
`
	for _, ex := range []*ipybox.Executor{a, b} {
		got := run(t, ex, probe).Text
		if !strings.Contains(got, "[1] 0") || !strings.Contains(got, "shadow denied") {
			t.Errorf("forked kernel sees %q; want only its init, and no /etc/shadow", got)
		}
	}
	run(t, a, "x = 41")
	if got := run(t, a, "x + 1").Text; got != "42" {
		t.Errorf("state: %q", got)
	}
	if got := run(t, b, "print('x' in dir())").Text; !strings.Contains(got, "False") {
		t.Errorf("a sibling's state is visible: %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t0 := time.Now()
	if err := a.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	got := run(t, a, "print('x' in dir())").Text
	t.Logf("reset to next result: %v", time.Since(t0))
	if !strings.Contains(got, "False") {
		t.Errorf("after reset: %q", got)
	}
	if got := run(t, a, "!echo shell-ok").Text; !strings.Contains(got, "shell-ok") {
		t.Errorf("shell: %q", got)
	}
	_ = os.Getpid
}

// probeShell prints what a kernel's shell took from its session and its
// start (the run directory shown as RUN): a forked sandboxed kernel,
// whose shell the fork server built before any session (issue 38), must
// print what a cold one prints.
const probeShell = `
import os, sys, builtins
ip = get_ipython()
run = os.path.dirname(os.path.dirname(os.environ["IPYTHONDIR"]))
def show(k, v):
    print(k, repr(v).replace(run, "RUN"))
for k in ("starting_dir", "home_dir", "ipython_dir"):
    show(k, getattr(ip, k))
show("profile_dir", ip.profile_dir.location)
show("folders", sorted(os.path.relpath(os.path.join(d, n), ip.ipython_dir) for d, ds, fs in os.walk(ip.ipython_dir) for n in ds + fs))
show("logger.home_dir", ip.logger.home_dir)
show("dir_hist", [str(p) for p in ip.history_manager.dir_hist])
show("history", (ip.history_manager.enabled, ip.history_manager.hist_file))
show("env", sorted(os.environ))
show("env.pager", [os.environ.get(k) for k in ("TERM", "CLICOLOR", "PAGER", "GIT_PAGER", "HOME", "MPLBACKEND")])
show("cwd", os.getcwd())
show("sys.path", sys.path)
show("sys.argv", sys.argv)
show("main", (sys.modules["__main__"] is ip.user_module, ip.user_module.__dict__ is ip.user_ns))
show("builtins", sorted(vars(builtins)))
show("parent", (type(ip.parent).__name__, ip.parent is ip.kernel, type(ip.kernel.parent).__name__))
show("config", sorted((k, sorted(v.items())) for k, v in ip.config.items()))
show("colors", ip.colors)
show("user_ns", sorted(ip.user_ns))
show("user_ns_hidden", sorted(ip.user_ns_hidden))
show("dumb_terminal", ip.Completer.dumb_terminal)
show("magics", sorted(ip.magics_manager.magics["line"]) + sorted(ip.magics_manager.magics["cell"]))
show("extensions", sorted(ip.extension_manager.loaded))
show("events", sorted((k, [getattr(f, "__qualname__", "?") for f in v]) for k, v in ip.events.callbacks.items()))
show("displayhook", (type(sys.displayhook).__name__, ip.displayhook.session is ip.kernel.session))
show("display_pub", ip.display_pub.session is ip.kernel.session)
show("compile", type(ip.compile).__name__)
show("instances", (type(ip).initialized(), type(ip).instance() is ip))
show("db", str(ip.db.root))
import gc
gc.unfreeze()  # the fork server's objects (cowfreeze.py): get_objects lists the frozen only after this
gc.collect()
def template(v):
    return isinstance(v, (str, os.PathLike)) and "/ipybox-shell-" in str(v)
show("template paths", sorted({str(v) for o in gc.get_objects() if isinstance(o, (dict, list, tuple)) for v in (o.values() if isinstance(o, dict) else o) if template(v)} | {str(o) for o in gc.get_objects() if isinstance(o, os.PathLike) and template(o)}))
`

// compareColdForked runs probe in a cold sandboxed kernel and in a forked
// one (the second kernel of its fork server, the usual one), in one
// workspace, and reports each line they print differently; the cold
// kernel's output must hold marker, so that a probe that failed is not
// taken for two that agree. It returns what the forked kernel printed.
func compareColdForked(t *testing.T, probe, marker string) string {
	t.Helper()
	z := sandboxZygote(t, "")
	cold := startSandboxed(t, nil)
	run(t, startSandboxed(t, &ipybox.Options{Zygote: z, WorkDir: cold.Workspace()}), "1")
	forked := startSandboxed(t, &ipybox.Options{Zygote: z, WorkDir: cold.Workspace()})
	c, f := run(t, cold, probe).Text, run(t, forked, probe).Text
	if !strings.Contains(c, marker) {
		t.Fatalf("the probe printed:\n%s", c)
	}
	cl, fl := strings.Split(c, "\n"), strings.Split(f, "\n")
	if len(cl) != len(fl) {
		t.Fatalf("cold:\n%s\nforked:\n%s", c, f)
	}
	for i := range cl {
		if cl[i] != fl[i] {
			t.Errorf("cold:   %s\nforked: %s", cl[i], fl[i])
		}
	}
	return f
}

// TestSandboxForkedShellLikeCold: a forked sandboxed kernel's shell,
// which the fork server built before any session and the kernel then
// adopted (py/shelltemplate.py), holds what a cold sandboxed kernel's
// holds: its session's folders, home, working directory, environment and
// configuration, and nothing of the fork server's.
func TestSandboxForkedShellLikeCold(t *testing.T) {
	compareColdForked(t, probeShell, "instances (True, True)")
}

// TestSandboxForkedKernelConfigFile: a config file in the kernel's
// IPython folder (kernel code may write one; the session's next kernel
// reads it, as a cold one does) is obeyed by a forked kernel too, which
// then builds its own shell instead of adopting the fork server's
// template (py/shelltemplate.py).
func TestSandboxForkedKernelConfigFile(t *testing.T) {
	z := sandboxZygote(t, "")
	ex := startSandboxed(t, &ipybox.Options{Zygote: z})
	run(t, ex, `import os
with open(os.path.join(os.environ["IPYTHONDIR"], "profile_default", "ipython_kernel_config.py"), "w") as f:
    f.write("c.InteractiveShell.xmode = 'Minimal'\n")`)
	if got := run(t, ex, "print(get_ipython().InteractiveTB.mode)").Text; strings.TrimSpace(got) == "Minimal" {
		t.Fatalf("the config applies before a restart: %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ex.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if got := run(t, ex, "import os; print(get_ipython().InteractiveTB.mode, os.environ['PAGER'], get_ipython().starting_dir == os.getcwd())").Text; strings.TrimSpace(got) != "Minimal cat True" {
		t.Errorf("after a restart with a config file: %q, want Minimal cat True", got)
	}
}
