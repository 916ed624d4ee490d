package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/linelog"
	"github.com/ipybox/ipybox/internal/seccomp"
)

// Bounded waits of the launcher.
const (
	probeTimeout  = 10 * time.Second
	pythonTimeout = 10 * time.Second
	// startTimeout bounds the wait for the init's "ready" when ctx has no
	// earlier deadline.
	startTimeout = 30 * time.Second
)

var _ kernel.Launcher = (*Sandbox)(nil)

func platformSupported() error {
	if !seccomp.Supported() {
		return &ProbeError{Cause: "the seccomp filter is not implemented for this CPU architecture",
			Fix: "run ipybox on amd64 or arm64, or run without the sandbox"}
	}
	return nil
}

// logFeatures logs what the kernel offers for the optional layers.
func (s *Sandbox) logFeatures() {
	abi := landlockABI()
	if s.cfg.Landlock && abi < 1 {
		s.log.Warn("sandbox: landlock requested, but this kernel has no Landlock; continuing with the namespace, mount and seccomp layers")
	}
	if s.cfg.BlockUnixSockets && abi < landlockABIResolveUnix {
		s.log.Info("sandbox: blockUnixSockets: this kernel lacks Landlock ABI 9, so a kernel process (which needs AF_UNIX for ZeroMQ) "+
			"can still connect to path sockets visible in its view; Command processes cannot create AF_UNIX sockets at all",
			"landlock_abi", abi)
	}
}

// Start implements kernel.Launcher: it runs spec inside the sandbox and
// returns once the sandbox's init has started it (or failed to). The
// process sees RunDir (writable) and Dir at the same paths as the host, and
// exactly spec.Env (plus the proxy variables and MPLCONFIGDIR). An empty
// Dir means the workspace; another Dir must be visible in the sandbox.
// Start runs Probe first and returns its error: it never runs the process
// unsandboxed.
func (s *Sandbox) Start(ctx context.Context, spec *kernel.Spec) (kernel.Process, error) {
	p, err := s.start(ctx, spec)
	var le launchError
	if errors.As(err, &le) && ctx.Err() == nil {
		return nil, s.explainStart(ctx, le.err)
	}
	if err != nil {
		return nil, err
	}
	s.started()
	return p, nil
}

// launchError is a start that failed once bwrap was to run: the probe
// may explain it.
type launchError struct{ err error }

func (e launchError) Error() string { return e.err.Error() }
func (e launchError) Unwrap() error { return e.err }

func (s *Sandbox) start(ctx context.Context, spec *kernel.Spec) (kernel.Process, error) {
	runDir, err := s.checkStart(ctx, spec)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(runDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("sandbox: run directory %s does not exist", runDir)
	}
	addKernelWritable(runDir) // kernel code writes it: the host finds no program there
	path := filepath.Clean(spec.Path)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("sandbox: interpreter: %w", err)
	}
	socketDir := ""
	if spec.SocketDir != "" {
		socketDir = filepath.Clean(spec.SocketDir)
		if !under(socketDir, runDir) {
			return nil, fmt.Errorf("sandbox: socket directory %s is not inside the run directory %s", socketDir, runDir)
		}
		if fi, err := os.Lstat(socketDir); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("sandbox: socket directory %s is not a directory", socketDir)
		}
	}
	prefixes, fallback := s.pythonFor(ctx, path, runDir)
	binds, err := s.insideBinds(true)
	if err != nil {
		return nil, err
	}
	v, err := s.buildView(viewInput{
		runDir: runDir, socketDir: socketDir, dir: spec.Dir, home: envValue(spec.Env, "HOME"), extraRO: prefixes, binds: binds,
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	exe, ok := s.runnableExe(v, path, fallback)
	if !ok {
		return nil, fmt.Errorf("sandbox: interpreter %s is not visible in the sandbox; add its directory to extraRead", path)
	}
	ic := s.initConfig(v, exe, spec.Args, true)
	ic.CtlFD = 5
	fork := s.forks(path, exe)
	if fork {
		ic.Fork, ic.Kernel = true, kernel.IsLaunch(spec.Args)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	ctl, ctlChild := os.NewFile(uintptr(fds[0]), "sandbox-ctl"), os.NewFile(uintptr(fds[1]), "sandbox-ctl-init")
	cmd, err := s.launchCmd(v, spec.Env, ic, ctlChild) // ctlChild is fd 5
	if err != nil {
		ctl.Close()
		ctlChild.Close()
		return nil, launchError{err}
	}
	closeFiles := func() {
		for _, f := range cmd.ExtraFiles {
			if f != nil {
				f.Close()
			}
		}
	}
	tail := &linelog.Writer{}
	stderr := io.Writer(tail)
	if spec.Stderr != nil {
		stderr = io.MultiWriter(spec.Stderr, tail)
	}
	cmd.Stdout = spec.Stdout
	cmd.Stderr = stderr
	// Wait returns this long after bwrap exits even when a straggler still
	// holds the output pipes.
	cmd.WaitDelay = waitDelay
	err = cmd.Start()
	closeFiles() // the child has its copies; the init's EOF needs ours closed
	if err != nil {
		ctl.Close()
		return nil, launchError{fmt.Errorf("sandbox: start bwrap: %w", err)}
	}
	if fork {
		if err := s.joinFork(ctx, cmd, ctl, tail, path); err != nil {
			return nil, err
		}
	}
	if err := awaitReady(ctx, cmd, ctl, tail, path); err != nil {
		return nil, err
	}
	return newProcess(cmd, ctl), nil
}

// awaitReady waits for the init's "ok" on the control socket (bounded by
// startTimeout and ctx), and ends the sandbox, with why, when the init
// reports an error or bwrap exits first.
func awaitReady(ctx context.Context, cmd *exec.Cmd, ctl *os.File, tail *linelog.Writer, path string) error {
	ready := make(chan string, 1)
	go func() { ready <- readLine(ctl) }() // bound: ready is buffered; readLine ends at the socket's shutdown
	wait, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	var line string
	// bound: wait has startTimeout
	select {
	case line = <-ready:
	case <-wait.Done():
		abortStart(cmd, ctl, ready)
		return fmt.Errorf("sandbox: waiting for the sandbox to start %s: %w", path, wait.Err())
	}
	if line == "ok" {
		return nil
	}
	shutdownCtl(ctl)
	cmd.Process.Kill()
	cmd.Wait() // bound: killed above; WaitDelay
	ctl.Close()
	why := strings.TrimPrefix(line, "error: ")
	if why == "" {
		why = "bwrap exited before the process started"
	}
	tail.Flush()
	if t := tail.Tail(8); t != "" {
		why += ": " + t
	}
	return launchError{fmt.Errorf("sandbox: start %s: %s", path, why)}
}

// Command returns an unstarted command that runs path inside the sandbox,
// with exactly env, in dir (empty means the workspace). Stdin, stdout and
// stderr pass through, so it suits a stdio MCP server (for example with
// the go-sdk's mcp.CommandTransport). The caller sets cmd.Stdin/Stdout/
// Stderr, starts and waits for it; SIGTERM or SIGKILL to cmd.Process ends
// the whole sandbox. path is looked up on the host's PATH when it has no
// slash, and must be visible in the sandbox (under /usr, the workspace or
// extraRead). The Forwards are not available to Command processes; the
// egress proxy is. With BlockUnixSockets, the process cannot create
// AF_UNIX sockets.
//
// cmd.ExtraFiles holds bwrap's arguments and the init's configuration
// (passed by file descriptor, so that neither the environment nor the
// arguments appear in a command line); they are closed when cmd is
// garbage-collected, or by the caller after Start.
func (s *Sandbox) Command(ctx context.Context, path string, args, env []string, dir string) (*exec.Cmd, error) {
	path, err := s.commandPath(ctx, path)
	if err != nil {
		return nil, err
	}
	if dir != "" {
		if dir, err = filepath.Abs(dir); err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
	}
	binds, err := s.insideBinds(false)
	if err != nil {
		return nil, err
	}
	var prefixes []string
	fallback := ""
	if isPythonName(path) {
		// A venv's interpreter (venv or pip run by it) needs its prefix,
		// as a kernel's does.
		prefixes, fallback = s.pythonFor(ctx, path, "")
	}
	v, err := s.buildView(viewInput{dir: dir, home: envValue(env, "HOME"), extraRO: prefixes, binds: binds})
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	exe, ok := s.runnableExe(v, path, fallback)
	if !ok {
		return nil, fmt.Errorf("sandbox: command %s is not visible in the sandbox; add it (or the directory it lives in) to extraRead", path)
	}
	ic := s.initConfig(v, exe, args, false)
	return s.launchCmd(v, env, ic)
}

// runnableExe returns what runs path in v: path itself when it is
// visible, else the interpreter's real executable (pythonFor's fallback)
// when that is.
func (s *Sandbox) runnableExe(v *view, path, fallback string) (string, bool) {
	if s.visibleExe(v, path) {
		return path, true
	}
	if fallback == "" || !s.visibleExe(v, fallback) {
		return "", false
	}
	s.log.Debug("sandbox: running the interpreter by its real path", "path", path, "executable", fallback)
	return fallback, true
}

// visibleExe reports whether p, and what its symbolic links lead to, are
// visible in v.
func (s *Sandbox) visibleExe(v *view, p string) bool {
	if !v.visible(p) {
		return false
	}
	r, err := filepath.EvalSymlinks(p)
	return err == nil && v.visible(r)
}

// insideBinds lists the launcher's files bound under insideDir: the init
// binary, the proxy socket and (for kernels) the forwarded sockets.
func (s *Sandbox) insideBinds(forwards bool) (map[string]string, error) {
	m := map[string]string{insideInit: s.initBinary}
	if s.proxy != nil {
		m[insideProxy] = filepath.Join(s.privDir, "proxy.sock")
	}
	if forwards {
		for _, f := range s.forwards {
			if _, err := os.Stat(f.Socket); err != nil {
				return nil, fmt.Errorf("sandbox: forward socket for port %d: %w; start its server before the sandboxed process", f.Port, err)
			}
			m[forwardPath(f.Port)] = f.Socket
		}
	}
	return m, nil
}

func forwardPath(port int) string { return fmt.Sprintf("%s/fwd-%d.sock", insideDir, port) }

// initConfig builds the init's instructions for one process.
func (s *Sandbox) initConfig(v *view, path string, args []string, isKernel bool) *initConfig {
	ic := &initConfig{Path: path, Argv: append([]string{path}, args...), ArgsFD: 3,
		Memory: s.cfg.Limits.memory(), Pids: s.cfg.Limits.pids(), FileSize: s.cfg.Limits.fileSize(), Self: insideInit, Guard: v.guard}
	if s.proxy != nil {
		ic.Forwards = append(ic.Forwards, Forward{Port: ProxyPort, Socket: insideProxy})
	}
	if isKernel {
		for _, f := range s.forwards {
			ic.Forwards = append(ic.Forwards, Forward{Port: f.Port, Socket: forwardPath(f.Port)})
		}
	}
	if s.cfg.Landlock {
		ic.Landlock = true
		ic.ReadOnly = []string{"/"}
		ic.Writable = append([]string(nil), v.writable...)
	}
	if s.cfg.BlockUnixSockets {
		ic.ScopeAbstract = true
		if isKernel {
			// ZeroMQ needs AF_UNIX; limit where it may connect instead.
			ic.UnixConnect = append(ic.UnixConnect, insideDir)
			for _, w := range v.writable {
				if w != s.workspace && w != "/tmp" && w != "/dev" && w != "/run" && w != "/var/tmp" {
					ic.UnixConnect = append(ic.UnixConnect, w) // the run directory and allowWrite paths
				}
			}
			ic.RestrictUnixConnect = true
		} else {
			ic.DenyUnixSockets = true
		}
	}
	return ic
}

// launchCmd returns the command that runs the sandbox for a view, an
// environment and an init configuration. bwrap reads its options from a
// memfd (fd 3) and the init its configuration, with the program's
// environment, from another (fd 4), so that neither the environment nor
// the program's arguments show in the host's or the sandbox's process
// list; bwrap and the init get initEnv, and env reaches the program alone,
// at its exec under the seccomp filter. extra files follow, from fd 5. When host root creates the
// sandbox, the command is the prep step that runs bwrap as MappedID (see
// prep_linux.go). The caller closes cmd.ExtraFiles after Start.
func (s *Sandbox) launchCmd(v *view, env []string, ic *initConfig, extra ...*os.File) (*exec.Cmd, error) {
	if v.tmpDir != "" && !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "TMPDIR=") }) {
		env = append(slices.Clip(env), "TMPDIR="+v.tmpDir)
	}
	// The program's environment goes to the init's configuration, which
	// applies it at the program's exec; bwrap and the init start with
	// initEnv (bwrap's --clearenv).
	ic.Env = s.programEnv(env)
	for _, kv := range ic.Env {
		if strings.IndexByte(kv, 0) >= 0 {
			return nil, fmt.Errorf("sandbox: an environment value contains a NUL byte")
		}
	}
	js, err := json.Marshal(ic)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	args := v.args
	var st *staging
	if s.mapped {
		st = s.staging(v)
		args = st.rewrite(args)
	}
	// The view's descriptors follow bwrap's files (3: arguments, 4: the
	// init's configuration) and extra.
	if len(v.fds) > 0 {
		args = append([]string(nil), args...)
		for i, a := range args {
			if n, ok := strings.CutPrefix(a, "@fd"); ok && i > 0 && args[i-1] == "--ro-bind-fd" {
				k, _ := strconv.Atoi(n)
				args[i] = strconv.Itoa(5 + len(extra) + k)
			}
		}
		extra = append(append([]*os.File(nil), extra...), v.fds...)
	}
	var buf bytes.Buffer
	for _, a := range append(append([]string{}, args...), "--clearenv") {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, fmt.Errorf("sandbox: an option contains a NUL byte")
		}
		buf.WriteString(a)
		buf.WriteByte(0)
	}
	argsFile, err := memFile("bwrap-args", buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	cfgFile, err := memFile("init-config", js)
	if err != nil {
		argsFile.Close()
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	s.probeMu.Lock()
	bwrap := s.bwrap
	s.probeMu.Unlock()
	if st != nil {
		// MappedID must be able to run it, wherever it lives.
		bwrap = st.add(bwrap, false, true)
	}
	cmd := exec.Command(bwrap, "--args", "3", "--", insideInit, InitCommand, "run", "4")
	cmd.Env = initEnv()
	cmd.ExtraFiles = append([]*os.File{argsFile, cfgFile}, extra...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if st == nil {
		return cmd, nil
	}
	prep, err := s.prepCmd(cmd, st)
	if err != nil {
		argsFile.Close()
		cfgFile.Close()
		return nil, err
	}
	return prep, nil
}

// staging lists the host paths bwrap binds that MappedID cannot be
// trusted to reach: the view's explicit binds (idmapped directories) and
// the launcher's files (the init binary, sockets, the mask).
func (s *Sandbox) staging(v *view) *staging {
	st := &staging{dir: s.privDir}
	for _, b := range v.binds {
		fi, err := os.Stat(b.path)
		st.add(b.path, err == nil && fi.IsDir(), !b.rw)
	}
	for _, f := range v.files {
		st.add(f, false, true)
	}
	for _, p := range v.pinned {
		st.pin(p)
	}
	return st
}
