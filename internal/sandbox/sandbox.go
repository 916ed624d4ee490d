package sandbox

import (
	"github.com/ipybox/ipybox/internal/egress"
	"github.com/ipybox/ipybox/internal/hostproc"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/rundir"
)

// ignoredWarned holds the settings keys already warned about.
var ignoredWarned sync.Map

// ProxyPort is the TCP port on 127.0.0.1 inside the sandbox where the
// egress proxy listens (when allowedDomains is not empty); HTTP_PROXY and
// HTTPS_PROXY point there.
const ProxyPort = 3128

// secretPath is a path under /etc that only its owner can read, and that
// a sandbox running as that owner (root) could otherwise read.
type secretPath struct {
	path string
	dir  bool
}

// InitCommand is the hidden first argument that makes the ipybox binary
// run as the sandbox's init. A main function dispatches on it:
//
//	if len(os.Args) > 1 && os.Args[1] == sandbox.InitCommand {
//		os.Exit(sandbox.InitMain(os.Args[2:]))
//	}
const InitCommand = "__sandbox-init"

var (
	// ErrUnavailable is returned (wrapped, usually in a *ProbeError) when
	// the sandbox cannot run on this host. The sandbox never falls back to
	// running a process unsandboxed.
	ErrUnavailable = errors.New("sandbox unavailable")
	// ErrClosed is returned by Start and Command after Close.
	ErrClosed = errors.New("sandbox closed")
)

// ProbeError explains why the sandbox cannot run here, and how to fix it.
type ProbeError struct {
	// Cause says what failed ("bwrap not found", "bwrap cannot create a
	// user namespace"…).
	Cause string
	// Output is what bwrap printed, if it ran.
	Output string
	// Fix says what to do about it.
	Fix string
}

func (e *ProbeError) Error() string {
	msg := "sandbox unavailable: " + e.Cause
	if e.Output != "" {
		msg += ": " + e.Output
	}
	if e.Fix != "" {
		msg += "; " + e.Fix
	}
	return msg
}

// Unwrap returns ErrUnavailable.
func (e *ProbeError) Unwrap() error { return ErrUnavailable }

// MappedID is the host uid and gid that sandboxed processes run as when
// ipybox runs as root. It is far above the ranges that /etc/subuid hands
// to rootless containers (which end at 600,100,000 by default), so it
// shares no id with another process of the host.
const MappedID = 2_000_000_000

// Forward makes a host unix socket reachable inside the sandbox as TCP on
// 127.0.0.1:Port (the sandbox has no other network). The tool server uses
// it.
type Forward struct {
	// Port is the TCP port inside the sandbox (1-65535, not ProxyPort when
	// the egress proxy is on).
	Port int `json:"port"`
	// Socket is the host path of the unix socket. It must exist when a
	// process starts: the socket file itself is bound into the sandbox,
	// so a server that re-creates it needs a restart of the process.
	Socket string `json:"socket"`
}

// Options configures New. The zero value of each field is documented; a
// nil *Options means all zero values.
type Options struct {
	// Workspace is the host directory the sandboxed processes work in. It
	// is writable inside, at the same path, except the write-protected
	// paths (see Config). Empty means the current directory.
	Workspace string
	// Forwards lists the host unix sockets reachable from inside as
	// 127.0.0.1 TCP ports. Nil means none.
	Forwards []Forward
	// Logger receives the sandbox's log lines (ignored settings keys,
	// proxy decisions, warnings). Nil discards them.
	Logger *slog.Logger
	// InitBinary is the executable that runs as the sandbox's init: a
	// binary whose main calls InitMain when its first argument is
	// InitCommand. It is bound read-only into the sandbox. Empty means
	// os.Executable() (the ipybox binary, or a test binary whose TestMain
	// dispatches to InitMain).
	InitBinary string
	// Bwrap is the bubblewrap executable. Empty means "bwrap" on PATH.
	Bwrap string
	// Secrets returns host files that hold secrets, for example files an
	// MCP server config names; each start masks those in the sandbox's
	// view (besides .env, .env.* and .ipybox, which are always masked).
	// Nil means none.
	Secrets func() []string
	// Writable are folders inside the workspace's .ipybox that the
	// processes may write, although ipybox's state is read-only or hidden
	// inside: the shared virtualenv for the approved install_package,
	// a session's own package folder for its kernel. Nil means none.
	Writable []string
	// KernelWritable lists more host folders that kernel code can write
	// (the workspace's root when each principal has a folder in it, the
	// other tenants' kernels' folders, a container's binds), besides the
	// workspace, Writable and allowWrite: the programs the sandbox runs on
	// the host (bwrap) are never found in one, an interpreter there is
	// never asked, and no folder there is bound into this sandbox from an
	// interpreter's answer. Kernels' run directories count too
	// (hostproc.KernelRunDir). Nil means none.
	KernelWritable []string
	// EgressDecided, when set, is told of each decision of the egress
	// proxy: the target ("host:port"), and the allowedDomains entry that
	// allowed it or the reason for the refusal. Nil tells nobody.
	EgressDecided func(target string, allowed bool, rule string)

	// Zygote, when set, forks kernels into their sandboxes from a
	// pre-imported Python instead of starting one cold in each
	// (kernel.NewSandboxZygote; Linux; see fork_linux.go). Every sandbox
	// is built as for a cold start, and the forked kernel gets every
	// restriction an exec'd one gets. A Spec whose interpreter is not the
	// Zygote's starts cold. Nil: every kernel starts cold.
	Zygote Forker

	// proxy holds the egress proxy's test hooks (this package's tests
	// only). Nil means the real resolver and dialer, and the SSRF guard
	// with no exception.
	proxy *egress.Options
}

// Sandbox launches processes inside a bubblewrap sandbox. It implements
// kernel.Launcher. One Sandbox serves any number of processes, started
// one after another or at once; they share the egress proxy, which Close
// stops.
type Sandbox struct {
	cfg        *Config
	log        *slog.Logger
	workspace  string
	home       string // the host user's home, for "~"
	initBinary string // the private copy that runs (privateInit)
	initSource string // where it was copied from, for messages
	bwrap      string
	forwards   []Forward
	proxyOpts  *egress.Options
	secrets    func() []string
	forker     Forker

	privDir    string // host-only: proxy socket, mask file
	maskFile   string
	etcSecrets []secretPath
	proxy      *egress.Proxy
	proxyAddr  net.Addr // where the proxy listens on the host

	probeMu  sync.Mutex
	probed   bool
	probeErr error

	pyMu sync.Mutex
	py   map[string]*pyInfo

	fpMu      sync.Mutex
	startedFP string // see StartedFingerprint

	// writableState are the folders below the workspace's .ipybox that
	// this sandbox's processes may write (Options.Writable).
	writableState []string
	// ownWritable are the host folders this sandbox makes writable, and
	// Options.KernelWritable (see kernelWritable).
	ownWritable []string

	// mapped is set when host root creates the sandbox: its processes then
	// run as MappedID (see prep_linux.go).
	mapped bool

	closeOnce sync.Once
	closeErr  error
	mu        sync.Mutex
	closed    bool
}

// proxyOptions are the egress proxy's options: the test hooks, and the
// observer of its decisions.
func proxyOptions(hooks *egress.Options, decided func(string, bool, string)) *egress.Options {
	if decided == nil {
		return hooks
	}
	var o egress.Options
	if hooks != nil {
		o = *hooks
	}
	o.Decided = decided
	return &o
}

// New prepares a sandbox with the policy cfg (nil means DefaultConfig()).
// It validates the policy and starts the egress proxy when
// cfg.Network.AllowedDomains is not empty; it does not run bwrap (Probe,
// Start and Command do). Close releases it.
func New(cfg *Config, opts *Options) (*Sandbox, error) {
	if err := platformSupported(); err != nil {
		return nil, err
	}
	if cfg == nil {
		cfg = DefaultConfig()
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sandbox config: %w", err)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	s := &Sandbox{
		cfg:       cfg.clone(),
		log:       o.Logger,
		bwrap:     o.Bwrap,
		proxyOpts: proxyOptions(o.proxy, o.EgressDecided),
		py:        map[string]*pyInfo{},
		mapped:    runsAsRoot(),
		secrets:   o.Secrets,
		forker:    o.Zygote,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if h, err := os.UserHomeDir(); err == nil {
		s.home = filepath.Clean(h)
	}
	for _, set := range []func() error{
		func() error { return s.setWorkspace(o.Workspace) },
		func() error { return s.setForwards(o.Forwards) },
		func() error { return s.setWritable(o.Writable) },
		func() error { s.noteWritable(o.KernelWritable); return nil },
		// After noteWritable: its copy goes where no kernel writes.
		func() error { return s.setInitBinary(o.InitBinary) },
	} {
		if err := set(); err != nil {
			return nil, err
		}
	}
	for _, k := range s.cfg.Ignored {
		// A warning, once per key and process: a key dropped without a
		// word is a rule the user thinks holds.
		if _, seen := ignoredWarned.LoadOrStore(k, true); !seen {
			s.log.Warn("sandbox: settings key has no effect here; ignored", "key", k)
		}
	}
	if err := s.startPrivate(); err != nil {
		os.RemoveAll(s.privDir)
		return nil, err
	}
	s.logFeatures()
	return s, nil
}

// kernelWritable holds the host folders that any sandbox of this process
// has made writable to kernel code (workspaces, the state folders of
// Options.Writable, allowWrite paths, the kernels' run directories) and
// those that Options.KernelWritable named: the host runs no program of
// its own (bwrap) from one of them, whichever sandbox asks.
var kernelWritable = struct {
	mu sync.Mutex
	m  map[string]bool
}{m: map[string]bool{}}

// kernelWritableMax is the count past which noting a folder first forgets
// the noted folders that no longer exist (the run directories of kernels
// that ended), so that the set follows what lives.
const kernelWritableMax = 256

// noteWritable records this sandbox's writable folders, and extra, in
// kernelWritable.
func (s *Sandbox) noteWritable(extra []string) {
	ps := append([]string{s.workspace}, s.writableState...)
	if aw, err := expandAll(s.cfg.Filesystem.AllowWrite, s.workspace, s.home, true); err == nil {
		ps = append(ps, aw...)
	}
	for _, p := range extra {
		if p != "" && filepath.IsAbs(p) {
			ps = append(ps, filepath.Clean(p))
		}
	}
	s.ownWritable = ps
	addKernelWritable(ps...)
}

// addKernelWritable records host folders that kernel code can write.
func addKernelWritable(ps ...string) {
	kernelWritable.mu.Lock()
	defer kernelWritable.mu.Unlock()
	if len(kernelWritable.m)+len(ps) > kernelWritableMax {
		for p := range kernelWritable.m {
			if _, err := os.Lstat(p); err != nil {
				delete(kernelWritable.m, p)
			}
		}
	}
	for _, p := range ps {
		kernelWritable.m[p] = true
	}
}

// hostWritable lists the folders kernel code can write, as far as this
// process knows: this sandbox's, and every other sandbox's of this
// process (kernelWritable).
func (s *Sandbox) hostWritable() []string {
	kernelWritable.mu.Lock()
	defer kernelWritable.mu.Unlock()
	out := append([]string(nil), s.ownWritable...)
	for p := range kernelWritable.m {
		out = append(out, p)
	}
	return out
}

// setWorkspace checks and sets the workspace (empty: the current
// directory).
func (s *Sandbox) setWorkspace(ws string) error {
	if ws == "" {
		ws = "."
	}
	ws, err := filepath.Abs(ws)
	if err != nil {
		return fmt.Errorf("sandbox workspace: %w", err)
	}
	if fi, err := os.Stat(ws); err != nil || !fi.IsDir() {
		return fmt.Errorf("sandbox workspace %s is not a directory; create it or pass another Options.Workspace", ws)
	}
	if ws == "/" {
		return fmt.Errorf("sandbox workspace is /: that would make the whole file system writable; choose a project directory")
	}
	s.workspace = ws
	return nil
}

// setInitBinary checks and sets the init binary (empty: this one). What
// runs is a private copy, made once per process (privateInit): never the
// file at the path it was found, which may lie where kernel code writes.
func (s *Sandbox) setInitBinary(p string) error {
	self := p == ""
	if self {
		var err error
		if p, err = os.Executable(); err != nil {
			return fmt.Errorf("sandbox init binary: %w; set Options.InitBinary", err)
		}
	}
	if fi, err := os.Stat(p); err != nil || fi.IsDir() {
		return fmt.Errorf("sandbox init binary %q is not a file; set Options.InitBinary to the ipybox binary", p)
	}
	cp, err := privateInit(p, self, s.hostWritable())
	if err != nil {
		return fmt.Errorf("sandbox init binary: a private copy of %s: %w", p, err)
	}
	s.initBinary, s.initSource = cp, p
	return nil
}

// PrivateInitBinary returns this process's binary as the sandbox runs
// it: a private copy made once per process (see setInitBinary), for
// another launcher (the container) that binds the init binary where kernel
// code runs next.
func PrivateInitBinary(writable []string) (string, error) {
	p, err := os.Executable()
	if err != nil {
		return "", err
	}
	return privateInit(p, true, writable)
}

// privateRoot returns where this process's private folders go (the init
// binary's copy, a sandbox's proxy socket, mask file and staging): the
// temporary folder, unless kernel code can write it (a workspace that is,
// or holds, $TMPDIR: `cd /tmp && ipybox mcp`, or an allowWrite path), then
// /var/tmp or /dev/shm. Not a folder of this user's alone (~/.cache): as
// root, the sandbox's processes run as MappedID, and must reach what is
// staged for them in the folders below.
func privateRoot(writable []string) (string, error) {
	for _, root := range []string{os.TempDir(), "/var/tmp", "/dev/shm"} {
		if fi, err := os.Lstat(root); err != nil || !fi.IsDir() {
			continue
		}
		if hostproc.Inside(root, writable) == "" {
			return root, nil
		}
	}
	return "", fmt.Errorf("kernel code can write the temporary folder %s, /var/tmp and /dev/shm (a workspace or an allowWrite path holds them); set TMPDIR to a folder outside them", os.TempDir())
}

// setForwards checks the forwarded ports and keeps them sorted.
func (s *Sandbox) setForwards(fs []Forward) error {
	proxyOn := len(s.cfg.Network.AllowedDomains) > 0
	ports := map[int]bool{}
	for _, f := range fs {
		switch {
		case f.Port < 1 || f.Port > 65535:
			return fmt.Errorf("sandbox forward port %d: want 1-65535", f.Port)
		case ports[f.Port]:
			return fmt.Errorf("sandbox forward port %d is listed twice", f.Port)
		case proxyOn && f.Port == ProxyPort:
			return fmt.Errorf("sandbox forward port %d is the egress proxy's; choose another", f.Port)
		case !filepath.IsAbs(f.Socket):
			return fmt.Errorf("sandbox forward socket %q: want an absolute path", f.Socket)
		}
		ports[f.Port] = true
		s.forwards = append(s.forwards, f)
	}
	sort.Slice(s.forwards, func(i, j int) bool { return s.forwards[i].Port < s.forwards[j].Port })
	return nil
}

// setWritable checks Options.Writable: folders inside .ipybox.
func (s *Sandbox) setWritable(ws []string) error {
	state := filepath.Join(s.workspace, ".ipybox")
	for _, w := range ws {
		w = filepath.Clean(w)
		if !filepath.IsAbs(w) || !under(w, state) || w == state {
			return fmt.Errorf("sandbox writable path %q: want a folder inside %s", w, state)
		}
		s.writableState = append(s.writableState, w)
	}
	return nil
}

// startPrivate makes the sandbox's private folder (the mask file, the
// proxy's socket), reads which /etc files to mask, and starts the egress
// proxy when the policy allows domains. The caller removes privDir on
// error.
func (s *Sandbox) startPrivate() error {
	var err error
	// Reaped by a later start when this process dies without Close.
	root, err := privateRoot(s.hostWritable())
	if err != nil {
		return fmt.Errorf("sandbox: its private folder: %w", err)
	}
	if s.privDir, err = rundir.New(root, "ipybox-sandbox-"); err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	s.maskFile = filepath.Join(s.privDir, "mask")
	if err := os.WriteFile(s.maskFile, nil, 0); err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	s.etcSecrets = scanEtc("/etc")
	if len(s.cfg.Network.AllowedDomains) == 0 {
		return nil
	}
	r, err := egress.NewRules(egress.Lists{AllowedDomains: s.cfg.Network.AllowedDomains, DeniedDomains: s.cfg.Network.DeniedDomains})
	if err != nil { // Validate passed, so this cannot happen
		return err
	}
	ln, err := s.listenProxy()
	if err != nil {
		return fmt.Errorf("sandbox egress proxy: %w", err)
	}
	s.proxyAddr = ln.Addr()
	s.proxy = egress.New(r, s.proxyOpts, s.log)
	s.proxy.Serve(ln)
	return nil
}

// ForwardURL returns the URL at which a process inside the sandbox reaches
// the socket of f: http://127.0.0.1:<Port> on Linux, where the sandbox's
// init forwards that port to the socket, and unix://<Socket> on macOS,
// where the profile lets the process connect to that socket (and no
// other) itself.
func (s *Sandbox) ForwardURL(f Forward) string { return forwardURL(f) }

// Workspace returns the absolute host path of the workspace.
func (s *Sandbox) Workspace() string { return s.workspace }

// ProxyEnabled reports whether the egress proxy runs (allowedDomains is
// not empty). Without it, the sandbox has no network except the forwards.
func (s *Sandbox) ProxyEnabled() bool { return s.proxy != nil }

// Close stops the egress proxy and removes the sandbox's private files. It
// does not stop processes already started: whoever started them owns them
// (they lose network access through the proxy). Close is idempotent.
func (s *Sandbox) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		if s.proxy != nil {
			s.closeErr = s.proxy.Close()
		}
		if err := os.RemoveAll(s.privDir); err != nil && s.closeErr == nil {
			s.closeErr = err
		}
	})
	return s.closeErr
}

func (s *Sandbox) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// pyInfo is what an interpreter says about itself.
type pyInfo struct {
	executable string   // sys.executable
	prefixes   []string // sys.prefix, base_prefix, exec_prefix, base_exec_prefix, resolved
	err        error
}

// commandPath checks that the sandbox can run a command (Command) and
// returns the command's absolute path, looked up on PATH when it has no
// slash.
func (s *Sandbox) commandPath(ctx context.Context, path string) (string, error) {
	if err := s.Probe(ctx); err != nil {
		return "", err
	}
	if s.isClosed() {
		return "", ErrClosed
	}
	if !strings.Contains(path, "/") {
		p, err := exec.LookPath(path)
		if err != nil {
			return "", fmt.Errorf("sandbox: %w", err)
		}
		path = p
	}
	path, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("sandbox: %w", err)
	}
	return path, nil
}

// checkStart checks that the sandbox can run a kernel (Start) and that
// spec names absolute paths; it returns the clean run directory.
func (s *Sandbox) checkStart(ctx context.Context, spec *kernel.Spec) (string, error) {
	if err := s.quickCheck(ctx); err != nil {
		return "", err
	}
	if s.isClosed() {
		return "", ErrClosed
	}
	if !filepath.IsAbs(spec.Path) {
		return "", fmt.Errorf("sandbox: interpreter path %q: want an absolute path", spec.Path)
	}
	if spec.RunDir == "" || !filepath.IsAbs(spec.RunDir) {
		return "", fmt.Errorf("sandbox: run directory %q: want an absolute path", spec.RunDir)
	}
	return filepath.Clean(spec.RunDir), nil
}

// Forker forks kernels into sandboxes: kernel.NewSandboxZygote's Zygote.
type Forker interface {
	// Python is the interpreter it forks; only a Spec whose Path is it is
	// forked, others start cold.
	Python() string
	Join(ctx context.Context, req *kernel.JoinRequest) error
}
