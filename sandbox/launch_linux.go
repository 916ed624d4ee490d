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
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipybox/ipybox/kernel"
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
	if auditArch == 0 {
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

// Probe checks that the sandbox can run here: bwrap exists, and it can
// create the user, pid and network namespaces with the options Start uses.
// It runs bwrap once per Sandbox and caches the answer (a failure caused by
// ctx is not cached). Errors are *ProbeError values that name the cause and
// the fix.
func (s *Sandbox) Probe(ctx context.Context) error {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if s.probed {
		return s.probeErr
	}
	path, err := probeBwrap(ctx, s.bwrap)
	if err != nil && ctx.Err() != nil {
		return err
	}
	s.probed, s.probeErr = true, err
	if err == nil {
		s.bwrap = path
	}
	return err
}

func probeBwrap(ctx context.Context, bwrap string) (string, error) {
	install := "install bubblewrap (`apt-get install bubblewrap`, `dnf install bubblewrap`, `pacman -S bubblewrap`) or set Options.Bwrap"
	if bwrap == "" {
		p, err := exec.LookPath("bwrap")
		if err != nil {
			return "", &ProbeError{Cause: "bwrap (bubblewrap) not found on PATH", Fix: install}
		}
		bwrap = p
	} else if fi, err := os.Stat(bwrap); err != nil || fi.IsDir() {
		return "", &ProbeError{Cause: fmt.Sprintf("bwrap not found at %s", bwrap), Fix: install}
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	args := append(append([]string{}, namespaceFlags...), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--", "true")
	cmd := exec.CommandContext(ctx, bwrap, args...)
	cmd.Env = []string{}
	out, err := cmd.CombinedOutput()
	if err == nil {
		return bwrap, nil
	}
	if ctx.Err() != nil {
		return "", fmt.Errorf("sandbox probe: %w", ctx.Err())
	}
	msg := strings.TrimSpace(string(out))
	if msg == "" {
		msg = err.Error()
	}
	return "", &ProbeError{Cause: fmt.Sprintf("%s cannot create the sandbox's namespaces", bwrap), Output: msg, Fix: namespaceFix(msg)}
}

// namespaceFix suggests a fix from bwrap's message and the host's settings.
func namespaceFix(msg string) string {
	if strings.Contains(msg, "Unknown option") || strings.Contains(msg, "disable-userns") {
		return "bubblewrap 0.8 or newer is needed (for --disable-userns); upgrade it"
	}
	read := func(p string) string {
		b, _ := os.ReadFile(p)
		return strings.TrimSpace(string(b))
	}
	var fixes []string
	if read("/proc/sys/kernel/unprivileged_userns_clone") == "0" {
		fixes = append(fixes, "enable unprivileged user namespaces: `sysctl -w kernel.unprivileged_userns_clone=1`")
	}
	if read("/proc/sys/user/max_user_namespaces") == "0" {
		fixes = append(fixes, "allow user namespaces: `sysctl -w user.max_user_namespaces=15000`")
	}
	if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1" {
		fixes = append(fixes, "AppArmor restricts unprivileged user namespaces (Ubuntu 23.10+): add an AppArmor profile "+
			"that grants `userns` to /usr/bin/bwrap, or `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`")
	}
	if len(fixes) == 0 {
		fixes = append(fixes, "user and network namespaces must be available to this user; inside a container, allow "+
			"them (for example docker --security-opt seccomp=unconfined --security-opt apparmor=unconfined), "+
			"or run ipybox on the host")
	}
	return strings.Join(fixes, "; ")
}

// Start implements kernel.Launcher: it runs spec inside the sandbox and
// returns once the sandbox's init has started it (or failed to). The
// process sees RunDir (writable) and Dir at the same paths as the host, and
// exactly spec.Env (plus the proxy variables and MPLCONFIGDIR). An empty
// Dir means the workspace; another Dir must be visible in the sandbox.
// Start runs Probe first and returns its error: it never runs the process
// unsandboxed.
func (s *Sandbox) Start(ctx context.Context, spec *kernel.Spec) (kernel.Process, error) {
	if err := s.Probe(ctx); err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, ErrClosed
	}
	if !filepath.IsAbs(spec.Path) {
		return nil, fmt.Errorf("sandbox: interpreter path %q: want an absolute path", spec.Path)
	}
	if spec.RunDir == "" || !filepath.IsAbs(spec.RunDir) {
		return nil, fmt.Errorf("sandbox: run directory %q: want an absolute path", spec.RunDir)
	}
	runDir := filepath.Clean(spec.RunDir)
	if fi, err := os.Stat(runDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("sandbox: run directory %s does not exist", runDir)
	}
	path := filepath.Clean(spec.Path)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("sandbox: interpreter: %w", err)
	}
	prefixes, fallback := s.pythonFor(ctx, path, runDir)
	binds, err := s.insideBinds(true)
	if err != nil {
		return nil, err
	}
	v, err := s.buildView(viewInput{
		runDir: runDir, dir: spec.Dir, home: envValue(spec.Env, "HOME"), extraRO: prefixes, binds: binds,
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	exe := path
	if !s.visibleExe(v, path) {
		if fallback == "" || !s.visibleExe(v, fallback) {
			return nil, fmt.Errorf("sandbox: interpreter %s is not visible in the sandbox; add its directory to extraRead", path)
		}
		s.log.Debug("sandbox: running the interpreter by its real path", "path", path, "executable", fallback)
		exe = fallback
	}
	ic := s.initConfig(v, exe, spec.Args, true)
	ic.CtlFD = 5
	cmd, err := s.bwrapCmd(v, spec.Env, ic)
	if err != nil {
		return nil, err
	}
	closeFiles := func() {
		for _, f := range cmd.ExtraFiles {
			f.Close()
		}
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		closeFiles()
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	ctl, ctlChild := os.NewFile(uintptr(fds[0]), "sandbox-ctl"), os.NewFile(uintptr(fds[1]), "sandbox-ctl-init")
	cmd.ExtraFiles = append(cmd.ExtraFiles, ctlChild) // fd 5
	tail := &tailWriter{w: spec.Stderr}
	cmd.Stdout = spec.Stdout
	cmd.Stderr = tail
	err = cmd.Start()
	closeFiles() // the child has its copies; the init's EOF needs ours closed
	if err != nil {
		ctl.Close()
		return nil, fmt.Errorf("sandbox: start %s: %w", s.bwrap, err)
	}

	ready := make(chan string, 1)
	go func() { ready <- readLine(ctl) }()
	wait, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	var line string
	select {
	case line = <-ready:
	case <-wait.Done():
		cmd.Process.Kill()
		<-ready
		cmd.Wait()
		ctl.Close()
		return nil, fmt.Errorf("sandbox: waiting for the sandbox to start %s: %w", path, wait.Err())
	}
	if line != "ok" {
		cmd.Process.Kill()
		cmd.Wait()
		ctl.Close()
		why := strings.TrimPrefix(line, "error: ")
		if why == "" {
			why = "bwrap exited before the process started"
		}
		if t := tail.String(); t != "" {
			why += ": " + t
		}
		return nil, fmt.Errorf("sandbox: start %s: %s", path, why)
	}
	return &process{cmd: cmd, ctl: ctl}, nil
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
	if err := s.Probe(ctx); err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, ErrClosed
	}
	if !strings.Contains(path, "/") {
		p, err := exec.LookPath(path)
		if err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		path = p
	}
	path, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
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
	v, err := s.buildView(viewInput{dir: dir, home: envValue(env, "HOME"), binds: binds})
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if !s.visibleExe(v, path) {
		return nil, fmt.Errorf("sandbox: command %s is not visible in the sandbox; add it (or the directory it lives in) to extraRead", path)
	}
	ic := s.initConfig(v, path, args, false)
	cmd, err := s.bwrapCmd(v, env, ic)
	if err != nil {
		return nil, err
	}
	return cmd, nil
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
	ic := &initConfig{Path: path, Argv: append([]string{path}, args...), ArgsFD: 3}
	if s.proxy != nil {
		ic.Forwards = append(ic.Forwards, initForward{Port: ProxyPort, Socket: insideProxy})
	}
	if isKernel {
		for _, f := range s.forwards {
			ic.Forwards = append(ic.Forwards, initForward{Port: f.Port, Socket: forwardPath(f.Port)})
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

// bwrapCmd returns the bwrap command for a view, an environment and an
// init configuration. bwrap reads its options from a memfd (fd 3) and the
// init its configuration from another (fd 4), so that neither the
// environment nor the program's arguments show in the host's or the
// sandbox's process list; bwrap itself gets an empty environment.
func (s *Sandbox) bwrapCmd(v *view, env []string, ic *initConfig) (*exec.Cmd, error) {
	js, err := json.Marshal(ic)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	var buf bytes.Buffer
	for _, a := range append(append([]string{}, v.args...), s.envArgs(env)...) {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, fmt.Errorf("sandbox: an option or environment value contains a NUL byte")
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
	cmd := exec.Command(s.bwrap, "--args", "3", "--", insideInit, InitCommand, "run", "4")
	cmd.Env = []string{}
	cmd.ExtraFiles = []*os.File{argsFile, cfgFile}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd, nil
}

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
// that is not a virtual environment's.
func systemPython(path string) bool {
	r, err := filepath.EvalSymlinks(path)
	if err != nil || !under(r, "/usr") {
		return false
	}
	for _, d := range []string{filepath.Dir(r), filepath.Dir(filepath.Dir(r))} {
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
	cmd.Dir = "/" // not the workspace: a .python-version there could steer a pyenv shim
	for _, k := range []string{"PATH", "HOME", "LANG", "PYENV_ROOT", "PYENV_VERSION"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	out, err := cmd.Output()
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
			if r, err := filepath.EvalSymlinks(p); err == nil && filepath.IsAbs(r) && !contains(info.prefixes, r) {
				info.prefixes = append(info.prefixes, r)
			}
		}
	}
	s.py[path] = info
	return info
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// envValue returns the value of key in env ("KEY=VALUE"), the last wins.
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// readLine reads one line (without the newline) from the init's control
// socket; it returns what it has at EOF.
func readLine(r io.Reader) string {
	var b []byte
	one := make([]byte, 1)
	for len(b) < 4096 {
		n, err := r.Read(one)
		if n == 1 {
			if one[0] == '\n' {
				break
			}
			b = append(b, one[0])
		}
		if err != nil {
			break
		}
	}
	return string(b)
}

// tailWriter passes writes to w (nil discards) and keeps the last bytes,
// so that a failed start can say what bwrap printed.
type tailWriter struct {
	w   io.Writer
	mu  sync.Mutex
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2048 {
		t.buf = t.buf[len(t.buf)-2048:]
	}
	t.mu.Unlock()
	if t.w != nil {
		return t.w.Write(p)
	}
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

// process is a sandboxed process: bwrap, and inside, the init (pid 1) and
// the program. Signals travel to the init over the control socket, because
// the program runs in another session and pid namespace; the init sends
// them to the program's process group.
type process struct {
	cmd *exec.Cmd
	mu  sync.Mutex
	ctl *os.File // nil after Wait
}

func (p *process) Pid() int { return p.cmd.Process.Pid }

// Signal delivers sig to the program's process group inside the sandbox.
// SIGKILL kills the whole sandbox (see Kill).
func (p *process) Signal(sig syscall.Signal) error {
	if sig == syscall.SIGKILL {
		return p.Kill()
	}
	if sig <= 0 || sig > 64 {
		return fmt.Errorf("sandbox: cannot forward signal %d", int(sig))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctl == nil {
		return os.ErrProcessDone
	}
	if _, err := p.ctl.Write([]byte{byte(sig)}); err != nil {
		if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			return os.ErrProcessDone
		}
		return fmt.Errorf("sandbox: signal: %w", err)
	}
	return nil
}

// Kill kills bwrap. The init, its child and the sandbox's pid 1, dies with
// it (--die-with-parent), and the kernel then kills every process in the
// sandbox's pid namespace.
func (p *process) Kill() error {
	err := p.cmd.Process.Kill()
	if errors.Is(err, os.ErrProcessDone) {
		return os.ErrProcessDone
	}
	return err
}

func (p *process) Wait() error {
	err := p.cmd.Wait()
	p.mu.Lock()
	if p.ctl != nil {
		p.ctl.Close()
		p.ctl = nil
	}
	p.mu.Unlock()
	return err
}
