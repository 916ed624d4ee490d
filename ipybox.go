package ipybox

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ipybox/ipybox/internal/cellctl"
	"github.com/ipybox/ipybox/internal/container"
	"github.com/ipybox/ipybox/internal/defaults"
	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/mcpconn"
	"github.com/ipybox/ipybox/internal/policy"
	"github.com/ipybox/ipybox/internal/pyruntime"
	"github.com/ipybox/ipybox/internal/safefs"
	"github.com/ipybox/ipybox/internal/sandbox"
	"github.com/ipybox/ipybox/internal/statedir"
	"github.com/ipybox/ipybox/internal/telemetry"
	"github.com/ipybox/ipybox/internal/toolserver"
)

// Options configures an Executor. A nil *Options means the defaults; Start
// copies the struct.
type Options struct {
	// Python is the interpreter to run the kernel with. Empty means
	// discovery: $IPYBOX_PYTHON, then python3 on PATH, then
	// /usr/bin/python3; the first that can import ipykernel.
	Python string
	// WorkDir is the kernel's working directory and the workspace (it
	// holds mcptools/ and images/). When set, a cell that changes the
	// directory has it restored afterwards, with a message. Empty means
	// the current directory, and directory changes persist.
	WorkDir string
	// ImagesDir receives the images cells produce. Empty means
	// <workspace>/images.
	ImagesDir string
	// KernelEnv is added to the kernel's environment. Nothing else of the
	// host's environment reaches the kernel beyond PATH, HOME and LANG.
	KernelEnv map[string]string
	// InitTimeout bounds a kernel start or restart. Zero means 60s.
	//
	// Every duration of Options follows one rule: zero means the default
	// the field names, and a negative value makes Start fail.
	InitTimeout time.Duration
	// InterruptGrace is how long an interrupted cell may take to stop
	// before the kernel is restarted. Zero means 3s.
	InterruptGrace time.Duration
	// Input answers input() in cells. Nil makes input() raise an error.
	// It runs while the cell's timeout and ctx still apply; its ctx ends
	// when the cell does (a timeout, a cancel, Close), and it should
	// return then.
	Input func(ctx context.Context, prompt string, password bool) (string, error)
	// Logger receives ipybox's logs. Nil discards them. With a
	// TracerProvider, lines logged within a traced operation carry its
	// trace_id and span_id.
	Logger *slog.Logger
	// TracerProvider, when set, traces the Executor with OpenTelemetry: a
	// span for each cell (a child of the span of Stream's ctx), each tool
	// call and each shell command that asks for approval made by its code
	// (children of the cell's), each approval wait with its decision, each
	// decision of the sandbox's egress proxy, each kernel start, restart
	// and death, and each RegisterMCPServer. The MCP servers called get
	// the traceparent in their requests' _meta, and kernel code reads it
	// with ipybox_runtime.traceparent(). Attributes carry no secret and no
	// output (docs/observability.md). Nil means no tracing, at no cost.
	TracerProvider trace.TracerProvider
	// TraceCode puts each cell's code (its first 4 KiB) on the cell's span.
	// False (the default) leaves it out: code can hold secrets.
	TraceCode bool

	// NoToolApproval lets MCP tool calls from kernel code run without the
	// application's approval: the named opt-out of the approval gate.
	// False (the default) makes each call an *ApprovalRequest event of
	// Stream (Execute answers through Approver).
	NoToolApproval bool
	// ApproveShellCommands makes every shell command a cell runs (!cmd,
	// x = !cmd, %%bash, %%sh, %%script and the other script magics,
	// system_raw) an *ApprovalRequest too, independently of
	// NoToolApproval. False (the default) runs them without asking.
	ApproveShellCommands bool
	// RequireShellEscape installs Python-level guards on subprocess,
	// os.system, os.exec*, os.spawn*, os.posix_spawn* and pty.spawn, so
	// that processes are started through ! (and so through shell
	// approval). The guards steer well-behaved code; they are not a
	// security boundary (ctypes or a fresh interpreter get around them).
	RequireShellEscape bool
	// Approver answers the approval requests of Execute. It returns nil to
	// accept or an error whose text is the rejection reason. Nil rejects
	// every request (the safe default); ApproveAll accepts every one, as
	// upstream ipybox's execute() does. Stream does not use it: its
	// consumer answers each *ApprovalRequest.
	Approver func(ctx context.Context, req *ApprovalRequest) error
	// ApprovalTimeout bounds the wait for one decision; then the call
	// raises ApprovalTimeoutError in the cell. Zero means 5 minutes.
	ApprovalTimeout time.Duration
	// ApprovalPolicy decides tool calls and shell commands by its rules
	// before the application is asked (deny, then ask, then allow), keeps
	// answers remembered "always", and logs every decision; see
	// ApprovalPolicy. An ask rule asks even about calls that
	// NoToolApproval or ApproveShellCommands would let run, and deny rules
	// apply to them too. Nil means no rules and no audit log.
	ApprovalPolicy *ApprovalPolicy
	// Principal names whom the Executor runs for (a principal of ipybox
	// mcp): the audit log's rows name it, and the tool-call bodies of one
	// principal's Executors take at most half of the process's budget for
	// them, so that one tenant cannot hold up another's calls. Empty means
	// none (a principal of its own for the budget).
	Principal string
	// Tenant keeps what Principal's sessions leave behind apart from
	// other principals' (for a server whose principals are tenants): the
	// answers remembered for the session or always become rules of
	// Principal alone ("allow principal=NAME tool ..."), which no other
	// principal's calls match, and the OAuth sign-ins to remote MCP
	// servers are kept in a token file of Principal's own
	// (mcpconn.PrincipalTokenFile, in the default one's folder, which
	// every sandbox masks). False writes rules for every caller and uses
	// the one token file.
	Tenant bool
	// KernelWritable lists more host folders that kernel code can write
	// besides WorkDir and the sandbox's allowWrite paths: the folders of
	// other tenants' kernels (ipybox mcp gives each principal's
	// Executors the whole workspace, whose other folders those kernels
	// write). No host process starts in one, or runs a program or a
	// script from one (invariant 14), and the approval policy may not
	// lie in one.
	KernelWritable []string
	// SessionID names this Executor's session in the approval audit log.
	// Empty means a random one.
	SessionID string
	// ToolCallTimeout bounds one MCP tool call. Zero means 2 minutes.
	ToolCallTimeout time.Duration

	// DotEnv supplies ${VAR} values for MCP server configs, after the host
	// environment. Nil means none.
	DotEnv map[string]string
	// OAuthURL is called when a remote MCP server needs a user to sign in
	// with OAuth (the authorization code grant): it should show url to the
	// user or open it in a browser, and return at once. The browser is then
	// redirected to a listener on 127.0.0.1, for up to 5 minutes (bounded
	// too by ToolCallTimeout when kernel code made the call). server is the
	// server's registered name; an error aborts the sign-in. Tokens stay on
	// the host, in mcpconn.DefaultTokenFile, never in the kernel. Nil means
	// such a server fails with an error that says to run `ipybox auth login
	// SERVER`, unless a stored token works.
	OAuthURL func(ctx context.Context, server, url string) error

	// ServerGate, when set, is asked before each stdio MCP server starts
	// (one registered now, or loaded from servers.json), with its name and
	// config as registered (its ${VAR} placeholders unfilled): it returns the config to start, of which only Sandbox may
	// differ (a policy to run it in), or an error that refuses the start.
	// ipybox mcp gates there the servers its clients registered
	// (ServerConfig.Origin), under the flags of the run that starts them.
	ServerGate func(name string, cfg ServerConfig) (ServerConfig, error)
	// ClientVars fills the ${VAR} placeholders of configs that an MCP
	// client registered (ServerConfig.Origin) from the environment and
	// DotEnv, as the operator's are. False (the default) makes such a
	// placeholder an error: the values are the operator's secrets. ipybox
	// mcp sets it with --allow-host-servers, under which a client runs
	// commands on the host anyway.
	ClientVars bool
	// ClientPrivateURLs lets the URL servers that an MCP client registered
	// (ServerConfig.Origin) reach loopback, private, link-local and
	// reserved addresses. False (the default) refuses their connections
	// there, after names are resolved (the egress proxy's guard): a
	// client would otherwise make this host send requests to its own
	// loopback services and private network. The operator's servers are
	// not guarded. ipybox mcp sets it with --allow-private-urls and with
	// --allow-host-servers.
	ClientPrivateURLs bool

	// Zygote, when set, forks the kernel from this fork server (see
	// NewZygote) instead of starting it cold: a restart or a new Executor
	// then takes about a fifth of the time. One from NewZygote is used
	// only without Sandbox: a sandboxed kernel never comes from it. One
	// from NewSandboxZygote is used only with Sandbox, and forks each
	// kernel into a sandbox of its own. Options.Python must be empty or
	// the zygote's interpreter. Nil means cold starts.
	Zygote *Zygote

	// Gateway, when set, runs the kernel on a Jupyter server (Jupyter
	// Server, Kernel Gateway, Enterprise Gateway) through its kernels API
	// instead of on this machine: see docs/scale.md for what reaches
	// the kernel and how it reaches the tool server. It excludes Sandbox,
	// Container and Zygote. Nil means a local kernel.
	Gateway *GatewayConfig
	// ToolServerAddr is where a gateway kernel reaches the tool server:
	// "HOST" or "HOST:PORT" (no port, or 0: a free one), HOST being an
	// address or name of this machine that the kernel's machine can
	// reach. The tool server then serves HTTPS there, with a fresh
	// self-signed certificate whose fingerprint the kernel's runtime
	// pins, and the per-session token. Empty means plain HTTP on
	// 127.0.0.1, which only a gateway on this machine reaches. It needs
	// Gateway.
	ToolServerAddr string

	// Sandbox, when set, runs the kernel inside a bubblewrap sandbox with
	// this policy (DefaultSandbox() is a good start). If the sandbox
	// cannot run on this host, Start fails with the cause and the fix; it
	// never runs the kernel unsandboxed instead. Nil means no sandbox.
	Sandbox *SandboxConfig

	// PackageDir is a folder inside the workspace's .ipybox where pip in
	// the kernel installs packages for this Executor alone: the kernel
	// gets PYTHONUSERBASE pointing there and PIP_USER=1, and a sandbox or
	// a container lets it write that folder, while the shared virtualenv
	// and the rest of ipybox's state stay read-only inside. Packages there
	// survive Reset, and no other Executor's kernel imports them. It is
	// created when missing. A system Python that Debian manages refuses
	// user installs (PEP 668); a virtualenv made with
	// --system-site-packages takes them. Empty means none.
	PackageDir string

	// SnapshotDir is a folder inside the workspace's .ipybox where
	// Snapshot saves the kernel's namespace and Restore reads it back.
	// Like PackageDir, it is this Executor's alone: a sandbox or a
	// container lets its kernel write it and hides it from every other
	// kernel, and the host never reads what is in it (it only measures its
	// size, and copies, moves or removes its files). It is created when
	// missing and kept at Close, so that a later Executor given the same
	// folder restores from it. Without a sandbox or a container, kernel
	// code has the user's rights, and nothing hides it. Empty means none:
	// Snapshot and Restore then fail.
	SnapshotDir string

	// RewindDepth is how many cell boundaries the Executor keeps for
	// Rewind, at most maxRewindDepth (3), one before each cell. For an
	// unsandboxed kernel on Linux a boundary is a copy-on-write fork of
	// the kernel, stopped, which costs a few milliseconds per cell and
	// the memory the kernel changes since. A sandboxed or container
	// kernel (or any off Linux) cannot be forked so: its boundary is a
	// snapshot of the namespace that the kernel saves before each cell in
	// a folder of SnapshotDir (which it then needs: Start fails without
	// one), within the last Snapshot's MaxBytes, which costs what a
	// Snapshot does, per cell (docs/fork.md measures it), and a rewind
	// restarts the kernel and loads it. A gateway kernel keeps none.
	// Zero keeps none.
	RewindDepth int

	// Container, when set, runs the kernel in a Docker container with this
	// configuration (see ContainerConfig); the kernel then sees the
	// workspace at /app/workspace. It excludes Sandbox, and Zygote is
	// not used. If Docker or the image is missing, Start fails with the
	// cause and the fix. Nil means no container.
	Container *ContainerConfig
}

// GatewayConfig runs the kernel on a Jupyter server (Jupyter Server,
// Kernel Gateway or Enterprise Gateway) through its kernels API instead
// of as a local process, for [Options].Gateway. See docs/scale.md.
type GatewayConfig struct {
	// URL is the server's base URL, http:// or https:// (https checks the
	// certificate against the system's roots). Required.
	URL string
	// Token authenticates to the server ("Authorization: token ..."). It
	// is never logged, put in an error, or passed to the kernel. Empty
	// sends none.
	Token string
	// KernelName is the kernelspec to start. Empty means "python3".
	KernelName string
	// LegacyProtocol offers no websocket subprotocol, so that the kernel
	// speaks the legacy JSON frames. False offers the
	// v1.kernel.websocket.jupyter.org subprotocol, and speaks the legacy
	// frames when the server does not pick it.
	LegacyProtocol bool
	// KernelID, when set, makes Start attach to this kernel, already
	// running on the server (one that [Executor.Detach] left, or that
	// another front end started), instead of starting one: its namespace
	// is kept, the init code is not run again, and only the environment is
	// set in it, so that it reaches this host's tool server. A restart
	// ([Executor.Reset], or a death) starts a fresh kernel as usual. Empty
	// means a new kernel.
	KernelID string
}

// kernelGateway is g as the kernel package takes it.
func (g *GatewayConfig) kernelGateway() *kernel.GatewayConfig {
	k := &kernel.GatewayConfig{URL: g.URL, Token: g.Token, KernelName: g.KernelName, KernelID: g.KernelID}
	if g.LegacyProtocol {
		k.Protocol = kernel.GatewayProtocolLegacy
	}
	return k
}

// ExecOptions configures one execution. A nil *ExecOptions means the
// defaults.
type ExecOptions struct {
	// Timeout bounds the cell's run time. On expiry the cell is
	// interrupted, the kernel keeps its state, and the call returns a
	// *TimeoutError (errors.Is(err, ErrTimeout)). Zero means no limit
	// beyond the context; negative is an error.
	Timeout time.Duration
	// KeepText bounds the text the *Result keeps, so that a cell printing
	// hundreds of megabytes does not hold them all in memory: its first
	// and last KeepText/2 bytes, with Result.Omitted counting the rest.
	// It bounds the kept displays the same way (KeepText bytes of them,
	// then Result.OmittedDisplays counts the rest). Stream still delivers
	// every byte as *Output and *Display events. Zero means
	// 64 MiB; a negative value keeps everything (as much memory
	// as the cell prints, which kernel code chooses).
	KeepText int
}

// defaultKeepText is the text a *Result keeps when ExecOptions.KeepText is
// zero: 64 MiB, its first and last 32 MiB.
const defaultKeepText = 64 << 20

// keepText is the kernel's KeepText for opts (0: keep all).
func keepText(opts *ExecOptions) int {
	switch {
	case opts == nil || opts.KeepText == 0:
		return defaultKeepText
	case opts.KeepText < 0:
		return 0
	}
	return opts.KeepText
}

// Executor runs code in one stateful kernel. Executions are serialised: a
// second call waits for the first, or fails when its context ends first.
type Executor struct {
	opts      Options
	workspace string
	// kernelWorkspace is the workspace as the kernel sees it; "" for a
	// gateway kernel, whose working directory is the gateway's.
	kernelWorkspace string
	runDir          string
	k               *kernel.Kernel
	sem             chan struct{}
	log             *slog.Logger

	// packageDir is Options.PackageDir and snapshotDir
	// Options.SnapshotDir, absolute ("" for none).
	packageDir, snapshotDir string

	registry *mcpconn.Registry
	mcp      *mcpconn.Manager
	tools    *toolserver.Server
	toolURL  string
	toolPin  string // the tool server certificate's fingerprint, for https

	cellMu sync.Mutex
	cur    *cell // the running cell, nil between cells

	// session names the Executor in the approval audit log; sessRules are
	// the answers remembered for the session.
	session   string
	sessMu    sync.Mutex
	sessRules *policy.Rules

	// forget lists servers whose modules were regenerated: the kernel
	// drops its imports of them before the next cell (see forgetModules).
	forgetMu sync.Mutex
	forget   []string

	sandboxes sandboxSet
	container *container.Launcher // the container backend, when Options.Container is set
	// kernelSandbox is the kernel's sandbox, when Options.Sandbox is set.
	kernelSandbox *sandbox.Sandbox
	stopEgress    func() error // the container's egress proxy, when it has one

	// tel traces (nil: off); kernelObs observes the kernel, and
	// stopWatch ends the report of its memory.
	tel       *telemetry.Tracer
	kernelObs *telemetry.Kernel
	stopWatch func()

	// forked says how this Executor was forked (nil: it was not); see
	// fork.go. rewind keeps its cell boundaries.
	forked *ForkInfo
	rewind rewindState
	// saved is the last snapshot, for a fork (snapshot.go).
	saved savedSnapshot

	closeOnce sync.Once
	closeErr  error
	detached  bool // Detach, not Close: the gateway kernel runs on
}

// Start starts a kernel and returns an Executor for it.
func Start(ctx context.Context, opts *Options) (*Executor, error) {
	return start(ctx, opts, nil)
}

// start is Start; wrap, when set, replaces the launcher (a fork's, see
// fork.go).
func start(ctx context.Context, opts *Options, wrap func(kernel.Launcher) kernel.Launcher) (*Executor, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	e, err := newExecutor(&o)
	if err != nil {
		return nil, err
	}
	if e.runDir, err = kernel.NewRunDir(); err != nil {
		return nil, fmt.Errorf("ipybox: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			e.closeParts()
		}
	}()
	if err := checkOptions(e.workspace, &o); err != nil {
		return nil, err
	}
	if err := e.startTools(); err != nil {
		return nil, fmt.Errorf("ipybox: %w", err)
	}
	launcher, kws, err := e.launcher(ctx, &o)
	if err != nil {
		return nil, err
	}
	if wrap != nil {
		launcher = wrap(launcher)
	}
	ko, err := e.kernelOptions(&o, launcher, kws)
	if err != nil {
		return nil, err
	}
	e.kernelObs = e.tel.Kernel(backend(&o), e.session)
	if e.k, err = kernel.Start(telemetry.WithKernel(ctx, e.kernelObs), ko); err != nil {
		return nil, fmt.Errorf("ipybox: %w", err)
	}
	e.stopWatch = e.kernelObs.Watch(e.k.Pid)
	ok = true
	return e, nil
}

// newExecutor applies o's defaults and checks its workspace and package
// folder.
func newExecutor(o *Options) (*Executor, error) {
	if err := defaults.Apply("ipybox",
		defaults.Duration{Name: "Options.InitTimeout", V: &o.InitTimeout, Def: defaults.KernelStart},
		defaults.Duration{Name: "Options.InterruptGrace", V: &o.InterruptGrace, Def: defaults.InterruptGrace},
		defaults.Duration{Name: "Options.ApprovalTimeout", V: &o.ApprovalTimeout, Def: defaults.Approval},
		defaults.Duration{Name: "Options.ToolCallTimeout", V: &o.ToolCallTimeout, Def: defaults.ToolCall},
	); err != nil {
		return nil, err
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tel := telemetry.New(o.TracerProvider, o.TraceCode)
	if tel != nil {
		log = telemetry.Logger(log)
	}
	e := &Executor{opts: *o, sem: make(chan struct{}, 1), log: log, session: o.SessionID, tel: tel}
	if e.session == "" {
		e.session = newSessionID()
	}
	ws := o.WorkDir
	if ws == "" {
		var err error
		if ws, err = os.Getwd(); err != nil {
			return nil, err
		}
	}
	ws, err := filepath.Abs(ws)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(ws); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("ipybox: working directory %q is not a directory; create it or choose another WorkDir", ws)
	}
	e.workspace = ws
	for _, d := range []struct {
		name string
		val  string
		dst  *string
	}{{"PackageDir", o.PackageDir, &e.packageDir}, {"SnapshotDir", o.SnapshotDir, &e.snapshotDir}} {
		if d.val == "" {
			continue
		}
		if o.Gateway != nil {
			return nil, fmt.Errorf("ipybox: Options.%s is a folder of this machine's workspace, and a gateway kernel runs on its own machine: leave it empty", d.name)
		}
		if *d.dst, err = stateDir(ws, "Options."+d.name, d.val); err != nil {
			return nil, err
		}
	}
	if e.packageDir != "" && e.packageDir == e.snapshotDir {
		return nil, errors.New("ipybox: Options.PackageDir and Options.SnapshotDir are the same folder; give each its own")
	}
	if err := checkRewind(o, e.snapshotDir); err != nil {
		return nil, err
	}
	return e, nil
}

// checkOptions refuses options that exclude each other, and an approval
// policy kernel code could write.
func checkOptions(ws string, o *Options) error {
	switch {
	case o.ToolServerAddr != "" && o.Gateway == nil:
		return errors.New("ipybox: Options.ToolServerAddr is where a gateway kernel reaches the tool server; set Gateway too, or leave it empty")
	case o.Gateway != nil && (o.Sandbox != nil || o.Zygote != nil || o.Container != nil):
		return errors.New("ipybox: Options.Gateway runs the kernel on the gateway, and Sandbox, Container and Zygote apply to local kernels only; leave them nil with a gateway")
	case o.Zygote != nil && o.Zygote.sandboxed && o.Sandbox == nil:
		return errors.New("ipybox: Options.Zygote is a sandbox fork server (NewSandboxZygote), which forks kernels into sandboxes only; set Sandbox, or use NewZygote's")
	case o.Container != nil && o.Sandbox != nil:
		return errors.New("ipybox: Options.Container and Options.Sandbox exclude each other; the container is the boundary")
	}
	exempt := ""
	if o.Sandbox == nil && o.Container == nil {
		exempt, _ = os.UserConfigDir()
	}
	return checkPolicyOutside(o.ApprovalPolicy, kernelWritable(ws, o), exempt)
}

// launcher prepares how the kernel runs (a container, a sandbox, the fork
// server; nil: directly) and returns the workspace as the kernel sees it.
func (e *Executor) launcher(ctx context.Context, o *Options) (kernel.Launcher, string, error) {
	switch {
	case o.Container != nil:
		l, err := e.startContainer(ctx)
		if err != nil {
			return nil, "", fmt.Errorf("ipybox: %w", err)
		}
		o.Python = ""
		return l, container.WorkspaceDir, nil
	case o.Sandbox != nil:
		if z := o.Zygote; z != nil && z.sandboxed {
			if o.Python != "" && o.Python != z.z.Python() {
				return nil, "", fmt.Errorf("ipybox: Options.Python %s is not the sandbox zygote's interpreter %s; leave it empty or start the zygote with it", o.Python, z.z.Python())
			}
			o.Python = z.z.Python()
		}
		l, err := e.startSandbox(ctx)
		if err != nil {
			return nil, "", fmt.Errorf("ipybox: %w", err)
		}
		return l, e.workspace, nil
	case o.Zygote != nil:
		if o.Python != "" && o.Python != o.Zygote.z.Python() {
			return nil, "", fmt.Errorf("ipybox: Options.Python %s is not the zygote's interpreter %s; leave it empty or start the zygote with it", o.Python, o.Zygote.z.Python())
		}
		o.Python = o.Zygote.z.Python()
		return o.Zygote.z, e.workspace, nil
	}
	return nil, e.workspace, nil
}

// kernelOptions builds the kernel's start: the runtime and its init code,
// the environment, the images folder; kws is the workspace as the kernel
// sees it.
func (e *Executor) kernelOptions(o *Options, launcher kernel.Launcher, kws string) (*kernel.Options, error) {
	pyDir, err := pyruntime.Install(filepath.Join(e.runDir, "py"))
	if err != nil {
		return nil, fmt.Errorf("ipybox: %w", err)
	}
	// The policy's shell rules apply to commands that would otherwise run
	// without asking too: they go through approval.
	init := pyruntime.InitConfig{
		SysPath:            []string{pyDir},
		SysPathEnd:         []string{kws},
		ShellApproval:      o.ApproveShellCommands || o.ApprovalPolicy.hasShellRules(),
		RequireShellEscape: o.RequireShellEscape,
	}
	if o.WorkDir != "" {
		init.WorkDir = kws
	}
	imagesDir := o.ImagesDir
	if imagesDir == "" {
		imagesDir = filepath.Join(e.workspace, "images")
	}
	if imagesDir, err = filepath.Abs(imagesDir); err != nil {
		return nil, err
	}
	env := envList(o.KernelEnv)
	env = append(env, e.toolEnv()...)
	if e.packageDir != "" {
		env = append(env, "PYTHONUSERBASE="+e.kernelPath(e.packageDir), "PIP_USER=1")
	}
	if o.Sandbox != nil || o.Container != nil {
		// No bytecode is written: the workspace's __pycache__ is the
		// host's (the guard refuses it, see internal/hostpaths), or a .pyc
		// there would run in place of the host's own module. Not a
		// PYTHONPYCACHEPREFIX: Python then reads bytecode only from the
		// prefix, and every kernel, in its private /tmp, compiled
		// IPython anew (1.3 s of CPU, against 0.4 s that reads the
		// system's bytecode); a burst of 20 took three times as long.
		env = append(env, "PYTHONDONTWRITEBYTECODE=1")
	}
	ko := &kernel.Options{
		Python:         o.Python,
		Writable:       hostWritable(e.workspace, o),
		Launcher:       launcher,
		Dir:            e.workspace,
		Env:            env,
		PythonPath:     []string{pyDir},
		RunDir:         e.runDir,
		ImagesDir:      imagesDir,
		InitCode:       pyruntime.InitCode(init),
		StartTimeout:   o.InitTimeout,
		InterruptGrace: o.InterruptGrace,
		Logger:         e.log,
	}
	if o.Gateway == nil {
		e.kernelWorkspace = kws
		return ko, nil
	}
	// The kernel may not share this file system: the runtime travels as
	// code over the channel, and the working directory is the gateway's
	// (see docs/scale.md).
	ko.Gateway = o.Gateway.kernelGateway()
	init.SysPath, init.SysPathEnd = nil, nil
	init.WorkDir = ""
	init.Remote = true
	ko.InitCode = pyruntime.InstallCode() + pyruntime.InitCode(init)
	ko.PythonPath = nil
	return ko, nil
}

// kernelWritable lists the host places that the kernel of o can write:
// the workspace, Options.KernelWritable, and a sandbox's allowWrite paths
// or a container's binds.
func kernelWritable(ws string, o *Options) []string {
	out := append([]string{ws}, o.KernelWritable...)
	abs := func(p string) string {
		if !filepath.IsAbs(p) && !strings.HasPrefix(p, "~") {
			return filepath.Join(ws, p)
		}
		return p
	}
	if o.Sandbox != nil {
		for _, w := range o.Sandbox.Filesystem.AllowWrite {
			out = append(out, abs(w))
		}
	}
	if o.Container != nil {
		for _, b := range o.Container.Binds {
			if p, err := filepath.Abs(b.HostPath); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// stateDir checks a folder of an Executor's own (Options.PackageDir,
// Options.SnapshotDir, named by field) and creates it, without following a
// link.
func stateDir(ws, field, dir string) (string, error) {
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(ws, dir)
	}
	dir = filepath.Clean(dir)
	state := filepath.Join(ws, ".ipybox")
	rel, err := filepath.Rel(ws, dir)
	if err != nil || dir == state || !strings.HasPrefix(dir, state+string(filepath.Separator)) {
		return "", fmt.Errorf("ipybox: %s %q must be a folder inside %s (ipybox's state, which kernels cannot otherwise write)", field, dir, state)
	}
	if _, err := statedir.Ensure(ws); err != nil {
		return "", fmt.Errorf("ipybox: %s: %w", field, err)
	}
	if err := safefs.MkdirAll(ws, rel, 0o700); err != nil {
		return "", fmt.Errorf("ipybox: %s: %w", field, err)
	}
	return dir, nil
}

// ownState lists the folders of ipybox's state that are this Executor's
// own: its package folder and its snapshot folder. It is the one place
// every launcher takes them from: a sandbox and a container hide .ipybox
// whole from the kernel and bind these into it, writable, so that no
// other Executor's kernel sees them.
func (e *Executor) ownState() []string { return nonEmpty(e.packageDir, e.snapshotDir) }

// kernelPath maps a host path in the workspace to the kernel's view.
func (e *Executor) kernelPath(p string) string {
	if e.opts.Container == nil {
		return p
	}
	rel, err := filepath.Rel(e.workspace, p)
	if err != nil || strings.HasPrefix(rel, "..") {
		return p
	}
	return path.Join(container.WorkspaceDir, filepath.ToSlash(rel))
}

func envList(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// Workspace returns the kernel's working directory.
func (e *Executor) Workspace() string { return e.workspace }

// Execute runs code as one cell and returns its result. It has no way to
// ask the application about a tool call or shell command that needs
// approval: it answers through Options.Approver, and without one it
// rejects them (the cell sees ApprovalRejectedError). Use Stream to
// decide each request as it comes.
//
// A Python exception gives both the Result (with the output printed before
// it) and a *PythonError. A timeout gives the partial Result and a
// *TimeoutError. A dead kernel gives ErrKernelDied; the next call starts a
// fresh kernel.
func (e *Executor) Execute(ctx context.Context, code string, opts *ExecOptions) (*Result, error) {
	return collect(e.Stream(ctx, code, opts), func(r *ApprovalRequest) {
		if e.opts.Approver == nil {
			r.Answer(Answer{Reason: errNoApprover, By: byDefault, Channel: "Execute without Options.Approver"})
		} else if err := e.opts.Approver(ctx, r); err != nil {
			r.Answer(Answer{Reason: err.Error(), Channel: "Options.Approver"})
		} else {
			r.Answer(Answer{Accept: true, Channel: "Options.Approver"})
		}
	})
}

// collect runs a cell's events to their end for Execute: it answers each
// approval request with answer, and returns the last Result and the error.
func collect(events iter.Seq2[Event, error], answer func(*ApprovalRequest)) (*Result, error) {
	var last *Result
	for ev, err := range events {
		if err != nil {
			return last, err
		}
		switch ev := ev.(type) {
		case *Result:
			last = ev
		case *ApprovalRequest:
			answer(ev)
		}
	}
	return last, nil
}

// Stream runs code as one cell and yields its events as they happen:
// *Output, *Display, *ClearOutput and *ApprovalRequest, then the *Result
// last. An error ends the sequence; for a Python error or a timeout the
// partial *Result is yielded just before it. Stopping the iteration early
// rejects the open approval requests and interrupts the cell.
func (e *Executor) Stream(ctx context.Context, code string, opts *ExecOptions) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		if opts != nil && opts.Timeout < 0 {
			yield(nil, fmt.Errorf("ipybox: ExecOptions.Timeout is %v; use a positive duration, or 0 for no limit beyond ctx", opts.Timeout))
			return
		}
		if err := e.acquire(ctx); err != nil {
			yield(nil, err)
			return
		}
		defer e.release()
		e.forgetPending(ctx)

		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		runCtx, span := e.tel.StartCell(runCtx, e.session, code)
		stopped := false
		stop := func() {
			stopped = true
			cancel() // interrupts the cell
		}
		c := &cell{calls: make(chan cellctl.Call), done: make(chan struct{}), pending: map[*ApprovalRequest]struct{}{}, span: span.Context()}
		hooks := &cellctl.Hooks{Calls: c.calls, TraceParent: span.TraceParent()}
		if opts != nil && opts.Timeout > 0 {
			c.budget = cellctl.NewBudget(opts.Timeout)
			defer c.budget.Stop()
			hooks.Budget = c.budget
		}
		var ko kernel.ExecOptions
		ko.KeepText = keepText(opts)
		ko.Input = e.opts.Input
		ko.OnEvent = func(ev kernel.Event) {
			if !stopped && !yield(eventOf(ev), nil) {
				stop()
			}
		}
		c.deliver = func(r *ApprovalRequest) {
			if !stopped && !yield(r, nil) {
				stop()
			}
			if stopped {
				r.abandon("the application stopped listening for approval requests")
			}
		}
		e.cellMu.Lock()
		e.cur = c
		e.cellMu.Unlock()
		defer func() {
			e.cellMu.Lock()
			e.cur = nil
			e.cellMu.Unlock()
			close(c.done)
			c.rejectPending("the cell ended")
		}()

		died := e.checkpointBefore(runCtx, code)
		res, err := e.k.Execute(cellctl.With(runCtx, hooks), code, &ko)
		if res != nil {
			res.Note = e.takeNote()
			if res.Restarted == nil {
				res.Restarted = died
			}
		}
		e.endCell(span, err)
		if stopped {
			return
		}
		if res != nil {
			if !yield(resultOf(res), nil) {
				return
			}
		}
		if err != nil {
			yield(nil, executorErr(err))
		}
	}
}

func (e *Executor) acquire(ctx context.Context) error {
	select {
	case e.sem <- struct{}{}:
		e.saved.fresh = false // a cell, a reset, a restore: the namespace may change
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ipybox: waiting for the previous execution: %w", ctx.Err())
	}
}

func (e *Executor) release() { <-e.sem } // bound: the caller holds it

// Reset replaces the kernel with a fresh one: variables, functions and
// imports are gone; files in the workspace persist.
func (e *Executor) Reset(ctx context.Context) error {
	if err := e.acquire(ctx); err != nil {
		return err
	}
	defer e.release()
	if err := e.k.Restart(ctx); err != nil {
		return fmt.Errorf("ipybox: reset: %w", executorErr(err))
	}
	e.dropCheckpoints() // the old namespace is gone, and cannot come back
	e.forgetMu.Lock()
	e.forget = nil // a fresh kernel has imported nothing
	e.forgetMu.Unlock()
	// MCP sessions restart lazily on the next call.
	if err := e.mcp.StopAll(ctx); err != nil {
		return fmt.Errorf("ipybox: reset: stop MCP servers: %w", err)
	}
	return nil
}

// Interrupt interrupts the running cell, if any.
func (e *Executor) Interrupt() error { return executorErr(e.k.Interrupt()) }

// Close stops the kernel and removes the run directory. It is idempotent,
// safe to call concurrently, and bounded in time.
func (e *Executor) Close() error {
	e.closeOnce.Do(func() {
		if err := e.closeParts(); err != nil {
			e.closeErr = fmt.Errorf("ipybox: close: %w", err)
		}
	})
	return e.closeErr
}

// closeParts stops what Start started, in order: the tool server first
// (open approvals end), then the kernel, then the MCP servers.
func (e *Executor) closeParts() error {
	if e.stopWatch != nil {
		e.stopWatch()
	}
	e.dropCheckpoints()
	var errs []error
	if e.tools != nil {
		errs = append(errs, e.tools.Close())
	}
	if e.k != nil {
		stop := e.k.Close
		if e.detached {
			stop = e.k.Detach
		}
		if err := stop(); !errors.Is(err, kernel.ErrClosed) {
			errs = append(errs, err)
		}
	}
	if e.mcp != nil {
		errs = append(errs, e.mcp.Close())
	}
	errs = append(errs, e.sandboxes.close())
	if e.container != nil {
		errs = append(errs, e.container.Close())
	}
	if e.stopEgress != nil {
		errs = append(errs, e.stopEgress())
	}
	if e.runDir != "" {
		errs = append(errs, os.RemoveAll(e.runDir))
	}
	return errors.Join(errs...)
}
