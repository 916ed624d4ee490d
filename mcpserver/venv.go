package mcpserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/ipybox/ipybox"
)

const (
	venvTimeout = 2 * time.Minute
	pipTimeout  = 10 * time.Minute
)

// venvDir is the kernel's virtualenv in a workspace.
func venvDir(workspace string) string { return filepath.Join(workspace, ".ipybox", "venv") }

// venvPython returns the interpreter of the workspace's virtualenv,
// creating the virtualenv first when it is missing. It is created with
// --system-site-packages from the discovered interpreter, so that the
// system's ipykernel (and numpy, matplotlib, ...) stay importable while
// pip installs into the virtualenv.
func (s *Server) venvPython(ctx context.Context) (string, error) {
	s.venvMu.Lock()
	defer s.venvMu.Unlock()
	if s.venvPy != "" {
		return s.venvPy, nil
	}
	dir := venvDir(s.workspace)
	py := filepath.Join(dir, "bin", "python")
	if _, err := os.Stat(py); err == nil {
		s.venvPy = py
		return py, nil
	}
	base, err := ipybox.FindPython(ctx, s.opts.Python)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", fmt.Errorf("create the virtualenv: %w", err)
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(ctx, venvTimeout)
	defer cancel()
	if err := makeVenv(ctx, base, dir); err != nil {
		os.RemoveAll(dir) // a half-made virtualenv would be taken as made
		return "", err
	}
	s.log.Info("virtualenv created", "dir", dir, "from", base, "took", time.Since(t0).Round(time.Millisecond))
	s.venvPy = py
	return py, nil
}

// makeVenv creates the virtualenv dir from base. Without its own pip it
// takes milliseconds instead of seconds: when the system's pip is visible
// (through --system-site-packages), bin/pip runs it with the virtualenv's
// interpreter, which installs into the virtualenv. Otherwise ensurepip
// installs a pip of its own.
func makeVenv(ctx context.Context, base, dir string) error {
	env := helperEnv(nil)
	if out, err := runCommand(ctx, "", env, base, "-m", "venv", "--system-site-packages", "--without-pip", dir); err != nil {
		return fmt.Errorf("create the virtualenv %s with %s -m venv: %w\n%s\n(on Debian, install python3-venv)", dir, base, err, strings.TrimSpace(string(out)))
	}
	py := filepath.Join(dir, "bin", "python")
	if _, err := runCommand(ctx, "", env, py, "-c", "import pip"); err == nil {
		shim := "#!/bin/sh\n# ipybox: the system's pip, run by this virtualenv's interpreter, installs here.\nexec \"" + py + "\" -m pip \"$@\"\n"
		for _, name := range []string{"pip", "pip3"} {
			if err := os.WriteFile(filepath.Join(dir, "bin", name), []byte(shim), 0o755); err != nil {
				return fmt.Errorf("create the virtualenv %s: %w", dir, err)
			}
		}
		return nil
	}
	if out, err := runCommand(ctx, "", env, py, "-m", "ensurepip", "--default-pip"); err != nil {
		return fmt.Errorf("install pip into the virtualenv %s: %w\n%s\n(on Debian, install python3-pip)", dir, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// runPip runs the virtualenv's pip with args, in the workspace, with the
// kernel's environment, and returns its combined output. Every pip run of
// the server goes through here, so that a sandbox can wrap it in one place.
func (s *Server) runPip(ctx context.Context, args ...string) ([]byte, error) {
	py, err := s.venvPython(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, pipTimeout)
	defer cancel()
	env := helperEnv(s.opts.KernelEnv)
	env = append(env, "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1", "PYTHONUNBUFFERED=1")
	args = append([]string{"-m", "pip"}, args...)
	if s.sandbox == nil {
		return runCommand(ctx, s.workspace, env, py, args...)
	}
	// Sandboxed code can rewrite the virtualenv, so its interpreter never
	// runs on the host: pip runs under the kernel's sandbox policy, and
	// reaches a package index only through the egress proxy.
	cmd, release, err := ipybox.SandboxedCommand(ctx, s.sandbox, s.workspace, env, py, args...)
	if err != nil {
		return nil, err
	}
	defer release()
	out, err := runCmd(ctx, cmd)
	if err != nil && looksOffline(out) {
		err = fmt.Errorf("%w; pip could not reach the package index from the sandbox: allow its domains with --allowed-domain (for PyPI: pypi.org and files.pythonhosted.org), or install from a path in the workspace", err)
	}
	return out, err
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

// runCommand runs a helper in its own process group, which is killed
// whole when ctx ends.
func runCommand(ctx context.Context, dir string, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	return runCmd(ctx, cmd)
}

// runCmd runs cmd in its own process group (unless it has its own process
// attributes), killed whole when ctx ends, and returns its combined output.
func runCmd(ctx context.Context, cmd *exec.Cmd) ([]byte, error) {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.Bytes(), err
	case <-ctx.Done():
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		err := ctx.Err()
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("timed out: %w", err)
		}
		return out.Bytes(), err
	}
}
