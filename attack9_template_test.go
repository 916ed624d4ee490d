//go:build linux

package ipybox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
)

// TestAttack9TemplateReadsNoHomeConfig: the fork server (host, often
// root, outside any sandbox) builds its shell template with HOME from
// ipybox's environment. When that HOME is a folder kernel code can write
// (a deployment whose HOME is the workspace), every IPython / Jupyter
// config, startup file and extension a shell or app could read from it
// is planted there, each writing a canary to a host folder no sandbox
// can reach. Neither the fork server's start (the template) nor a forked
// kernel's adoption of it may run any of them on the host.
func TestAttack9TemplateReadsNoHomeConfig(t *testing.T) {
	home := t.TempDir()     // kernel-writable in this scenario: it is the workspace
	canaries := t.TempDir() // host only: not in any sandbox's view
	code := func(name string) []byte {
		return []byte(fmt.Sprintf("import os\nopen(%q, 'w').write(str(os.getuid()))\n", filepath.Join(canaries, name)))
	}
	plant := map[string]string{
		".ipython/profile_default/ipython_config.py":              "ipython_config",
		".ipython/profile_default/ipython_kernel_config.py":       "ipython_kernel_config",
		".ipython/profile_default/startup/00-a9.py":               "startup",
		".ipython/extensions/a9ext.py":                            "extension",
		".jupyter/jupyter_config.py":                              "jupyter_config",
		".jupyter/ipython_kernel_config.py":                       "jupyter_kernel_config",
		".config/ipython/profile_default/ipython_config.py":       "xdg_ipython_config",
		".ipython/profile_default/ipython_kernel_config.json":     "",
		"kernel/ipython/profile_default/ipython_kernel_config.py": "relative_ipythondir",
		"ipython_kernel_config.py":                                "cwd_config",
		"sitecustomize.py":                                        "sitecustomize",
		"usercustomize.py":                                        "usercustomize",
	}
	for rel, name := range plant {
		p := filepath.Join(home, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		data := code(name)
		if name == "" {
			data = []byte(`{"InteractiveShellApp": {"exec_lines": ["open('` + filepath.Join(canaries, "json_exec_lines") + `','w')"]}}`)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HOME", home)
	// ipybox refuses an OAuth folder inside a workspace: keep its own
	// state elsewhere (the fork server's environment holds no XDG_*).
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("JUPYTER_CONFIG_DIR", filepath.Join(home, ".jupyter"))
	z := sandboxZygote(t, "")
	for i := 0; i < 2; i++ {
		ex := startSandboxed(t, &ipybox.Options{Zygote: z, WorkDir: home})
		got := run(t, ex, "print([v for v in open('/proc/self/environ','rb').read().split(b'\\0') if v.startswith(b'HOME=')])").Text
		if !strings.Contains(got, home) {
			t.Fatalf("kernel %d: the fork server's environment is not the planted HOME: %s", i, got)
		}
	}
	ents, _ := os.ReadDir(canaries)
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(canaries, e.Name()))
		t.Errorf("a host process ran the planted %s (uid %s)", e.Name(), b)
	}
}

// TestAttack9TemplateSiblingUntouched: kernel code of one forked session
// changes everything it can reach of the shell it adopted (its class,
// the singletons, the modules the fork server imported before building
// the template, aliases, %store, %bookmark, %config, its IPython
// folder's config and startup files, and config files in the shared
// workspace); a second session of the same principal on the same
// workspace, forked afterwards from the same fork server, adopts a shell
// that shows none of it.
func TestAttack9TemplateSiblingUntouched(t *testing.T) {
	z := sandboxZygote(t, "")
	ws := t.TempDir()
	a := startSandboxed(t, &ipybox.Options{Zygote: z, WorkDir: ws})
	attack := `
import os, sys, builtins, IPython, ipykernel.zmqshell, ipykernel.kernelapp, IPython.core.interactiveshell as ish
ip = get_ipython()
ish.InteractiveShell.a9_class_mark = "A9"
ipykernel.zmqshell.ZMQInteractiveShell.run_cell_orig = ipykernel.zmqshell.ZMQInteractiveShell.run_cell
IPython.a9_mod_mark = "A9"
builtins.a9_builtin_mark = "A9"
sys.modules["a9_mod"] = IPython
ip.user_module.a9_main = "A9"
ip.alias_manager.define_alias("a9alias", "echo A9")
ip.run_line_magic("bookmark", "a9bm /")
a9_stored = "A9"
ip.run_line_magic("store", "a9_stored")
ip.run_line_magic("config", "InteractiveShell.xmode = 'Minimal'")
ip.events.register("pre_run_cell", lambda *a: print("A9 HOOK"))
ip.user_ns_hidden["a9_hidden"] = 1
ip.db["a9_db"] = "A9"
ip.history_manager.dir_hist.append("/a9")
ip.dir_stack.append("/a9")
mark = "import builtins; builtins.a9_config_ran = 'A9'\n"
for d in (ip.profile_dir.location, os.path.join(ip.profile_dir.location, "startup"), os.getcwd(), os.path.join(os.getcwd(), ".ipython", "profile_default"), os.path.join(os.getcwd(), ".ipython", "profile_default", "startup")):
    os.makedirs(d, exist_ok=True)
    for n in ("ipython_config.py", "ipython_kernel_config.py", "00-a9.py"):
        try:
            open(os.path.join(d, n), "w").write(mark + ("c = get_config()\nc.InteractiveShellApp.exec_lines = [%r]\n" % mark.strip() if "config" in n else ""))
        except OSError as e:
            print("write", d, n, e)
print("attacked", ip.profile_dir.location.startswith(os.getcwd()))
`
	t.Logf("A: %s", run(t, a, attack).Text)
	check := `
import sys, builtins, IPython, ipykernel.zmqshell, IPython.core.interactiveshell as ish
ip = get_ipython()
bad = []
if hasattr(ish.InteractiveShell, "a9_class_mark"): bad.append("class")
if hasattr(ipykernel.zmqshell.ZMQInteractiveShell, "run_cell_orig"): bad.append("class2")
if hasattr(IPython, "a9_mod_mark"): bad.append("module")
if hasattr(builtins, "a9_builtin_mark"): bad.append("builtins")
if hasattr(builtins, "a9_config_ran"): bad.append("config/startup ran")
if "a9_mod" in sys.modules: bad.append("sys.modules")
if hasattr(ip.user_module, "a9_main"): bad.append("__main__")
if ip.alias_manager.is_alias("a9alias"): bad.append("alias")
if "a9bm" in (ip.db.get("bookmarks") or {}): bad.append("bookmark")
if any("a9" in k for k in ip.db.keys()): bad.append("db %r" % list(ip.db.keys()))
if ip.InteractiveTB.mode == "Minimal": bad.append("xmode")
if any("A9" in repr(getattr(f, "__code__", None) and f.__code__.co_consts) for f in ip.events.callbacks["pre_run_cell"]): bad.append("hook")
if "a9_hidden" in ip.user_ns_hidden: bad.append("hidden")
if "/a9" in [str(p) for p in ip.history_manager.dir_hist] or "/a9" in ip.dir_stack: bad.append("dirs")
if "a9_stored" in ip.user_ns: bad.append("store")
print("BAD", bad)
`
	b := startSandboxed(t, &ipybox.Options{Zygote: z, WorkDir: ws})
	if got := run(t, b, check).Text; !strings.Contains(got, "BAD []") {
		t.Errorf("second session of the principal: %s", got)
	}
	// And the source session's own next kernel after a reset: its own
	// IPython folder is its own (as cold); but nothing the workspace
	// holds is obeyed.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := startSandboxed(t, &ipybox.Options{Zygote: z, WorkDir: ws})
	_ = ctx
	if got := run(t, c, check).Text; !strings.Contains(got, "BAD []") {
		t.Errorf("third session of the principal: %s", got)
	}
}

// probeMagics: what the path-taking magics of a kernel's shell print or
// use (the run directory shown as RUN, the workspace as WS, this
// kernel's pid as PID), for a cold and a forked kernel to print alike.
const probeMagics = `
import os, io, contextlib, re
ip = get_ipython()
run = os.path.dirname(os.path.dirname(os.environ["IPYTHONDIR"]))
ws = os.getcwd()
def norm(s):
    s = str(s).replace(run, "RUN").replace(ws, "WS")
    return re.sub(r"0x[0-9a-f]+", "ADDR", s.replace("ipykernel_%d" % os.getpid(), "ipykernel_PID"))
def mag(line):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            r = ip.run_line_magic(*line.split(" ", 1)) if " " in line else ip.run_line_magic(line, "")
        except BaseException as e:
            r = "raised %s: %s" % (type(e).__name__, e)
    print(line, "=>", norm(out.getvalue()).strip().replace(chr(10), " | "), "->", norm(r))
for line in ("pwd", "dhist", "bookmark -l", "store", "alias", "env", "dirs", "config", "who_ls", "logstate", "autocall", "automagic", "colors", "lsmagic", "history -l 1", "pinfo os", "cd -q /", "cd -q -", "cd -q ~", "pwd", "cd -q " + ws, "bookmark here", "bookmark -l", "cd -q -b here", "pwd", "logstart -q", "logstate", "logstop"):
    mag(line)
import tempfile
from ipykernel.compiler import get_tmp_directory
from IPython.paths import get_ipython_dir, get_ipython_cache_dir, get_ipython_package_dir, get_ipython_module_path
from IPython.utils.path import get_home_dir
print("paths", norm([get_ipython_dir(), get_ipython_cache_dir(), get_home_dir(), tempfile.gettempdir(), get_tmp_directory(), os.path.expanduser("~"), ip.profile_dir.startup_dir, ip.profile_dir.security_dir, ip.profile_dir.log_dir, ip.profile_dir.pid_dir, ip.extension_manager.ipython_extension_dir, ip.logger.logfname, ip.logger.home_dir, ip.history_manager.hist_file]))
from ipykernel.connect import get_connection_file
print("connection", norm(get_connection_file()))
print("profile", ip.profile, ip.profile_dir.location == os.path.join(get_ipython_dir(), "profile_default"))
print("compile", norm(ip.compile.get_code_name("x=1", None, 0)))
`

// TestAttack9MagicsLikeCold: the magics whose paths or state a kernel's
// shell took at construction (%cd and its history, %bookmark, %store,
// %logstart's log, %history, %env, %alias, the IPython, cache, profile,
// temp and compiler folders) print in a forked kernel, whose shell the
// fork server built on the host before any session, what they print in a
// cold sandboxed kernel: no path, name or state of the fork server's.
func TestAttack9MagicsLikeCold(t *testing.T) {
	t.Logf("%s", compareColdForked(t, probeMagics, "connection RUN"))
}

// TestAttack9NoSharedWritablePages: a forked kernel's only link to its
// siblings' copies of the template is copy-on-write memory; a writable
// shared mapping inherited from the fork server (one the template or its
// imports made) would let one session's kernel write into another's
// shell. A forked kernel has none that a cold one lacks.
func TestAttack9NoSharedWritablePages(t *testing.T) {
	z := sandboxZygote(t, "")
	cold := startSandboxed(t, nil)
	forked := startSandboxed(t, &ipybox.Options{Zygote: z, WorkDir: cold.Workspace()})
	probe := `
shared = []
for line in open("/proc/self/maps"):
    f = line.split()
    if "s" in f[1] and "w" in f[1]:
        shared.append(" ".join(f[5:]) or "anon")
print("SHARED", sorted(shared))
`
	c, f := run(t, cold, probe).Text, run(t, forked, probe).Text
	if !strings.HasPrefix(c, "SHARED") || c != f {
		t.Errorf("writable shared mappings: cold %s, forked %s", c, f)
	}
	t.Logf("%s", f)
}
