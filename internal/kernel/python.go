package kernel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ipybox/ipybox/internal/hostproc"
	"github.com/ipybox/ipybox/internal/pyinstall"
)

// ErrNoPython is returned (wrapped) when no interpreter that can import
// ipykernel was found.
var ErrNoPython = errors.New("no Python interpreter with ipykernel found")

// probeTimeout bounds one "can this interpreter import ipykernel" check.
const probeTimeout = 10 * time.Second

// probeWaitDelay bounds how long a probe waits for the interpreter's output
// once it has exited or been killed: a wrapper's child that keeps the pipe
// open must not hold the probe past its timeout.
const probeWaitDelay = time.Second

var probeCache sync.Map // path -> error (nil: usable)

// FindPython returns the interpreter the kernel should run.
//
// The order is: explicit (Options.Python), then $IPYBOX_PYTHON, then the
// system's candidates (see candidates): every python3 on PATH, then the
// usual places (/usr/bin/python3 on Linux; Homebrew's on macOS; the py
// launcher's Python 3 on Windows). The first one that can import
// ipykernel wins. An explicit choice that cannot import ipykernel is an
// error of its own; it is never silently replaced by another interpreter.
//
// writable are the folders that kernel code can write (the workspace):
// discovery never runs a candidate that lies in one, links resolved, nor
// one of a virtual environment there (hostproc.ProgramInside: kernel code
// could have put a .pth file in it, or a python3 on a PATH folder there),
// and an explicit one there is not probed (see CheckPython).
func FindPython(ctx context.Context, explicit string, writable ...string) (string, error) {
	if explicit != "" {
		return CheckPython(ctx, explicit, "Options.Python", writable...)
	}
	if env := os.Getenv("IPYBOX_PYTHON"); env != "" {
		return CheckPython(ctx, env, "$IPYBOX_PYTHON", writable...)
	}
	// Probe every candidate at once (each costs an interpreter start; a
	// pyenv shim costs more), then take the first that works, in order.
	cs := slices.DeleteFunc(candidates(ctx), func(c string) bool { return hostproc.ProgramInside(c, writable) != "" })
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = probe(ctx, c, writable)
		}()
	}
	wg.Wait() // bound: each probe has probeTimeout
	for i, c := range cs {
		if errs[i] == nil {
			return c, nil
		}
	}
	if err := ctx.Err(); err != nil {
		// Cut short (the caller went away): no verdict on the Pythons.
		return "", fmt.Errorf("looking for a Python with ipykernel: %w", err)
	}
	tried := "no Python 3 found"
	if len(cs) > 0 {
		tried = "tried " + strings.Join(cs, ", ")
	}
	return "", fmt.Errorf("%w (%s); %s, or point ipybox at an interpreter that has it with "+
		"--python, Options.Python or $IPYBOX_PYTHON", ErrNoPython, tried, pyinstall.Hint(runtime.GOOS, "ipykernel"))
}

// CheckPython checks an interpreter that was named, not discovered, and
// returns its absolute path. Its errors start with label and p (the flag,
// option or variable that named it, as the user wrote it: "--python",
// "Options.Python"), and tell a Python without ipykernel (install it
// there) from a program that is not a Python 3 at all (name another).
//
// An interpreter in a folder of writable (a virtual environment in the
// workspace) is not run on the host, not even to probe it: kernel code
// can write its site-packages. It is returned unprobed; a sandboxed
// kernel runs it in the sandbox, with the environment read-only there,
// and whether it can import ipykernel shows when the kernel starts. A
// host process that would run it (a virtualenv made from it) refuses it.
func CheckPython(ctx context.Context, p, label string, writable ...string) (string, error) {
	abs, err := resolve(p)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", label, p, err)
	}
	if hostproc.ProgramInside(abs, writable) != "" {
		return abs, nil
	}
	err = probe(ctx, abs, writable)
	switch {
	case err == nil:
		return abs, nil
	case ctx.Err() != nil:
		return "", fmt.Errorf("%s %s: %w", label, p, ctx.Err())
	case errors.Is(err, errNoIpykernel):
		return "", fmt.Errorf("%s %s: this Python cannot import ipykernel; install it there "+
			"(`%s -m pip install ipykernel`, or `apt-get install python3-ipykernel` for Debian's /usr/bin/python3), "+
			"or name another interpreter%s", label, p, abs, otherPython(ctx, abs, writable))
	}
	return "", fmt.Errorf("%s %s: not a Python 3 that runs (%v); name a Python 3 that has ipykernel%s",
		label, p, err, otherPython(ctx, abs, writable))
}

// otherPython names an interpreter with ipykernel that discovery finds,
// other than not, as a suggestion (", such as /usr/bin/python3"), or "".
func otherPython(ctx context.Context, not string, writable []string) string {
	if os.Getenv("IPYBOX_PYTHON") != "" {
		return ""
	}
	if p, err := FindPython(ctx, "", writable...); err == nil && p != not {
		return ", such as " + p
	}
	return ""
}

// errNoIpykernel is a probe's error for a Python without ipykernel.
var errNoIpykernel = errors.New("no module named ipykernel")

// noIpykernelExit is the probe's exit status for "no ipykernel": a status,
// not a message, so that nothing depends on what Python prints.
const noIpykernelExit = 17

func resolve(p string) (string, error) {
	if filepath.Base(p) == p {
		return exec.LookPath(p)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", err
	}
	return abs, nil
}

// candidates lists the interpreters to probe on this system, in order.
func candidates(ctx context.Context) []string {
	return pythonCandidates(runtime.GOOS, os.Getenv("PATH"), isExecutable, func() string { return pyLauncher(ctx) })
}

// pythonCandidates lists, without duplicates, the interpreters to probe on
// the system goos: every Python 3 on path (a PATH value), then the usual
// places, which a program started from a desktop (not a shell) may not
// have on its PATH:
//   - Linux and other Unix: /usr/bin/python3.
//   - macOS: Homebrew's (/opt/homebrew/bin/python3 on Apple silicon,
//     /usr/local/bin/python3 on Intel), then /usr/bin/python3, which is
//     never probed (from PATH either) unless the command line tools are
//     installed: without them it is a stub that opens an installer dialog.
//   - Windows: python.exe and python3.exe on PATH, except the Microsoft
//     Store's aliases (they open the Store), then what the py launcher
//     runs for -3 (py asked for sys.executable).
//
// exists reports whether a file is an executable; py returns the py
// launcher's interpreter ("" when there is none). Both are parameters so
// that every system's list is tested on any system.
func pythonCandidates(goos, path string, exists func(string) bool, py func() string) []string {
	var out []string
	seen := map[string]bool{}
	// macOS's /usr/bin/python3 without the command line tools is a stub
	// that opens an installer dialog: never run it.
	stub := goos == "darwin" && !exists("/Library/Developer/CommandLineTools/usr/bin/python3") &&
		!exists("/Applications/Xcode.app/Contents/Developer/usr/bin/python3")
	add := func(p string) {
		if p == "" || seen[p] || !exists(p) || (stub && p == "/usr/bin/python3") {
			return
		}
		seen[p] = true
		out = append(out, p)
	}
	sep, join, names := ":", joinSlash, []string{"python3"}
	if goos == "windows" {
		sep, join, names = ";", joinBackslash, []string{"python.exe", "python3.exe"}
	}
	for _, dir := range strings.Split(path, sep) {
		if dir == "" || (goos == "windows" && strings.Contains(strings.ToLower(dir), `\microsoft\windowsapps`)) {
			continue
		}
		for _, n := range names {
			add(join(dir, n))
		}
	}
	switch goos {
	case "windows":
		add(py())
	case "darwin":
		add("/opt/homebrew/bin/python3")
		add("/usr/local/bin/python3")
		add("/usr/bin/python3")
	default:
		add("/usr/bin/python3")
	}
	return out
}

func joinSlash(dir, name string) string { return strings.TrimRight(dir, "/") + "/" + name }

func joinBackslash(dir, name string) string { return strings.TrimRight(dir, `\/`) + `\` + name }

// isExecutable reports whether p is a regular file this system would run.
func isExecutable(p string) bool {
	st, err := os.Stat(p)
	if err != nil || st.IsDir() {
		return false
	}
	return runtime.GOOS == "windows" || st.Mode()&0o111 != 0
}

// pyLauncher returns the interpreter Windows' py launcher runs for -3, or
// "" when there is no launcher (or this is not Windows).
func pyLauncher(ctx context.Context) string {
	if runtime.GOOS != "windows" {
		return ""
	}
	py, err := exec.LookPath("py")
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-3", "-c", "import sys; print(sys.executable)")
	cmd.Env = append(minimalEnv(), hostproc.PythonSafePath)
	if _, err := hostproc.Prepare(cmd, nil); err != nil {
		return ""
	}
	cmd.WaitDelay = probeWaitDelay
	out, err := cmd.Output() // bound: probeTimeout, then probeWaitDelay
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func probe(ctx context.Context, python string, writable []string) error {
	if v, ok := probeCache.Load(python); ok {
		if v == nil {
			return nil
		}
		return v.(error)
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	// find_spec locates the package without importing it (an import of
	// ipykernel costs a tenth of a second); a broken installation still
	// shows, with its traceback, when the kernel starts.
	cmd := exec.CommandContext(ctx, python, "-c",
		"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('ipykernel') and print('"+probeMark+"') is None else "+strconv.Itoa(noIpykernelExit)+")")
	// Not in ipybox's working folder (the workspace, often): -c would put
	// it first on sys.path, and find_spec would find the kernel's own
	// ipykernel there (invariant 14).
	cmd.Env = append(minimalEnv(), hostproc.PythonSafePath)
	if _, err := hostproc.Prepare(cmd, writable); err != nil {
		return fmt.Errorf("probe: %w", err) // not cached: may be transient
	}
	cmd.WaitDelay = probeWaitDelay
	out, err := cmd.CombinedOutput() // bound: probeTimeout, then probeWaitDelay
	if ctx.Err() != nil {
		return fmt.Errorf("probe: %w", ctx.Err()) // not cached: may be transient
	}
	if err != nil {
		msg := strings.TrimSpace(string(out))
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == noIpykernelExit {
			err = errNoIpykernel
		} else if msg != "" {
			err = fmt.Errorf("%v: %s", err, msg)
		}
		probeCache.Store(python, err)
		return err
	}
	if !strings.Contains(string(out), probeMark) {
		// It ran and exited 0 without a Python's answer (/usr/bin/true).
		err = errors.New("it exited 0 without the answer a Python prints")
		if c := clipProbe(out); c != "" {
			err = fmt.Errorf("it exited 0, printing %q, not the answer a Python prints", c)
		}
		probeCache.Store(python, err)
		return err
	}
	probeCache.Store(python, nil)
	return nil
}

// probeMark is what the probe prints when the interpreter is a Python 3
// with ipykernel: a program that exits 0 on any arguments is not one.
const probeMark = "ipybox-probe: ipykernel found"

func clipProbe(out []byte) string {
	s := strings.TrimSpace(string(out))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// minimalEnv is the environment for short helper processes: enough to find
// programs and decode text, nothing secret.
func minimalEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "LANG", "PYENV_ROOT", "PYENV_VERSION",
		"SYSTEMROOT", "LOCALAPPDATA", "USERPROFILE"} { // Windows' Python needs these to start
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}
