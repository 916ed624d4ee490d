package mcpserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/flock"
	"github.com/ipybox/ipybox/internal/hostproc"
	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/procattr"
	"github.com/ipybox/ipybox/internal/safefs"
	"github.com/ipybox/ipybox/internal/statedir"
)

const (
	venvTimeout = 2 * time.Minute
	pipTimeout  = 10 * time.Minute
)

// venvDir is the kernel's virtualenv in a workspace.
func venvDir(workspace string) string { return filepath.Join(workspace, ".ipybox", "venv") }

// The virtualenv is in the workspace, where kernel code can write: a .pth
// file in its site-packages, or a replaced bin/python, runs whatever
// kernel code chose in any interpreter that loads that venv. So the host
// never runs the venv's interpreter, nor imports from it:
//   - sandboxed, the venv is created, checked and used by pip inside the
//     sandbox, like the kernel;
//   - unsandboxed, venv and pip run with the base interpreter in isolated
//     mode (-I: no PYTHON* variables, no user site), which loads only its
//     own site-packages, and pip installs into the venv with --prefix.
// A venv whose bin/python is gone is not repaired in place (that would
// write through whatever links kernel code left in it): it is moved
// aside, and a fresh one made.

// venvPython returns the interpreter of the tenant's virtualenv,
// creating the virtualenv first when it is missing. It is created with
// --system-site-packages from the discovered interpreter, so that the
// system's ipykernel (and numpy, matplotlib, ...) stay importable while
// pip installs into the virtualenv.
func (t *tenant) venvPython(ctx context.Context) (string, error) {
	t.venvMu.Lock()
	defer t.venvMu.Unlock()
	if t.venvPy != "" {
		return t.venvPy, nil
	}
	unlock, err := t.lockVenv(ctx)
	if err != nil {
		return "", err
	}
	defer unlock()
	t.removeStaleVenvBuilds()
	dir := venvDir(t.dir)
	py := filepath.Join(dir, "bin", "python")
	if _, err := os.Lstat(py); err == nil {
		t.warnOtherBase(dir)
		if t.s.factory.sandbox != nil {
			// Its kernels need the base venv's prefix bound, as asked of
			// the base now (not read from the virtualenv).
			if base, err := kernel.FindPython(ctx, t.s.opts.Python); err == nil {
				t.baseVenv = t.probeBaseVenv(ctx, base)
			}
		}
		t.venvPy = py
		return py, nil
	}
	// Not run on the host when it lies where kernels write (a venv in the
	// workspace): the helpers then run it in the sandbox.
	base, err := kernel.FindPython(ctx, t.s.opts.Python, t.s.opts.Workspace, t.dir)
	if err != nil {
		return "", err
	}
	t.baseVenv = t.probeBaseVenv(ctx, base)
	if err := t.moveAsideBrokenVenv(); err != nil {
		return "", err
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(ctx, venvTimeout)
	defer cancel()
	if err := t.buildVenvAside(ctx, base); err != nil {
		return "", err
	}
	t.s.log.Info("virtualenv created", "dir", dir, "from", base, "took", time.Since(t0).Round(time.Millisecond))
	t.venvBase, t.venvPy = base, py
	return py, nil
}

// lockVenv takes the workspace's venv lock (.ipybox/venv.lock), which
// another ipybox mcp on the same workspace (say, a second client's stdio
// server) holds while it makes the venv: without it, one took the other's
// half-made venv for a broken one and moved it aside. The wait is bounded
// by the time a venv may take to make; kernel code, which can write the
// workspace, can hold the lock too, and then delays only this workspace's
// venv. The lock is advisory, and there is none on Windows.
func (t *tenant) lockVenv(ctx context.Context) (unlock func(), err error) {
	const name = "venv.lock"
	if _, err := statedir.Ensure(t.dir); err != nil {
		return nil, fmt.Errorf("lock the virtualenv: %w", err)
	}
	f, err := safefs.OpenFile(t.dir, filepath.Join(".ipybox", name), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock the virtualenv: %w", err)
	}
	if err := flock.Lock(ctx, f, true, venvTimeout); err != nil {
		f.Close()
		return nil, fmt.Errorf("the virtualenv of %s is being made by another process: %w", t.dir, err)
	}
	return func() { f.Close() }, nil
}

// moveAsideBrokenVenv renames a venv without bin/python out of the way.
func (t *tenant) moveAsideBrokenVenv() error {
	dir := venvDir(t.dir)
	if _, err := os.Lstat(dir); err != nil {
		return nil
	}
	aside := fmt.Sprintf("venv.broken-%s", time.Now().Format("20060102-150405.000"))
	if err := safefs.Rename(t.dir, filepath.Join(".ipybox", "venv"), filepath.Join(".ipybox", aside)); err != nil {
		return fmt.Errorf("the virtualenv %s has no bin/python, and it cannot be moved aside (%v); remove it", dir, err)
	}
	t.s.log.Warn("the virtualenv had no bin/python; moved it aside and making a fresh one", "moved_to", filepath.Join(t.dir, ".ipybox", aside))
	return nil
}

// buildVenvAside makes the virtualenv in a folder of its own beside
// .ipybox/venv and renames it into place when it is whole: a server
// stopped while it makes it (claude mcp list, an Inspector tools/list
// stop the server within a second of its start) leaves no half-made venv
// for the next start to take for a broken one. The folders such a stop
// leaves are removed by the next server that takes the venv lock (no
// other is making one then; removeStaleVenvBuilds). The interpreter finds its prefix from the
// pyvenv.cfg beside its bin/, so the renamed venv works; the pip scripts,
// whose first line names a path, are written for the final one.
func (t *tenant) buildVenvAside(ctx context.Context, base string) error {
	rel := filepath.Join(".ipybox", venvBuildPrefix+newFolderName())
	if err := safefs.MkdirAll(t.dir, rel, 0o755); err != nil {
		return fmt.Errorf("create the virtualenv: %w", err)
	}
	tmp := filepath.Join(t.dir, rel)
	if err := t.makeVenv(ctx, base, tmp, venvDir(t.dir)); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	// What it was made from, for warnOtherBase (a record kernel code can
	// rewrite: it decides a warning only).
	if err := safefs.WriteFile(t.dir, filepath.Join(rel, venvBaseRecord), []byte(base+"\n"), 0o644); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("create the virtualenv: %w", err)
	}
	if err := safefs.Rename(t.dir, rel, filepath.Join(".ipybox", "venv")); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("create the virtualenv: move %s into place: %w", tmp, err)
	}
	return nil
}

// venvBaseRecord, in the venv, names the interpreter it was made from.
const venvBaseRecord = "ipybox-base"

// warnOtherBase warns when the interpreter asked for (--python or
// $IPYBOX_PYTHON) is not the one the workspace's kept virtualenv dir was
// made from: its kernels go on running on the first, and the fix is to
// remove the folder. Nothing is said of a venv made before the record.
func (t *tenant) warnOtherBase(dir string) {
	asked, how := t.s.opts.Python, "--python"
	if asked == "" {
		asked, how = os.Getenv("IPYBOX_PYTHON"), "$IPYBOX_PYTHON"
	}
	if asked == "" {
		return
	}
	if filepath.Base(asked) == asked {
		if p, err := exec.LookPath(asked); err == nil {
			asked = p
		}
	}
	if abs, err := filepath.Abs(asked); err == nil {
		asked = abs
	}
	b, err := safefs.ReadFile(dir, venvBaseRecord, 4096)
	if err != nil {
		return
	}
	if made := strings.TrimSpace(string(b)); made != "" && !samePython(made, asked) {
		t.s.log.Warn(fmt.Sprintf("the workspace's virtualenv %s was made from %s, not from %s %s: its kernels run on the first; remove the folder to have it made anew from %s", dir, made, how, asked, asked))
	}
}

// samePython reports whether interpreters a and b are one: the same file
// once links are followed, and the same virtualenv's (a venv's bin/python
// is a link to its base, and yet another interpreter: another
// site-packages).
func samePython(a, b string) bool {
	if a == b {
		return true
	}
	ra, errA := filepath.EvalSymlinks(a)
	rb, errB := filepath.EvalSymlinks(b)
	return errA == nil && errB == nil && ra == rb && venvOf(a) == venvOf(b)
}

// venvOf returns the folder of the virtualenv whose interpreter py is
// (the folder above its bin/, with a pyvenv.cfg), or "".
func venvOf(py string) string {
	prefix := filepath.Dir(filepath.Dir(py))
	if _, err := os.Stat(filepath.Join(prefix, "pyvenv.cfg")); err == nil {
		return prefix
	}
	return ""
}

// venvBuildPrefix names the folders a virtualenv is made in.
const venvBuildPrefix = "venv.building-"

// removeStaleVenvBuilds removes the folders of makes that were stopped
// (os.RemoveAll works beneath an open directory, and removes a link
// rather than what it leads to). The caller holds the venv lock.
func (t *tenant) removeStaleVenvBuilds() {
	old, _ := filepath.Glob(filepath.Join(t.dir, ".ipybox", venvBuildPrefix+"*"))
	for _, d := range old {
		if err := os.RemoveAll(d); err != nil {
			t.s.log.Warn("could not remove a stopped virtualenv build", "dir", d, "err", err)
		}
	}
}

// makeVenv creates the virtualenv dir (already there, empty) from base,
// for use at final (where it is renamed to).
// Without its own pip it takes milliseconds instead of seconds: when the
// system's pip is visible (through --system-site-packages), bin/pip runs
// it with the virtualenv's interpreter, which installs into the
// virtualenv. Otherwise ensurepip installs a pip of its own.
func (t *tenant) makeVenv(ctx context.Context, base, dir, final string) error {
	if out, err := t.helperIn(ctx, dir, base, "-I", "-m", "venv", "--system-site-packages", "--without-pip", dir); err != nil {
		var we *hostproc.WritableError
		if errors.As(err, &we) {
			// Not a missing venv module: the interpreter is kernel code's.
			return fmt.Errorf("create the virtualenv with %s: %w; point --python (or IPYBOX_PYTHON) at an interpreter outside the workspace", base, err)
		}
		return fmt.Errorf("create the virtualenv %s with %s -m venv: %w\n%s\n(on Debian, install python3-venv)", dir, base, err, strings.TrimSpace(string(out)))
	}
	if t.baseVenv != nil {
		if err := writeBaseVenvPth(dir, t.baseVenv); err != nil {
			return err
		}
	}
	// Whether the base's pip is there is asked of the base, isolated:
	// the venv's interpreter is not run for it.
	if _, err := t.helper(ctx, base, "-I", "-c", "import pip"); err == nil {
		return writePipShims(dir, final, []string{"pip", "pip3"})
	}
	if t.s.factory.sandbox == nil {
		return fmt.Errorf("the interpreter %s has no pip, which install_package needs; install it (on Debian: apt-get install python3-pip)", base)
	}
	// Inside the sandbox, the fresh venv's own interpreter may install a
	// pip of its own.
	if out, err := t.helperIn(ctx, dir, filepath.Join(dir, "bin", "python"), "-m", "ensurepip", "--default-pip"); err != nil {
		return fmt.Errorf("install pip into the virtualenv %s: %w\n%s\n(on Debian, install python3-pip)", dir, err, strings.TrimSpace(string(out)))
	}
	// ensurepip's scripts name dir in their first line.
	names, _ := filepath.Glob(filepath.Join(dir, "bin", "pip*"))
	for i, n := range names {
		names[i] = filepath.Base(n)
	}
	return writePipShims(dir, final, names)
}

// writePipShims writes bin/<name> of the venv being made in dir, each
// running pip with the interpreter of final, where the venv will be.
func writePipShims(dir, final string, names []string) error {
	py := filepath.Join(final, "bin", "python")
	shim := "#!/bin/sh\n# ipybox: pip, run by this virtualenv's interpreter, installs here.\nexec \"" + py + "\" -m pip \"$@\"\n"
	for _, name := range names {
		if err := safefs.WriteFile(dir, filepath.Join("bin", name), []byte(shim), 0o755); err != nil {
			return fmt.Errorf("create the virtualenv %s: %w", dir, err)
		}
	}
	return nil
}

// helper runs a venv or pip step: inside the sandbox when kernels are
// sandboxed, on the host otherwise (only ever with the base interpreter).
// Sandboxed, it is the one process that may write the shared virtualenv
// (the kernels see it read-only): it makes the virtualenv, or installs an
// approved package.
func (t *tenant) helper(ctx context.Context, path string, args ...string) ([]byte, error) {
	return t.helperIn(ctx, venvDir(t.dir), path, args...)
}

// helperIn is helper with writable, instead of the venv, the one folder a
// sandboxed helper may write.
func (t *tenant) helperIn(ctx context.Context, writable, path string, args ...string) ([]byte, error) {
	env := helperEnv(t.s.opts.KernelEnv)
	env = append(env, "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1", "PYTHONUNBUFFERED=1")
	if t.s.factory.sandbox == nil {
		return runCommand(ctx, t.dir, env, path, args...)
	}
	cmd, release, err := ipybox.SandboxedCommand(ctx, t.dir, path, args,
		&ipybox.CommandOptions{Sandbox: t.sandboxConfig(), Env: env, Writable: []string{writable}, KernelWritable: []string{t.s.workspace}})
	if err != nil {
		return nil, err
	}
	defer release()
	return runCmd(ctx, cmd)
}

// runPip runs pip with args, in the workspace, and returns its combined
// output: sandboxed, the venv's pip inside the sandbox; unsandboxed, the
// base interpreter's pip, isolated, installing into the venv (--prefix).
func (t *tenant) runPip(ctx context.Context, args ...string) ([]byte, error) {
	py, err := t.venvPython(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, pipTimeout)
	defer cancel()
	if t.s.factory.sandbox != nil {
		out, err := t.helper(ctx, py, append([]string{"-m", "pip"}, args...)...)
		if hint := pipNetworkHint(out); err != nil && hint != "" {
			err = fmt.Errorf("%w; %s", err, hint)
		}
		return out, err
	}
	base := t.venvBase
	if base == "" {
		if base, err = venvHome(venvDir(t.dir)); err != nil {
			return nil, err
		}
	}
	if len(args) > 0 && args[0] == "install" {
		// Into the venv's own site-packages, which is on a running
		// kernel's sys.path already (a --prefix install may land in a
		// directory the kernel did not see at start, as on Debian).
		site, err := venvSitePackages(venvDir(t.dir))
		if err != nil {
			return nil, err
		}
		args = append([]string{"install", "--target", site, "--no-warn-script-location"}, args[1:]...)
	}
	// Debian's interpreter is "externally managed"; --target installs into
	// the venv, not into it, so pip may go ahead.
	env := append(helperEnv(t.s.opts.KernelEnv), "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1", "PYTHONUNBUFFERED=1", "PIP_BREAK_SYSTEM_PACKAGES=1")
	return runCommand(ctx, t.dir, env, base, append([]string{"-I", "-m", "pip"}, hostPipArgs(t.dir, args)...)...)
}

// venvSitePackages returns the venv's site-packages directory (made by
// venv as lib/pythonX.Y/site-packages), refusing links.
func venvSitePackages(dir string) (string, error) {
	ents, err := os.ReadDir(filepath.Join(dir, "lib"))
	if err != nil {
		return "", fmt.Errorf("the virtualenv %s: %w", dir, err)
	}
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "python") {
			rel := filepath.Join("lib", e.Name(), "site-packages")
			if f, err := safefs.OpenFile(dir, rel, os.O_RDONLY, 0); err == nil {
				f.Close()
				return filepath.Join(dir, rel), nil
			}
		}
	}
	return "", fmt.Errorf("the virtualenv %s has no lib/python*/site-packages; remove it to have ipybox make a fresh one", dir)
}

// venvHome returns the base interpreter of a venv, from its pyvenv.cfg
// (read without following a link), checked to lie outside the venv.
func venvHome(dir string) (string, error) {
	b, err := safefs.ReadFile(dir, "pyvenv.cfg", 64<<10)
	if err != nil {
		return "", fmt.Errorf("the virtualenv %s: %w", dir, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) != "home" {
			continue
		}
		home := filepath.Clean(strings.TrimSpace(v))
		for _, name := range []string{"python3", "python"} {
			p := filepath.Join(home, name)
			if !filepath.IsAbs(p) || strings.HasPrefix(p, filepath.Dir(dir)+"/") {
				break
			}
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("the virtualenv %s names no base interpreter outside it; remove the folder to have ipybox make a fresh one", dir)
}

// looksOffline reports whether pip's output says it could not connect.
func looksOffline(out []byte) bool {
	for _, s := range []string{"NewConnectionError", "Failed to establish a new connection", "ProxyError",
		"Temporary failure in name resolution", "Network is unreachable", "Tunnel connection failed"} {
		if bytes.Contains(out, []byte(s)) {
			return true
		}
	}
	return false
}

// helperEnv is the environment of pip and venv: the kernel's basic
// variables and the caller's extra ones, nothing else of ours.
func helperEnv(extra map[string]string) []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "LANG"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+extra[k])
	}
	return env
}

// hostPipArgs makes pip's local paths absolute: relative ones are the
// workspace's (localRequirementInside), and on the host pip runs in a
// private folder, not there.
func hostPipArgs(workspace string, args []string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if !strings.HasPrefix(a, "-") && !strings.Contains(a, "://") && !filepath.IsAbs(a) &&
			(strings.HasPrefix(a, ".") || strings.ContainsAny(a, `/\`)) {
			out[i] = filepath.Join(workspace, a)
		}
	}
	return out
}

// runCommand runs a helper on the host in its own process group, which
// is killed whole when ctx ends. It starts in the private folder of host
// processes, never in the workspace (invariant 14: a module there would
// shadow the helper's own), with the search-path entries of env that lie
// in the workspace dropped.
func runCommand(ctx context.Context, workspace string, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = env
	if _, err := hostproc.Prepare(cmd, []string{workspace}); err != nil {
		return nil, err
	}
	return runCmd(ctx, cmd)
}

// runCmd runs cmd in its own process group (unless it has its own process
// attributes), killed whole when ctx ends, and returns its combined output.
func runCmd(ctx context.Context, cmd *exec.Cmd) ([]byte, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = procattr.Group()
	}
	// The helper's exit is what counts: a child that left its group with
	// the output pipe (a daemon a package's build started) must not hold
	// Wait after it.
	cmd.WaitDelay = 3 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }() // bound: done is buffered; WaitDelay after the exit
	select {
	case err := <-done:
		if errors.Is(err, exec.ErrWaitDelay) {
			err = nil // it exited 0; the straggler's output is not its
		}
		return out.Bytes(), err
	case <-ctx.Done():
		procattr.SignalGroup(cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			procattr.SignalGroup(cmd.Process.Pid, syscall.SIGKILL)
			<-done // bound: the group was killed; WaitDelay
		}
		err := ctx.Err()
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("timed out: %w", err)
		}
		return out.Bytes(), err
	}
}
