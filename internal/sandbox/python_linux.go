package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/ipybox/ipybox/internal/hostproc"
)

// pythonFor returns the host directories the interpreter at path needs
// (its prefixes, symbolic links resolved) and its real executable, asking
// the interpreter once per path. Asking runs it in a sandbox of its own
// that can change nothing and reach no network (askPython): the path may
// be a client's choice, and the file kernel code's. An interpreter in a
// place this sandbox can write (a venv in the workspace) is not asked:
// its pyvenv.cfg names the base interpreter, which is asked instead, if
// it lives outside those places. One in a place that only another
// sandbox's kernel code can write (another principal's folder, a
// kernel's run directory) is neither asked nor bound. An answer's prefix
// is bound only if it looks like a Python installation and lies outside
// every place kernel code writes. A program that is not Python gets no
// extra directories.
func (s *Sandbox) pythonFor(ctx context.Context, path, runDir string) (prefixes []string, executable string) {
	own := []string{s.workspace}
	if runDir != "" {
		own = append(own, runDir)
	}
	if aw, err := expandAll(s.cfg.Filesystem.AllowWrite, s.workspace, s.home, false); err == nil {
		own = append(own, aw...)
	}
	foreign := s.hostWritable() // every sandbox's of this process, Options.KernelWritable; and hostproc.KernelRunDir
	in := func(p string, dirs []string) bool {
		if underAny(p, dirs) {
			return true
		}
		r, err := filepath.EvalSymlinks(p)
		return err != nil || underAny(r, dirs)
	}
	inForeign := func(p string) bool {
		if in(p, foreign) || hostproc.KernelRunDir(p) != "" {
			return true
		}
		r, err := filepath.EvalSymlinks(p)
		return err == nil && hostproc.KernelRunDir(r) != ""
	}
	inWritable := func(p string) bool { return in(p, own) || inForeign(p) }
	if inForeign(path) && !in(path, own) {
		s.log.Warn("sandbox: the interpreter lies where another sandbox's kernel code writes (another principal's folder, a kernel's run directory); it is neither asked nor bound", "path", path)
		return nil, ""
	}
	ask, keepPath := path, false
	var venvRO []string
	if inWritable(path) {
		venv := filepath.Dir(filepath.Dir(path))
		if r, err := filepath.EvalSymlinks(venv); err != nil || inForeign(r) && !in(r, own) {
			// A link in this workspace to another sandbox's venv: its
			// binding would show that sandbox's files here.
			s.log.Warn("sandbox: the interpreter's folder leads where another sandbox's kernel code writes; it is neither asked nor bound", "path", path)
			return nil, ""
		}
		home := pyvenvHome(venv)
		if home == "" {
			return nil, ""
		}
		// The venv itself is bound read-only over the writable folder:
		// kernel code must not write its site-packages (a .pth file runs
		// at every start of the interpreter) nor its pyvenv.cfg, for the
		// next kernel's sake and for any host process that runs it.
		// ipybox's own venv (.ipybox/venv) has binds of its own, and its
		// pip helper writes it.
		if !under(venv, filepath.Join(s.workspace, ".ipybox")) {
			venvRO = []string{venv}
		}
		ask = ""
		for _, name := range []string{"python3", "python"} {
			if c := filepath.Join(home, name); !inWritable(c) {
				if _, err := os.Stat(c); err == nil {
					ask = c
					break
				}
			}
		}
		if ask == "" {
			return nil, ""
		}
		keepPath = true
	}
	if systemPython(ask) {
		// Its prefixes are under /usr, which the minimal root shows anyway:
		// asking it (an interpreter start) would add nothing.
		if keepPath {
			return venvRO, ""
		}
		return nil, ask
	}
	if w := othersCanReplace(ask); w != "" {
		// Another user could have put it there: its answer is theirs.
		s.log.Warn("sandbox: not asking the interpreter for its prefix: another user could have replaced it; not bound (add what it needs to extraRead)", "path", ask, "because_of", w)
		return nil, ""
	}
	info := s.askPython(ctx, ask)
	if info.err != nil {
		s.log.Debug("sandbox: not a Python interpreter (or it failed); no prefix added", "path", ask, "err", info.err)
		return venvRO, ""
	}
	prefixes = s.bindable(info.prefixes, inWritable)
	if keepPath {
		return append(prefixes, venvRO...), ""
	}
	return prefixes, info.executable
}

// bindable returns the prefixes of an interpreter's answer that may be
// bound into the sandbox: not under /usr (shown anyway), not / nor a
// folder holding home, not where kernel code writes, and a Python
// installation (pythonPrefix). The answer may be kernel code's.
func (s *Sandbox) bindable(prefixes []string, inWritable func(string) bool) (out []string) {
	for _, p := range prefixes {
		switch {
		case s.cfg.RootMode == RootHost, under(p, "/usr"):
		case p == "/" || s.home != "" && under(s.home, p):
			s.log.Warn("sandbox: the Python prefix is / or contains the home directory; not bound (add what it needs to extraRead)", "prefix", p)
		case inWritable(p):
			s.log.Warn("sandbox: the Python prefix lies where kernel code writes; not bound", "prefix", p)
		case !pythonPrefix(p):
			s.log.Warn("sandbox: the interpreter's answer names a folder that holds no Python installation (lib/python3.* beside bin/python3 or a pyvenv.cfg); not bound", "prefix", p)
		default:
			out = append(out, p)
		}
	}
	return out
}

// pythonPrefix reports whether dir holds a Python installation: a
// lib/python3.* (or lib64/) folder, and an interpreter (bin/python3*) or
// a virtualenv's pyvenv.cfg. Not a folder of user site packages
// (~/.local holds lib/python3.11, and ~/.local/share the keyrings).
func pythonPrefix(dir string) bool {
	lib := false
	for _, l := range []string{"lib", "lib64"} {
		if m, _ := filepath.Glob(filepath.Join(dir, l, "python3*")); len(m) > 0 {
			lib = true
		}
	}
	if !lib {
		return false
	}
	if _, err := os.Stat(filepath.Join(dir, "pyvenv.cfg")); err == nil {
		return true
	}
	m, _ := filepath.Glob(filepath.Join(dir, "bin", "python3*"))
	return len(m) > 0
}

// othersCanReplace returns the first of path, the file it leads to and
// their folders that another user could replace or change (owned by
// neither this user nor root, or writable by group or others without
// the sticky bit); "" when none.
func othersCanReplace(path string) string {
	uid := uint32(os.Getuid())
	paths := []string{path}
	if r, err := filepath.EvalSymlinks(path); err == nil {
		paths = append(paths, r)
	}
	for _, p := range paths {
		for q := filepath.Clean(p); ; q = filepath.Dir(q) {
			fi, err := os.Lstat(q)
			if err != nil {
				return q
			}
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok || st.Uid != uid && st.Uid != 0 {
				return q
			}
			if fi.Mode()&os.ModeSymlink == 0 && fi.Mode().Perm()&0o022 != 0 && !(fi.IsDir() && fi.Mode()&os.ModeSticky != 0) {
				return q
			}
			if q == "/" || q == "." {
				break
			}
		}
	}
	return ""
}

// isPythonName reports whether path's file name is a Python
// interpreter's (python, python3, python3.11): Command asks only those
// for their prefixes, since asking runs the program on the host with
// Python's arguments.
func isPythonName(path string) bool {
	rest, ok := strings.CutPrefix(filepath.Base(path), "python")
	return ok && strings.Trim(rest, "0123456789.") == ""
}

// systemPython reports whether path resolves to an interpreter under /usr
// that is not a virtual environment's. A virtual environment's bin/python
// is a link to its base interpreter (/usr/bin/python3): its pyvenv.cfg is
// beside the link, not beside what the link leads to, and its prefix (the
// packages) is outside /usr.
func systemPython(path string) bool {
	r, err := filepath.EvalSymlinks(path)
	if err != nil || !under(r, "/usr") {
		return false
	}
	for _, d := range []string{filepath.Dir(path), filepath.Dir(filepath.Dir(path)), filepath.Dir(r), filepath.Dir(filepath.Dir(r))} {
		if _, err := os.Stat(filepath.Join(d, "pyvenv.cfg")); err == nil {
			return false
		}
	}
	return true
}

// pyvenvHome returns the "home" key of a virtual environment's pyvenv.cfg.
func pyvenvHome(venv string) string {
	b, err := os.ReadFile(filepath.Join(venv, "pyvenv.cfg"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.TrimSpace(k) == "home" {
			if h := strings.TrimSpace(v); filepath.IsAbs(h) {
				return filepath.Clean(h)
			}
		}
	}
	return ""
}

func (s *Sandbox) askPython(ctx context.Context, path string) *pyInfo {
	s.pyMu.Lock()
	defer s.pyMu.Unlock()
	if info, ok := s.py[path]; ok {
		return info
	}
	ctx, cancel := context.WithTimeout(ctx, pythonTimeout)
	defer cancel()
	// In a sandbox that can change nothing (the file may be kernel
	// code's): the host's tree read-only, a /tmp of its own, no network,
	// no capabilities, working in / (a .python-version in the workspace
	// could steer a pyenv shim; invariant 14).
	out, err := s.runConfined(ctx, hostproc.Env([]string{"PATH", "HOME", "LANG", "PYENV_ROOT", "PYENV_VERSION"}),
		path, "-I", "-c", "import sys\nfor v in (sys.executable, sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix): print(v)")
	info := &pyInfo{}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	switch {
	case ctx.Err() != nil:
		return &pyInfo{err: ctx.Err()} // not cached: may be transient
	case err != nil:
		info.err = err
	case len(lines) != 5:
		info.err = fmt.Errorf("unexpected answer (%d lines, %d bytes): not a Python's", len(lines), len(out)) // not the text: the program may be kernel code's, reading what this user can
	default:
		info.executable = filepath.Clean(lines[0])
		for _, p := range lines[1:] {
			if r, err := filepath.EvalSymlinks(p); err == nil && filepath.IsAbs(r) && !slices.Contains(info.prefixes, r) {
				info.prefixes = append(info.prefixes, r)
			}
		}
	}
	s.py[path] = info
	return info
}
