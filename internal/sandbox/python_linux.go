package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ipybox/ipybox/internal/hostproc"
)

// pythonFor returns the host directories the interpreter at path needs
// (its prefixes, symbolic links resolved) and its real executable, asking
// the interpreter once per path. An interpreter in a place the sandbox can
// write (a venv in the workspace) is never run on the host: its pyvenv.cfg
// names the base interpreter, which is asked instead, if it lives outside
// those places. A program that is not Python gets no extra directories.
func (s *Sandbox) pythonFor(ctx context.Context, path, runDir string) (prefixes []string, executable string) {
	writable := []string{s.workspace, runDir}
	if aw, err := expandAll(s.cfg.Filesystem.AllowWrite, s.workspace, s.home, false); err == nil {
		writable = append(writable, aw...)
	}
	inWritable := func(p string) bool {
		if underAny(p, writable) {
			return true
		}
		r, err := filepath.EvalSymlinks(p)
		return err != nil || underAny(r, writable)
	}
	ask, keepPath := path, false
	if inWritable(path) {
		home := pyvenvHome(filepath.Dir(filepath.Dir(path)))
		if home == "" {
			return nil, ""
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
			return nil, ""
		}
		return nil, ask
	}
	info := s.askPython(ctx, ask)
	if info.err != nil {
		s.log.Debug("sandbox: not a Python interpreter (or it failed); no prefix added", "path", ask, "err", info.err)
		return nil, ""
	}
	for _, p := range info.prefixes {
		switch {
		case s.cfg.RootMode == RootHost, under(p, "/usr"):
		case p == "/" || s.home != "" && under(s.home, p):
			s.log.Warn("sandbox: the Python prefix is / or contains the home directory; not bound (add what it needs to extraRead)", "prefix", p)
		default:
			prefixes = append(prefixes, p)
		}
	}
	if keepPath {
		return prefixes, ""
	}
	return prefixes, info.executable
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
	cmd := exec.CommandContext(ctx, path, "-I", "-c",
		"import sys\nfor v in (sys.executable, sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix): print(v)")
	// Not in the workspace: a .python-version there could steer a pyenv
	// shim (invariant 14).
	cmd.Env = hostproc.Env([]string{"PATH", "HOME", "LANG", "PYENV_ROOT", "PYENV_VERSION"})
	if _, err := hostproc.Prepare(cmd, nil); err != nil {
		return &pyInfo{err: err} // not cached: may be transient
	}
	// Killed at the deadline, a wrapper's child may keep stdout open: the
	// answer must not wait for it (every start waits behind pyMu).
	cmd.WaitDelay = time.Second
	out, err := cmd.Output() // bound: pythonTimeout, then WaitDelay
	info := &pyInfo{}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	switch {
	case ctx.Err() != nil:
		return &pyInfo{err: ctx.Err()} // not cached: may be transient
	case err != nil:
		info.err = err
	case len(lines) != 5:
		info.err = fmt.Errorf("unexpected answer %q", out)
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
