//go:build linux

package ipybox_test

// Attack 12: the fork servers' preloaded init code (b516646), colours
// switched off only where they are on (f537b59), and sys.modules' names
// copied afresh in the fork servers (636568f). The claims attacked: a
// forked kernel is set up exactly as a cold one; nothing of one session
// reaches another kernel of the same fork server through the shared
// module; session forks and rewinds still work; no kernel kind shows
// ANSI escapes; modules are found by name in a forked kernel as in a
// cold one. Attackers: hostile kernel code, another session of the same
// fork server, a session with unusual configuration.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

type a12Kind func(t *testing.T, o ipybox.Options) *ipybox.Executor

// a12Kinds: every kind of kernel the claims name, each started with the
// session's own options. Fork servers are made on first use and closed
// with the parent test.
func a12Kinds(parent *testing.T) map[string]a12Kind {
	parent.Helper()
	testenv.NeedsPython(parent)
	var mu sync.Mutex
	zs := map[string]*ipybox.Zygote{}
	parent.Cleanup(func() {
		for _, z := range zs {
			z.Close()
		}
	})
	zyg := func(t *testing.T, sandboxed bool, python string) *ipybox.Zygote {
		mu.Lock()
		defer mu.Unlock()
		key := python + map[bool]string{true: "/sb"}[sandboxed]
		if z := zs[key]; z != nil {
			return z
		}
		var z *ipybox.Zygote
		var err error
		if sandboxed {
			z, err = ipybox.NewSandboxZygote(context.Background(), python, nil)
		} else {
			z, err = ipybox.NewZygote(context.Background(), python, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		zs[key] = z
		return z
	}
	kinds := map[string]a12Kind{
		"cold": func(t *testing.T, o ipybox.Options) *ipybox.Executor { return start(t, &o) },
		"forked": func(t *testing.T, o ipybox.Options) *ipybox.Executor {
			o.Zygote = zyg(t, false, "")
			return start(t, &o)
		},
		"ipykernel7": func(t *testing.T, o ipybox.Options) *ipybox.Executor {
			o.Python, _ = testenv.PyPIPython(t)
			return start(t, &o)
		},
		"ipykernel7-forked": func(t *testing.T, o ipybox.Options) *ipybox.Executor {
			o.Python, _ = testenv.PyPIPython(t)
			o.Zygote = zyg(t, false, o.Python)
			return start(t, &o)
		},
	}
	if _, err := exec.LookPath("bwrap"); err == nil {
		kinds["sandboxed"] = func(t *testing.T, o ipybox.Options) *ipybox.Executor {
			o.Sandbox = ipybox.DefaultSandbox()
			return start(t, &o)
		}
		kinds["sandboxed-forked"] = func(t *testing.T, o ipybox.Options) *ipybox.Executor {
			o.Sandbox = ipybox.DefaultSandbox()
			o.Zygote = zyg(t, true, "")
			return start(t, &o)
		}
	}
	return kinds
}

// a12Cell runs code and returns its Result and error (a Python
// exception is an error, not a failure of the test).
func a12Cell(t *testing.T, ex *ipybox.Executor, code string) (*ipybox.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return ex.Execute(ctx, code, nil)
}

// a12Shell runs code that starts shell commands, rejecting every
// approval, and returns the commands asked about.
func a12Shell(t *testing.T, ex *ipybox.Executor, code string) []string {
	t.Helper()
	reqs, _, _ := collect(t, ex, code, nil, func(r *ipybox.ApprovalRequest) { r.Reject("attack12") })
	var cmds []string
	for _, r := range reqs {
		cmds = append(cmds, r.Kind+":"+r.Command)
	}
	return cmds
}

// a12State prints, as JSON, what ipybox's init sets up in a kernel, with
// the session's own folders named WS (workspace) and RT (runtime).
const a12State = `import sys as _a12s, os as _a12o, json as _a12j, subprocess as _a12p, builtins as _a12b
from IPython.core.magics import script as _a12sc
def _a12_state(ws):
    ip = get_ipython()
    rt = _a12o.path.dirname(_a12s.modules["ipybox_runtime"].__path__[0]) if "ipybox_runtime" in _a12s.modules else _a12s.path[0]
    norm = lambda p: "WS" if p == ws else "RT" if p == rt else "PKG" if "/.ipybox/packages/" in p else p
    finders = [f for f in _a12s.meta_path if type(f).__name__ == "_WorkspaceFinder"]
    st = {
        "sys.path": [norm(p) for p in _a12s.path],
        "meta_path": [type(f).__name__ for f in _a12s.meta_path],
        "finder dirs": [[norm(d) for d in f.dirs] for f in finders],
        "finder ns is user_ns": [f.user_ns is ip.user_ns for f in finders],
        "post_run_cell": [getattr(cb, "__name__", "?") for cb in ip.events.callbacks["post_run_cell"] if getattr(cb, "__name__", "") != "_ipybox_trim_later"],
        "idle trim hooks": sum(getattr(cb, "__name__", "") == "_ipybox_trim_later" for cb in ip.events.callbacks["post_run_cell"]),
        "pip magic ours": "ipybox" in (ip.find_line_magic("pip").__doc__ or ""),
        "colors": str(ip.colors).lower(),
        "class hooks": sorted(n for n in ("system", "system_piped", "system_raw", "getoutput") if getattr(getattr(type(ip), n, None), "__code__", None) is not None and getattr(type(ip), n).__code__.co_filename == "<string>"),
        "run_cell_magic wrapped": "run_cell_magic" in vars(ip),
        "shebang wrapped": hasattr(_a12sc.ScriptMagics.shebang, "__ipybox_orig__"),
        "shebang wrapped twice": hasattr(getattr(_a12sc.ScriptMagics.shebang, "__ipybox_orig__", None), "__ipybox_orig__"),
        "Popen guarded": hasattr(_a12p.Popen.__init__, "__ipybox_orig__"),
        "Popen guarded twice": hasattr(getattr(_a12p.Popen.__init__, "__ipybox_orig__", None), "__ipybox_orig__"),
        "os guards": sorted(n for n in dir(_a12o) if hasattr(getattr(_a12o, n, None), "__ipybox_orig__")),
        "user names": sorted(k for k in ip.user_ns if not k.startswith("_") and k not in ip.user_ns_hidden),
        "builtins": sorted(k for k in vars(_a12b) if "ipybox" in k.lower() or k in ("setup", "get_ipython")),
        "user site": [norm(__import__("site").getusersitepackages()), __import__("site").getusersitepackages() in _a12s.path, _a12o.environ.get("PIP_USER")],
    }
    return _a12j.dumps(st, sort_keys=True)
`

// a12Colors records every traceback a cell shows, raises three kinds of
// error (an exception, a syntax error, a verbose one), and prints
// whether any text the kernel made carries an ANSI escape: the
// tracebacks, the object inspector's text and the colouriser's.
var a12Colors = []string{
	`_a12_stb = []
_a12_orig_stb = get_ipython()._showtraceback
def _a12_rec(etype, evalue, stb):
    _a12_stb.append("".join(stb))
    return _a12_orig_stb(etype, evalue, stb)
get_ipython()._showtraceback = _a12_rec`,
	"1/0",
	"def broken(:\n    pass",
	"%xmode Verbose\nx = [1]\nx[3]",
	"%xmode Context\nimport json\njson.loads('{')",
	`_ip = get_ipython()
print(len(_a12_stb), any("\x1b" in s for s in _a12_stb), "\x1b" in _ip.object_inspect_mime("len").get("text/plain", ""), "\x1b" in _ip.pycolorize("x = [1, 'a']"), str(_ip.colors).lower())`,
}

// a12CheckColors runs a12Colors and fails if a traceback, the inspector
// or the colouriser made an ANSI escape.
func a12CheckColors(t *testing.T, ex *ipybox.Executor) {
	t.Helper()
	for _, c := range a12Colors[:len(a12Colors)-1] {
		a12Cell(t, ex, c)
	}
	got := run(t, ex, a12Colors[len(a12Colors)-1]).Text
	if got != "4 False False False nocolor" {
		t.Errorf("colours: %q, want 4 tracebacks, no ANSI escape in any traceback, the inspector or the colouriser, and colours nocolor", got)
	}
}

// a12Setup checks, in ex, everything ipybox's init sets up for a session
// with shell approval and the process guards, by what the kernel does:
// a shell command and a script magic are asked about once each (and do
// not run when rejected), subprocess is refused, a cell that leaves the
// workspace is brought back with a message, a cell imports from the
// workspace and code that is not the user's does not, and no output has
// colours. It returns the state a12State prints.
func a12Setup(t *testing.T, ex *ipybox.Executor) string {
	t.Helper()
	run(t, ex, a12State)
	state := run(t, ex, "print(_a12_state(_a12o.getcwd()))").Text
	if got := a12Shell(t, ex, "!echo a12 > a12-bang-ran"); len(got) != 1 || got[0] != "shell:echo a12 > a12-bang-ran" {
		t.Errorf("!cmd asked %q, want once, for the very command", got)
	}
	if got := a12Shell(t, ex, "%%bash\necho a12 > a12-magic-ran"); len(got) != 1 || got[0] != "shell:%%bash\necho a12 > a12-magic-ran\n" {
		t.Errorf("%%%%bash asked %q, want once, for the very script", got)
	}
	if got := run(t, ex, "import os\nprint(os.path.exists('a12-bang-ran'), os.path.exists('a12-magic-ran'))").Text; got != "False False" {
		t.Errorf("rejected commands ran: %q", got)
	}
	if _, err := a12Cell(t, ex, "import subprocess\nsubprocess.run(['true'])"); err == nil || !strings.Contains(err.Error(), "RequireShellEscape") {
		t.Errorf("subprocess under RequireShellEscape: %v, want PermissionError", err)
	}
	res, err := a12Cell(t, ex, "_a12_home = os.getcwd()\nos.chdir('/')")
	if err != nil || !strings.Contains(res.Text, "[ipybox] cwd reset to ") {
		t.Errorf("leaving the workspace: %v %+v, want the cwd restored with a message", err, res)
	}
	if got := run(t, ex, "print(os.getcwd() == _a12_home)").Text; got != "True" {
		t.Errorf("cwd after leaving: %q", got)
	}
	run(t, ex, "for n in ('a12wsmod', 'a12wsmod2'):\n    open(n + '.py', 'w').write('V = 42\\n')")
	if got := run(t, ex, "import a12wsmod\nprint(a12wsmod.V)").Text; got != "42" {
		t.Errorf("a cell imports from the workspace: %q", got)
	}
	if _, err := a12Cell(t, ex, "import pkgutil\npkgutil.resolve_name('a12wsmod2')"); err == nil || !strings.Contains(err.Error(), "ModuleNotFoundError") {
		t.Errorf("a library (pkgutil) imported from the workspace: %v", err)
	}
	a12CheckColors(t, ex)
	return state
}

// TestAttack12ForkedSetUpAsCold: a kernel forked from a fork server,
// whose init takes the preloaded definitions, is set up exactly as a
// cold one of the same kind, for a session with shell approval, the
// process guards and a package folder of its own: the same sys.path, meta_path, hooks, magics, guards and
// user names (a12State), the same behaviour (a12Setup), and no ANSI
// escape anywhere.
func TestAttack12ForkedSetUpAsCold(t *testing.T) {
	t.Parallel()
	kinds := a12Kinds(t)
	var mu sync.Mutex
	states := map[string]string{}
	t.Run("kinds", func(t *testing.T) {
		for name, mk := range kinds {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				o := snapshotOpts(t.TempDir(), "s")
				o.ApproveShellCommands, o.RequireShellEscape, o.NoToolApproval = true, true, true
				ex := mk(t, *o)
				pre := run(t, ex, "import sys\nprint(getattr(sys.modules.get('_ipybox_kernel_init'), '__ipybox_hash__', None) is not None)").Text
				if want := fmt.Sprint(strings.HasSuffix(name, "forked")); pre != strings.ToUpper(want[:1])+want[1:] {
					t.Errorf("preloaded init module present: %s", pre)
				}
				st := a12Setup(t, ex)
				mu.Lock()
				states[name] = st
				mu.Unlock()
			})
		}
	})
	for _, base := range []string{"cold", "sandboxed", "ipykernel7"} {
		cold, forked := states[base], states[base+"-forked"]
		if base == "cold" {
			forked = states["forked"]
		}
		if cold == "" || forked == "" {
			continue
		}
		if cold != forked {
			var c, f map[string]any
			json.Unmarshal([]byte(cold), &c)
			json.Unmarshal([]byte(forked), &f)
			for k := range c {
				if !reflect.DeepEqual(c[k], f[k]) {
					t.Errorf("%s: %s differs:\n cold   %v\n forked %v", base, k, c[k], f[k])
				}
			}
		}
		t.Logf("%s: %s", base, cold)
	}
}

// a12Tamper is hostile kernel code against the preloaded init module of
// its own process: it keeps the mark (so that an init in this process
// would take the module), replaces setup and the helpers with ones that
// leave a file behind and set up nothing, breaks the workspace finder's
// class, and leaves a name in the module.
const a12Tamper = `import sys, os
m = sys.modules["_ipybox_kernel_init"]
_mark = os.path.join(os.getcwd(), "a12-tampered-setup-ran")
def _evil(*a, **k):
    open(_mark, "a").write(repr(a) + "\n")
m.setup = _evil
m._install_shell_hooks = _evil
m._install_process_guards = _evil
m._safe_pip_magic = _evil
m._WorkspaceFinder.find_spec = lambda self, *a, **k: None
m._WorkspaceFinder.__init__ = lambda self, *a, **k: _evil()
m.leak_from = "A"
print(m.__ipybox_hash__ is not None)`

// a12Untampered prints whether this process's preloaded module is the
// fork server's: its functions are the init source's (compiled from
// "<string>", not a cell), and no session's name is in it.
const a12Untampered = `import sys
m = sys.modules["_ipybox_kernel_init"]
fns = [m.setup, m._install_shell_hooks, m._install_process_guards, m._safe_pip_magic, m._WorkspaceFinder.find_spec, m._WorkspaceFinder.__init__]
print(all(f.__code__.co_filename == "<string>" for f in fns), sorted(k for k in vars(m) if k.startswith("leak")))`

// a12NoHooks checks that a session without shell approval or process
// guards has none: a shell command runs without being asked about, and
// subprocess works.
func a12NoHooks(t *testing.T, ex *ipybox.Executor, who string) {
	t.Helper()
	if got := a12Shell(t, ex, "!echo a12"); len(got) != 0 {
		t.Errorf("%s: a session without shell approval was asked %q", who, got)
	}
	if got := run(t, ex, "import subprocess\nprint(subprocess.run(['echo', 'ran'], capture_output=True, text=True).stdout.strip())").Text; got != "ran" {
		t.Errorf("%s: subprocess in a session without guards: %q", who, got)
	}
}

// TestAttack12NoLeakThroughPreload: sessions forked from one fork server
// share its init module only as copy-on-write memory. Session A (no
// shell approval) tampers with its module; session B (shell approval and
// process guards), started after, is set up fully by the fork server's
// definitions and sees nothing of A's; B's settings do not reach A, nor
// session C (no approval), started after B. Unsandboxed and sandboxed.
func TestAttack12NoLeakThroughPreload(t *testing.T) {
	t.Parallel()
	kinds := a12Kinds(t)
	for _, name := range []string{"forked", "sandboxed-forked"} {
		mk := kinds[name]
		if mk == nil {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir() // shared, as sessions of one principal share it
			a := mk(t, ipybox.Options{WorkDir: ws})
			if got := run(t, a, a12Tamper).Text; got != "True" {
				t.Fatalf("tamper: %q", got)
			}
			b := mk(t, ipybox.Options{WorkDir: ws, ApproveShellCommands: true, RequireShellEscape: true, NoToolApproval: true})
			if got := run(t, b, a12Untampered).Text; got != "True []" {
				t.Errorf("B's init module: %q, want the fork server's, with nothing of A", got)
			}
			a12Setup(t, b)
			if _, err := os.Stat(filepath.Join(ws, "a12-tampered-setup-ran")); err == nil {
				t.Errorf("A's replaced setup ran outside A")
			}
			// B leaves a name too; A, already running, does not see it,
			// and has none of B's hooks.
			run(t, b, "import sys\nsys.modules['_ipybox_kernel_init'].leak_from_b = 'B'")
			if got := run(t, a, "print(sorted(k for k in vars(m) if k.startswith('leak')))").Text; got != "['leak_from']" {
				t.Errorf("A sees %s in its module", got)
			}
			a12NoHooks(t, a, "A")
			c := mk(t, ipybox.Options{WorkDir: ws})
			if got := run(t, c, a12Untampered).Text; got != "True []" {
				t.Errorf("C's init module: %q, want the fork server's, with nothing of A or B", got)
			}
			a12NoHooks(t, c, "C")
			run(t, c, a12State)
			var st map[string]any
			if err := json.Unmarshal([]byte(run(t, c, "print(_a12_state(_a12o.getcwd()))").Text), &st); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(st["os guards"], st["class hooks"], st["Popen guarded"], st["shebang wrapped"], st["run_cell_magic wrapped"], st["finder dirs"]) != "[] [] false false false [[WS]]" {
				t.Errorf("C, a session without approval or guards, has: %v", st)
			}
		})
	}
}

// a12StateOf returns ex's a12State.
func a12StateOf(t *testing.T, ex *ipybox.Executor) map[string]any {
	t.Helper()
	run(t, ex, a12State)
	var st map[string]any
	if err := json.Unmarshal([]byte(run(t, ex, "print(_a12_state(_a12o.getcwd()))").Text), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// a12SameState fails where two states differ, but for the keys named.
func a12SameState(t *testing.T, what string, want, got map[string]any, except ...string) {
	t.Helper()
	for k := range want {
		if !slices.Contains(except, k) && !reflect.DeepEqual(want[k], got[k]) {
			t.Errorf("%s: %s is\n %v\nwant\n %v", what, k, got[k], want[k])
		}
	}
}

// TestAttack12SessionForkAndRewind: a session fork re-runs the init code
// in the copy (ipybox_runtime/_fork.py), through the preloaded module
// when the source is a forked kernel. The fork of a session with shell
// approval and the process guards is set up as its source (once: one
// hook, one finder, each command asked about once, each guard one
// layer), colours off although the source's user turned them on; also
// when the source made its module stale, so that the copy's init runs
// its own source over the preloaded one's hooks, and, sandboxed, when the
// source tampered with its module (the fork is a fresh kernel). A rewind brings the
// boundary back with its setup. Cold, forked, and sandboxed-forked (a
// fork through a snapshot, into a fresh kernel of the fork server).
func TestAttack12SessionForkAndRewind(t *testing.T) {
	t.Parallel()
	kinds := a12Kinds(t)
	for _, name := range []string{"cold", "forked", "sandboxed-forked"} {
		mk := kinds[name]
		if mk == nil {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o := snapshotOpts(t.TempDir(), "src")
			o.ApproveShellCommands, o.RequireShellEscape, o.NoToolApproval, o.RewindDepth = true, true, true, 1
			src := mk(t, *o)
			want := a12StateOf(t, src)
			run(t, src, "x = 41\n%colors Linux")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			n := 0
			fork := func(what string) {
				n++
				pkg := fmt.Sprintf("fork%d", n)
				forks, err := src.Fork(ctx, 1, func(_ int, o *ipybox.Options) error {
					o.PackageDir = filepath.Join(o.WorkDir, ".ipybox", "packages", pkg)
					return nil
				})
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				f := forks[0]
				t.Cleanup(func() { f.Close() })
				// The init ran with the fork's own configuration: its own
				// package folder is where pip installs and on sys.path.
				if got := run(t, f, "import site, sys, os\nu = site.getusersitepackages()\nprint(os.sep + "+strconv.Quote(pkg)+" + os.sep in u, u in sys.path, os.environ.get('PIP_USER'))").Text; got != "True True 1" {
					t.Errorf("%s: the fork's package folder: %q", what, got)
				}
				if got := run(t, f, "print(x + 1)").Text; got != "42" {
					t.Errorf("%s: x+1 = %q", what, got)
				}
				if what == "fork of a tampered source" {
					if got := run(t, f, a12Untampered).Text; got != "True []" {
						t.Errorf("%s: the fork's init module: %q, want the fork server's", what, got)
					}
				}
				a12Setup(t, f)
				if name == "forked" {
					// Which definitions the copy's init took: the preloaded
					// module's, unless the source made it stale.
					want := fmt.Sprint(what == "fork")
					if got := run(t, f, "import sys\nprint(str(type(sys.meta_path[-1]) is sys.modules['_ipybox_kernel_init']._WorkspaceFinder).lower())").Text; got != want {
						t.Errorf("%s: the copy's finder is the preloaded class: %s, want %s", what, got, want)
					}
				}
				// The copy's sys.path holds its source's package folder too
				// (older than the preload). idletrim.py's hooks are one pair
				// however often the app starts again on the kept shell.
				a12SameState(t, what, want, a12StateOf(t, f), "sys.path", "user names")
			}
			fork("fork")
			switch name {
			case "forked":
				run(t, src, "import sys\nsys.modules['_ipybox_kernel_init'].__ipybox_hash__ = '0' * 16")
				fork("fork of a stale module")
			case "sandboxed-forked":
				// A sandboxed fork is a fresh kernel of the fork server,
				// whatever the source did to its own module.
				run(t, src, a12Tamper)
				fork("fork of a tampered source")
			default:
				fork("second fork")
			}
			run(t, src, "del x")
			if _, err := src.Rewind(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if got := run(t, src, "print(x)").Text; got != "41" {
				t.Errorf("after rewind: x = %q", got)
			}
			a12SameState(t, "rewind", want, a12StateOf(t, src), "colors", "user names")
			if got := a12Shell(t, src, "!echo a12"); len(got) != 1 {
				t.Errorf("after rewind, !cmd asked %q, want once", got)
			}
		})
	}
}

// a12Modules: cells that use modules by name, each printing JSON.
var a12Modules = []struct{ name, code string }{
	{"files", `import os, sys, tempfile, time
os.makedirs("a12pkg", exist_ok=True)
open("a12pkg/__init__.py", "w").write("")
open("a12pkg/sub.py", "w").write("V = 1\n")
open("a12m.py", "w").write("import dataclasses, enum\nclass C:\n    v = 1\ndef f(x):\n    return x + 1\n@dataclasses.dataclass\nclass D:\n    a: int = 1\nclass E(enum.Enum):\n    A = 1\n")
open("a12auto.py", "w").write("V = 1\n")
_ext = tempfile.mkdtemp()  # outside the workspace: a plain sys.path entry
sys.path.insert(0, _ext)
for n in ("a12ext", "a12extauto"):
    open(os.path.join(_ext, n + ".py"), "w").write("V = 1\n")
def _bump(path, text):
    st = os.stat(path)
    open(path, "w").write(text)
    os.utime(path, (st.st_atime + 5, st.st_mtime + 5))
print("{}")`},
	{"lookups", `import importlib, importlib.util, pickle, json, json.decoder, collections, fractions, copy, pkgutil, typing
r = {}
import a12m, a12pkg.sub, a12ext
r["imports"] = [a12m.f(1), a12pkg.sub.V, a12ext.V]
r["reload std"] = importlib.reload(json.decoder) is json.decoder and importlib.reload(json) is json and sys.modules["json"] is json
_bump("a12m.py", open("a12m.py").read() + "W = 2\n")
_bump(a12ext.__file__, "V = 2\n")
r["reload"] = [importlib.reload(a12m).W, importlib.reload(a12ext).V, importlib.reload(a12pkg.sub).V]
objs = (json.JSONDecoder, json.dumps, collections.OrderedDict, fractions.Fraction, os.path.join, a12m.C, a12m.f, a12m.D, a12m.E, a12ext.__spec__.loader.__class__)
r["pickle by name"] = [pickle.loads(pickle.dumps(o)) is o for o in objs]
vals = [a12m.D(3), a12m.E.A, fractions.Fraction(1, 3), collections.OrderedDict(a=1)]
r["pickle values"] = pickle.loads(pickle.dumps(vals)) == vals and pickle.loads(pickle.dumps(a12m.E.A)) is a12m.E.A
def g():
    return 7
try:
    r["pickle __main__"] = pickle.loads(pickle.dumps(g)) is g
except Exception as e:
    r["pickle __main__"] = type(e).__name__
g2 = lambda: 1
g2.__module__ = None
r["whichmodule"] = [pickle.whichmodule(json.dumps, "dumps"), pickle.whichmodule(g2, "g2")]
r["lookup"] = all(sys.modules[k] is v for k, v in list(sys.modules.items()))
r["by __name__"] = sorted(k for k, v in list(sys.modules.items()) if isinstance(getattr(v, "__name__", None), str) and k != v.__name__ and k != "__main__")[:20]
r["find_spec"] = importlib.util.find_spec("json") is json.__spec__
r["resolve"] = pkgutil.resolve_name("json.decoder:JSONDecoder") is json.decoder.JSONDecoder
r["deepcopy"] = copy.deepcopy(a12m.D(2)) == a12m.D(2)
r["hints"] = str(typing.get_type_hints(a12m.D))
print(json.dumps(r, sort_keys=True))`},
	{"multiprocessing", `import multiprocessing as mp, math, json
m = {}
for meth in ("fork", "forkserver", "spawn"):
    try:
        ctx = mp.get_context(meth)
        with ctx.Pool(1) as p:
            m[meth] = p.map(math.factorial, [3, 4])
        codes = []
        for target in (json.dumps, a12m.f):
            pr = ctx.Process(target=target, args=(1,))
            pr.start()
            pr.join(60)
            codes.append(pr.exitcode)
        m[meth + " exits"] = codes
    except Exception as e:
        m[meth] = type(e).__name__ + ": " + str(e)[:100]
print(json.dumps(m, sort_keys=True))`},
	{"autoreload", "%load_ext autoreload\n%autoreload 2\nimport a12auto, a12extauto\nprint('{}')"},
	{"autoreload change", `_bump("a12auto.py", "V = 2\n")
_bump(a12extauto.__file__, "V = 2\n")
print("{}")`},
	{"autoreloaded", `print(json.dumps({"autoreloaded": [a12auto.V, a12extauto.V]}))`},
	{"reset", "%reset -f --aggressive"},
	{"after reset", `import sys, json as _j
r = {"culled": sorted(n for n in ("a12m", "a12pkg", "a12pkg.sub", "a12ext", "a12auto", "ipybox_runtime", "json", "pickle", "fractions", "multiprocessing", "IPython", "zmq") if n not in sys.modules)}
import a12m, a12pkg.sub, pickle
r["reimported"] = [a12m.f(1), a12m.W, a12pkg.sub.V, pickle.loads(pickle.dumps(a12m.C)) is a12m.C]
r["names"] = sorted(k for k in globals() if not k.startswith("_"))
r["finders"] = [type(f).__name__ for f in sys.meta_path].count("_WorkspaceFinder")
r["hooks"] = [cb.__name__ for cb in get_ipython().events.callbacks["post_run_cell"] if cb.__name__ != "_ipybox_trim_later"]
print(_j.dumps(r, sort_keys=True))`},
}

// TestAttack12ModuleNamesAsCold: in a kernel forked from a fork server
// (whose sys.modules names are fresh copies, cowfreeze.py), modules are
// found by name as in a cold kernel: imports, importlib.reload (of the
// standard library, the workspace, a folder on sys.path), pickling of
// classes, functions, dataclasses and enums, pickle.whichmodule,
// find_spec, pkgutil.resolve_name, multiprocessing with fork, forkserver
// and spawn, %autoreload, and %reset -f --aggressive (IPython's
// _sys_modules_keys), after which modules import again and ipybox's hooks
// stay. Every forked kind prints what its cold kind prints.
func TestAttack12ModuleNamesAsCold(t *testing.T) {
	t.Parallel()
	kinds := a12Kinds(t)
	var mu sync.Mutex
	outs := map[string]map[string]any{}
	t.Run("kinds", func(t *testing.T) {
		for name, mk := range kinds {
			if strings.HasPrefix(name, "ipykernel7") {
				continue
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ex := mk(t, ipybox.Options{})
				out := map[string]any{}
				for _, c := range a12Modules {
					res, err := a12Cell(t, ex, c.code)
					if err != nil {
						t.Fatalf("%s: %v", c.name, err)
					}
					if c.name == "reset" {
						continue
					}
					// One line is the cell's JSON; the others are what it
					// printed besides (autoreload's complaints, the children's
					// tracebacks).
					var m map[string]any
					var other []string
					for _, l := range strings.Split(res.Text, "\n") {
						if m == nil && strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &m) == nil {
							continue
						}
						other = append(other, l)
					}
					if m == nil {
						t.Fatalf("%s: %q", c.name, res.Text)
					}
					if len(other) > 0 && strings.HasPrefix(c.name, "autoreload") {
						m[c.name+" printed"] = strings.Join(other, "\n")
					}
					maps.Copy(out, m)
				}
				mu.Lock()
				outs[name] = out
				mu.Unlock()
			})
		}
	})
	for base, forked := range map[string]string{"cold": "forked", "sandboxed": "sandboxed-forked"} {
		c, f := outs[base], outs[forked]
		if c == nil || f == nil {
			continue
		}
		b, _ := json.MarshalIndent(c, "", " ")
		t.Logf("%s:\n%s", base, b)
		a12SameState(t, forked+" against "+base, c, f)
		for k := range f {
			if _, ok := c[k]; !ok {
				t.Errorf("%s printed %s = %v, %s nothing", forked, k, f[k], base)
			}
		}
	}
	if c := outs["cold"]; c != nil {
		for k, want := range map[string]string{
			"imports":        "[2 1 1]",
			"reload std":     "true",
			"reload":         "[2 2 1]",
			"pickle by name": "[true true true true true true true true true true]",
			"pickle values":  "true",
			"lookup":         "true",
			"find_spec":      "true",
			"resolve":        "true",
			"reimported":     "[2 2 1 true]",
			"finders":        "1",
			"hooks":          "[_ipybox_restore_cwd]",
		} {
			if got := fmt.Sprint(c[k]); got != want {
				t.Errorf("cold: %s = %s, want %s", k, got, want)
			}
		}
		for _, meth := range []string{"fork", "forkserver", "spawn"} {
			if got := fmt.Sprint(c[meth]); got != "[6 24]" {
				t.Errorf("cold: multiprocessing %s: %s", meth, got)
			}
		}
	}
}

// TestAttack12GatewayNoColor: a kernel on a Jupyter Server, started with
// the server's own arguments (not ipybox's NoColor), has its colours
// switched off by the init code (the kernel's colours are on), so that
// no traceback, inspector or colouriser output carries an ANSI escape.
func TestAttack12GatewayNoColor(t *testing.T) {
	t.Parallel()
	j := testenv.JupyterServer(t, nil)
	ex := start(t, &ipybox.Options{Gateway: &ipybox.GatewayConfig{URL: j.URL, Token: j.Token}})
	if got := run(t, ex, "import sys\nprint('_ipybox_kernel_init' in sys.modules, any('NoColor' in a for a in sys.argv))").Text; got != "False False" {
		t.Logf("gateway kernel: preloaded module, NoColor argument: %s", got)
	}
	a12CheckColors(t, ex)
}

// TestAttack12ForkOfColouredHandler: a session fork re-runs the init code
// in a copy of its source, and before f537b59 that init switched colours
// off unconditionally. Now it does so only when the shell's colors trait
// is not NoColor; a source whose traceback handler was coloured without
// the trait (IPython 8's colors observers leave the handlers alone: kernel
// code that calls InteractiveTB.set_colors, or runs %colors Linux and then
// sets the trait back) passes its colours to the fork, whose tracebacks
// then carry ANSI escapes. (The host strips them from a PythonError's
// traceback; text that kernel code formats and prints keeps them.)
func TestAttack12ForkOfColouredHandler(t *testing.T) {
	t.Parallel()
	for name, colour := range map[string]string{
		"set_colors":        "get_ipython().InteractiveTB.set_colors('Linux')",
		"magic then trait":  "%colors Linux\nget_ipython().colors = 'NoColor'",
		"magic (the trait)": "%colors Linux",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src := start(t, nil)
			run(t, src, colour)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			forks, err := src.Fork(ctx, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			f := forks[0]
			defer f.Close()
			_, err = a12Cell(t, f, "1/0")
			var pe *ipybox.PythonError
			if errors.As(err, &pe) && strings.Contains(pe.TracebackText(), "\x1b") {
				t.Errorf("the host got a traceback with ANSI escapes: %q", pe.TracebackText())
			}
			a12CheckColors(t, f)
		})
	}
}

// TestAttack12WorkspaceFinderPseudoNames: the workspace import finder
// (_WorkspaceFinder in kernel_init.py) lets only user code import from
// the workspace. It took os.path.realpath of the importing frame's file
// name, and a pseudo-name ("<string>" of exec and compile, "<doctest
// ...>") is relative: it resolved under the working directory, the
// workspace, so that a library that execs "import name" for an optional
// module, or doctest running a library's examples, imported what another
// session planted in the shared workspace. Such frames now count as their
// caller's. (Older than the changes attack12 was about, and the same in
// cold and forked kernels.)
func TestAttack12WorkspaceFinderPseudoNames(t *testing.T) {
	t.Parallel()
	ex := start(t, nil)
	t.Run("pseudo file names", func(t *testing.T) {
		got := run(t, ex, `import os, sys, tempfile, doctest
for n in ("a12plant", "a12plant2"):
    open(n + ".py", "w").write("import os\nopen(os.path.join(os.getcwd(), %r), 'w').close()\n" % (n + "-ran"))
lib = tempfile.mkdtemp()  # an installed library, outside the workspace
open(os.path.join(lib, "a12lib.py"), "w").write('''
def load_optional():
    try:
        exec(compile("import a12plant", "<string>", "exec"), {"__name__": "a12lib"})
    except ImportError:
        pass

def documented():
    """
    >>> try:
    ...     import a12plant2
    ... except ImportError:
    ...     pass
    """
''')
sys.path.append(lib)
import a12lib
a12lib.load_optional()
doctest.testmod(a12lib)
print(os.path.exists("a12plant-ran"), os.path.exists("a12plant2-ran"))`).Text
		if got != "False False" {
			t.Errorf("a library's exec'd import, a doctest of it: workspace modules ran: %q, want neither", got)
		}
	})
	t.Run("the cell's own exec", func(t *testing.T) {
		// Exec'd text that a cell runs is the cell's: it imports from the
		// workspace, with the cell's globals or its own.
		got := run(t, ex, `open("a12mine.py", "w").write("V = 7\n")
open("a12mine2.py", "w").write("V = 8\n")
exec("import a12mine")
exec(compile("import a12mine2", "<string>", "exec"), {})
import sys
print(a12mine.V, sys.modules["a12mine2"].V)`).Text
		if got != "7 8" {
			t.Errorf("a cell's exec'd imports of workspace modules: %q, want \"7 8\"", got)
		}
	})
}
