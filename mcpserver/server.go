package mcpserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/defaults"
	"github.com/ipybox/ipybox/internal/telemetry"
	"github.com/ipybox/ipybox/internal/waitgroup"
)

// ApprovalMode says who approves the tool calls and shell commands of cells.
type ApprovalMode string

// Approval modes of Options.Approvals.Mode.
const (
	// ApprovalAuto approves every tool call and shell command.
	ApprovalAuto ApprovalMode = "auto"
	// ApprovalElicit asks the connected MCP client, through elicitation,
	// about each tool call and each shell command a cell makes.
	ApprovalElicit ApprovalMode = "elicit"
)

// Default values of Options.
const (
	// defaultSessionIdleTimeout, defaultStartTimeout and
	// defaultApprovalTimeout are internal/defaults' (cmd/ipybox's flags
	// take theirs from there too).
	defaultSessionIdleTimeout = defaults.SessionIdle
	defaultStartTimeout       = defaults.SessionStart
	// defaultMaxSessions bounds the kernels of an HTTP server: a kernel
	// holds 60-100 MB.
	defaultMaxSessions = defaults.MaxSessions
	// defaultMaxRegisteredServers bounds the stdio servers the clients
	// of one principal register (a sandboxed server holds about 10 MB).
	defaultMaxRegisteredServers = 16
	// defaultApprovalTimeout bounds one approval question.
	defaultApprovalTimeout = defaults.Approval
	// defaultSpillCellBytes and defaultSpillWorkspaceBytes bound the files
	// of ipybox-outputs: kernel code printing without end wrote 839 MB in
	// 21 s.
	defaultSpillCellBytes      = 32 << 20
	defaultSpillWorkspaceBytes = 256 << 20
)

// Bind makes a host directory visible inside the workspace, at RelPath.
type Bind struct {
	HostPath string
	RelPath  string
}

// Options configures a Server. A nil *Options means the defaults; New copies
// the struct.
type Options struct {
	// Workspace is the kernel's working directory, shared by every session:
	// it holds mcptools/, images/, .ipybox/ (the registry of MCP servers and
	// the kernel's virtualenv) and the agent's files. With several
	// principals (HTTP.Principals and HTTP.AuthToken name two or more), each has a
	// workspace of its own, Workspace/<principal>, made at its first use,
	// and the kernels see only theirs (see docs/mcp.md). Empty means the
	// current directory.
	Workspace string
	// Python is the interpreter the workspace's virtualenv is created from
	// (with --system-site-packages, so that its ipykernel stays visible).
	// Empty means discovery, as ipybox.Options.Python describes.
	Python string
	// RequireShellEscape installs Python-level guards in each kernel so
	// that processes start through ! (and so through shell approval); see
	// ipybox.Options.RequireShellEscape. False means no guards.
	RequireShellEscape bool
	// RewindDepth is how many cell boundaries each session keeps for
	// rewind_session (ipybox.Options.RewindDepth, at most
	// defaults.MaxRewindDepth): process copies for unsandboxed kernels,
	// snapshots for sandboxed and container ones. Zero keeps none:
	// rewind_session then says so.
	RewindDepth int
	// ImagesDir receives the images cells produce. Empty means
	// <Workspace>/images. A sandboxed kernel can write only inside the
	// workspace (and the sandbox's allowWrite paths).
	ImagesDir string
	// KernelEnv is added to each kernel's environment (and to pip's, for
	// install_package). Nothing else of the host's environment reaches the
	// kernel beyond PATH, HOME and LANG. Nil means nothing more.
	KernelEnv map[string]string
	// DotEnv supplies ${VAR} values for MCP server configs, after the host
	// environment. Nil means none.
	DotEnv map[string]string
	// AllowedDirs are the host directories upload_file may read from and
	// download_file may write to. The check is made on real paths, after
	// symbolic links are resolved. Nil means the workspace and the system
	// temporary directory.
	AllowedDirs []string
	// Binds make host directories visible inside the workspace. Without a
	// sandbox each one is a symbolic link at <workspace>/<RelPath>, created
	// when missing. Nil means none.
	Binds []Bind
	// Servers are MCP servers registered at start (in the first session's
	// kernel, which persists them in the workspace). Nil means none.
	Servers map[string]ipybox.ServerConfig
	// AllowHostServers lets register_mcp_server start a stdio server on
	// the host, as its config says: every client that can call tools can
	// then run commands on the host. False runs such a server in the
	// sandbox, under Sandbox's policy, and refuses it when there is no
	// sandbox. Servers of Servers, and those an application registers
	// through ipybox.Executor.RegisterMCPServer, run as configured either
	// way.
	AllowHostServers bool
	// AllowPrivateURLs lets URL servers registered through
	// register_mcp_server reach loopback, private, link-local and
	// reserved addresses (ipybox mcp --allow-private-urls; implied by
	// AllowHostServers). False refuses those connections: a client would
	// otherwise make this host send requests to its loopback services
	// (this server's own HTTP port among them) and its private network.
	AllowPrivateURLs bool
	// Sandbox, when set, runs every session's kernel, and install_package's
	// pip, inside a bubblewrap sandbox with this policy; bound directories
	// (Binds) are made writable in it. If the sandbox cannot run here,
	// calls fail with the cause; nothing runs unsandboxed. Nil means no
	// sandbox.
	Sandbox *ipybox.SandboxConfig
	// Container, when set, runs every session's kernel in a Docker
	// container with this configuration (see ipybox.ContainerConfig); the
	// kernel sees the workspace at /app/workspace, and install_package is
	// refused (packages belong in the image). It excludes Sandbox. Nil
	// means no container.
	Container *ipybox.ContainerConfig
	// Gateway, when set, runs every session's kernel on this Jupyter
	// server (see ipybox.Options.Gateway and docs/scale.md) instead of on
	// this machine; Sandbox and Container must then be nil, and
	// install_package installs into the workspace's virtualenv on this
	// machine, which the gateway's kernels do not use. Nil means local
	// kernels.
	Gateway *ipybox.GatewayConfig
	// ToolServerAddr is where the gateway's kernels reach each session's
	// tool server (ipybox.Options.ToolServerAddr): "HOST" or "HOST:0", as
	// every session listens on a port of its own. Empty means 127.0.0.1.
	ToolServerAddr string
	// SpillCellBytes bounds the file in the workspace's ipybox-outputs
	// folder that keeps one cell's whole output when it is too long for
	// the result; what is printed past it is dropped, and the result says
	// how much. Zero means 32 MiB (defaultSpillCellBytes); negative keeps no file.
	SpillCellBytes int64
	// SpillWorkspaceBytes bounds the ipybox-outputs folder as a whole: a
	// cell's file stops where the folder would pass it (its files are
	// counted when the file is made), and the result says to delete old
	// ones. Zero means 256 MiB (defaultSpillWorkspaceBytes); negative keeps no file.
	SpillWorkspaceBytes int64
	// Version is reported to clients in the initialize result. Empty means
	// "dev".
	Version string
	// TracerProvider, when set, traces the server with OpenTelemetry: each
	// session's start, and everything ipybox.Options.TracerProvider traces
	// in its kernels. A request's cell is the child of the traceparent in
	// the request's _meta. Nil means no tracing, at no cost.
	TracerProvider trace.TracerProvider
	// TraceCode puts each cell's code on its span
	// (ipybox.Options.TraceCode). False leaves it out.
	TraceCode bool
	// Logger receives the server's logs. Nil discards them.
	Logger *slog.Logger
	// HTTP holds the HTTP server's tokens, principals and idle timeout.
	HTTP HTTPOptions
	// Sessions bounds the sessions' kernels and says how they start.
	Sessions SessionOptions
	// Durability says how sessions hibernate, expire and are saved.
	Durability DurabilityOptions
	// Approvals says who approves tool calls and shell commands.
	Approvals ApprovalOptions
}

// HTTPOptions are the options of the HTTP server (Handler): its tokens and
// principals, and its transport sessions. The zero value is the
// default: a token is required, and none is accepted.
type HTTPOptions struct {
	// AuthToken is a bearer token Handler accepts, for the principal
	// "default". Empty means none.
	AuthToken string
	// Principals maps each principal's name (see ValidPrincipalName) to
	// its bearer token. Handler accepts every token of it and AuthToken;
	// a request's token names its principal, which owns the sessions it
	// creates: another principal's handles are unknown to it. Without
	// AuthToken and Principals every HTTP request is refused, unless
	// NoAuth is set. Nil means none.
	Principals map[string]string
	// NoAuth serves HTTP without a token: the explicit opt-out, for a
	// loopback address only (see CheckHTTPAddr). False means a token is
	// required.
	NoAuth bool
	// UI serves the web page (docs/ui.md) at /ui/ of Handler: each
	// principal, signed in with its bearer token, watches its sessions'
	// cells, answers their approvals, reads its audit rows and exports
	// notebooks. It needs a token (not NoAuth). False serves no page.
	UI bool
	// SessionIdleTimeout ends an HTTP transport session of a 2025-11-25
	// client, with its implicit session, that received no call for this
	// long. (Stdio ends with its process; a session of create_session
	// hibernates, then expires: see DurabilityOptions.) Zero means
	// defaultSessionIdleTimeout. (For every duration of Options and its
	// groups, zero means the default the field names, and a negative
	// value makes New fail.)
	SessionIdleTimeout time.Duration
}

// SessionOptions bound the sessions and their kernels: how long a start
// may take, how many kernels run, and how they start (the warm pool, the
// fork server). The zero value means the defaults each field names.
type SessionOptions struct {
	// StartTimeout bounds the wait of a tool call for its session's kernel
	// (the virtualenv's creation and the kernel's start). Zero means
	// defaultStartTimeout.
	StartTimeout time.Duration
	// MaxSessions bounds the sessions that hold a kernel at once, over
	// every principal: a session takes a kernel at its first cell, and a
	// call that would start one more gets an error that says so. Sessions
	// without a kernel (made, never run) do not count. Zero means
	// defaultMaxSessions; negative means no limit.
	MaxSessions int
	// MaxSessionsPerPrincipal bounds the kernels of each principal in the
	// same way. Zero means half of MaxSessions (at least 1) with several
	// principals, so that no principal takes every kernel, and MaxSessions
	// with one; negative means no limit of its own.
	MaxSessionsPerPrincipal int
	// MaxRegisteredServers bounds the stdio servers that the clients of
	// one principal register with register_mcp_server (the operator's
	// Servers do not count; registering a name again replaces its server
	// and counts once): each runs a process of its own, in a sandbox of
	// its own, in every session that uses it. Zero means
	// defaultMaxRegisteredServers; negative means no limit.
	MaxRegisteredServers int
	// Pool is how many kernels are kept started in advance for new
	// sessions (refilled in the background), so that a session gets one in
	// milliseconds. With several principals there is none: a pooled
	// kernel starts in one principal's folder before its session is
	// known. Zero means none (each session starts its own).
	Pool int
	// PoolMax is how far the pool grows with demand: each session that
	// finds it empty raises what it keeps ready by one, up to PoolMax, and
	// every two quiet minutes it shrinks by one back to Pool. Each pooled
	// sandboxed session costs about 20 MB of memory forked (its share of
	// pages, PSS; 36 MB cold), so the default growth to 4 costs about
	// 80 MB at its peak. Zero means
	// 4 (or Pool, if larger); below Pool means Pool.
	PoolMax int
	// NoZygote turns off the fork server that unsandboxed kernels are
	// forked from (a fifth of a cold start). False means it is used
	// whenever the kernels are not sandboxed.
	NoZygote bool
	// SandboxZygote forks sandboxed kernels, each into a sandbox of its
	// own, from a pre-imported Python (ipybox.NewSandboxZygote; see
	// docs/sandbox.md, "Forked kernels"; `ipybox mcp` sets it unless
	// --sandbox-fork-server=false or --no-fork-server). False means every
	// sandboxed kernel starts cold.
	SandboxZygote bool
}

// DurabilityOptions say how sessions of create_session outlive their
// kernels and the process (docs/durable.md): hibernation, expiry,
// checkpoints, the state folder and the snapshots' budgets. The zero
// value means the defaults each field names.
type DurabilityOptions struct {
	// HibernateAfter hibernates a session whose kernel received no call
	// for this long: its namespace is saved and its kernel stops (a
	// gateway session detaches from its kernel, which keeps its state),
	// and its next call restores it into a fresh kernel. Zero means
	// defaultHibernateAfter.
	HibernateAfter time.Duration
	// SessionExpiry ends a session of create_session that received no
	// call for this long, hibernated or not: its snapshot, its package
	// folder and its handle are gone. Zero means defaultSessionExpiry.
	SessionExpiry time.Duration
	// Checkpoint says when a namespace is saved beyond hibernation:
	// CheckpointCell saves it after every cell that completes, behind the
	// cell's result, so that a server killed with SIGKILL comes back as
	// it was after the last one. Empty means CheckpointNone.
	Checkpoint CheckpointMode
	// StateDir keeps the sessions of create_session beyond the process:
	// their handles' digests, principals and folders. A server started
	// on the same state folder (and the same tokens) accepts their
	// handles. It must not be where kernels write: outside the workspace,
	// or in its .ipybox. Empty means <Workspace>/.ipybox/sessions.
	StateDir string
	// SnapshotBytes bounds one session's snapshot: values that would take
	// it past are left out, named in the result that follows. Zero means
	// defaultSnapshotBytes; negative means no limit.
	SnapshotBytes int64
	// SnapshotWorkspaceBytes bounds the snapshots of all the sessions of
	// the workspace together: a save gets what the others leave. Zero
	// means defaultSnapshotWorkspaceBytes; negative means no limit.
	SnapshotWorkspaceBytes int64
}

// ApprovalOptions say who approves the tool calls and shell commands of
// cells, and how. The zero value approves every call (ApprovalAuto),
// without rules or an audit log.
type ApprovalOptions struct {
	// Mode is ApprovalAuto or ApprovalElicit. Empty means ApprovalAuto.
	Mode ApprovalMode
	// AllowTools are "server.tool" patterns (path.Match globs on each part)
	// whose tool calls are approved without asking, in ApprovalElicit mode
	// (unless an ask rule of Policy asks). Nil means none.
	AllowTools []string
	// Policy decides the tool calls and shell commands of every
	// session's cells by its rules before anyone is asked, and logs each
	// decision (see ipybox.ApprovalPolicy): deny and ask rules apply in
	// ApprovalAuto mode too; an ask rule then elicits, or rejects the call
	// when the client cannot be asked. The elicitation offers to remember
	// an answer for the session or always. The caller closes it after the
	// Server. Nil means no rules and no audit log.
	Policy *ipybox.ApprovalPolicy
	// AuditLog is the file of Policy's audit log, whose rows the web page
	// (HTTP.UI) shows each principal (its own). Empty means the page shows
	// none.
	AuditLog string
	// Timeout bounds the wait for one approval (an elicitation),
	// in cells without a timeout of their own; a cell's remaining time
	// bounds it otherwise. Zero means defaultApprovalTimeout.
	Timeout time.Duration
}

// defaultPoolMax is Options.Sessions.PoolMax's default.
const defaultPoolMax = 4

// Server is ipybox's MCP server: it gives each MCP session its own stateful
// kernel in a shared workspace. Create it with New, serve it with Serve
// (stdio, one session) or Handler (streamable HTTP, many sessions), and
// Close it to stop every kernel.
//
// The parts of a Server each own their state and their lock:
// sessionTable (sessiontable.go: the sessions, connections and their
// counts), runTable (runs.go: the cells in flight), durability
// (durability.go: the state folder, the reaper's clock and the snapshot
// budget of budget.go), tenant (tenant.go: a principal's folder, registry,
// virtualenv and fork server) and the kernel factory (factory.go: the
// warm pool and how an executor starts).
//
// Locks, outer first; a goroutine that holds one may take only those
// after it on its line:
//
//	s.closeMu → s.sessions.mu
//	x.closeMu → x.startMu → lockName(name) → s.sessions.mu → x.mu, store.mu
//	x.closeMu → x.startMu → lockName(name) → t.mu
//	s.runs.mu → c.mu, x.mu
//	c.outMu → c.mu → c.progMu
//	t.venvMu, t.zygMu, t.readyMu (each alone)
//	s.sessions.mu, store.mu → s.tenantMu (a leaf: nothing is taken under it)
//	s.durability.budget.mu (alone)
//	c.mu → h.mu of a session's history → s.ui.mu (a leaf; see ui.go)
//
// (x is a session, c a cell run, store the handle table, t a tenant.)
// s.sessions.mu, x.mu, store.mu, s.runs.mu and a cell's locks guard
// memory only, but for the record a durable session's store.add writes
// under s.sessions.mu. Three are held across I/O, each bounded and each
// waited for only by what must wait: x.startMu across its session's
// kernel start (StartTimeout), lockName(name) across a registration of
// that name (its context and the connect timeout: registrations of other
// names, and cells, go on), and t.venvMu across the virtualenv's
// creation.
type Server struct {
	opts      Options
	workspace string
	allowed   []string // real paths of the allowed directories
	allow     []allowPattern
	log       *slog.Logger
	mcp       *mcp.Server
	tel       *telemetry.Tracer // nil: not tracing
	// unreport ends the report of the open sessions to the metrics.
	unreport func()

	ctx    context.Context // ends at Close; bounds background kernel starts
	cancel context.CancelFunc
	wg     waitgroup.Group // the goroutines of sessions

	// factory makes the sessions' kernels (factory.go); its sandbox is
	// the policy of kernels and pip too.
	factory *kernelFactory

	// The tenants (tenant.go): with one principal or none, only is the
	// one, in the workspace itself; with several (multi), tenants holds
	// each principal's once used, guarded by tenantMu (a leaf lock).
	multi    bool
	only     *tenant
	tenantMu sync.Mutex
	tenants  map[string]*tenant

	// sessions is the table of sessions, connections and their counts
	// (sessiontable.go).
	sessions *sessionTable
	// durability is the state folder, the snapshot budget and the
	// reaper's clock (durability.go).
	durability *durability
	// tokens are the accepted bearer tokens' digests, with their
	// principals.
	tokens []principalToken

	// runs is the table of cells in flight (runs.go).
	runs *runTable
	// tasks are the tasks of the Tasks extension (tasks.go).
	tasks *taskTable
	// ui is the cells' history (uihistory.go), for export_notebook and
	// the web page of Options.HTTP.UI (ui.go).
	ui *uiState

	closeMu   sync.Mutex // makes Close wait for a concurrent Close
	closeDone bool
	closeErr  error
}

// registration is one MCP server registered through the server (at start
// or by register_mcp_server).
type registration struct {
	cfg ipybox.ServerConfig
	gen int
	// persisted is true once some executor saved it in servers.json, so
	// that executors started afterwards load it themselves.
	persisted bool
}

// New checks opts and returns a Server. It starts nothing: kernels start
// when sessions begin.
func New(opts *Options) (*Server, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	allow, err := o.check()
	if err != nil {
		return nil, err
	}
	ws, err := workspaceDir(o.Workspace)
	if err != nil {
		return nil, err
	}
	allowed, err := allowedDirs(o.AllowedDirs, ws)
	if err != nil {
		return nil, err
	}
	tel := telemetry.New(o.TracerProvider, o.TraceCode)
	if tel != nil {
		log = telemetry.Logger(log)
		o.Logger = log
	}
	s := &Server{
		tel:       tel,
		opts:      o,
		workspace: ws,
		allowed:   allowed,
		allow:     allow,
		log:       log,
		runs:      newRunTable(),
		tasks:     newTaskTable(),
		tenants:   map[string]*tenant{},
	}
	if o.HTTP.UI && o.HTTP.NoAuth {
		return nil, errors.New("Options.HTTP.UI needs a bearer token to sign in with; it cannot be served with Options.HTTP.NoAuth")
	}
	s.ui = newUIState(s, o.Approvals.AuditLog)
	s.factory = newKernelFactory(&s.opts, log)
	if s.tokens, err = principalTokens(o.HTTP.AuthToken, o.HTTP.Principals); err != nil {
		return nil, fmt.Errorf("principals: %w", err)
	}
	if err := checkTenantNames(s.tokens); err != nil {
		return nil, err
	}
	s.multi = multiTenant(s.tokens)
	s.sessions = newSessionTable(o.Sessions.MaxSessions, o.Sessions.MaxSessionsPerPrincipal, s.multi, log)
	if !s.multi {
		s.only = newTenant(s, soleTenantName(s.tokens), ws, false)
		// Several principals get the links in their folders (tenant.go).
		if err := s.makeBinds(ws); err != nil {
			return nil, err
		}
	}
	state, err := openStateDir(ws, o.Durability.StateDir)
	if err != nil {
		return nil, err
	}
	s.durability = &durability{state: state, frontend: newFolderName(), hibernateAfter: o.Durability.HibernateAfter, expiry: o.Durability.SessionExpiry,
		budget: &snapshotBudget{per: o.Durability.SnapshotBytes, total: o.Durability.SnapshotWorkspaceBytes, dirs: s.tenantDirs}}
	if s.multi && o.Durability.SnapshotWorkspaceBytes > 0 {
		// One principal holds at most its part of the workspace's budget,
		// divided among the principals (half with two).
		s.durability.budget.share = o.Durability.SnapshotWorkspaceBytes / int64(principalCount(s.tokens))
	}
	s.sessions.store = &durableStore{mem: newMemStore(), state: state, s: s}
	s.sessions.onAdd = s.startReaper
	s.sessions.countStored(state.list())
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.factory.startPool(s.only, o.Sessions.Pool, o.Sessions.PoolMax)
	s.mcp = s.newMCPServer()
	s.addTools()
	s.unreport = s.reportSessions()
	return s, nil
}

// allowedDirs returns the real paths of the allowed directories dirs (nil:
// the workspace ws and the system temporary directory).
func allowedDirs(dirs []string, ws string) ([]string, error) {
	if dirs == nil {
		dirs = []string{ws, os.TempDir()}
	}
	var allowed []string
	for _, d := range dirs {
		real, err := realDir(d)
		if err != nil {
			return nil, fmt.Errorf("allowed directory: %w", err)
		}
		allowed = append(allowed, real)
	}
	return allowed, nil
}

// newMCPServer returns the go-sdk server of s, with its middleware; New
// adds the tools.
func (s *Server) newMCPServer() *mcp.Server {
	m := mcp.NewServer(&mcp.Implementation{Name: "ipybox", Title: "ipybox", Version: s.opts.Version}, &mcp.ServerOptions{
		Instructions:       instructions,
		Logger:             s.log,
		InitializedHandler: s.initialized,
		// The go-sdk answers prompts/list, resources/list and
		// resources/templates/list (with empty lists) whatever is
		// declared: declare them, so that initialize's and
		// server/discover's capabilities say what is answered.
		//lint:ignore SA1019 the cells' output streams as MCP log messages, which SEP-2577 keeps working through its deprecation window (see streamOutput)
		Capabilities: &mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{},
			Prompts: &mcp.PromptCapabilities{}, Resources: &mcp.ResourceCapabilities{},
			// The Tasks extension (tasks.go) for execute_ipython_cell.
			Extensions: map[string]any{tasksExtension: map[string]any{}}},
	})
	addTaskMethods(m)
	// Outermost first: the validation messages, then the rounds of
	// approvals for clients before 2026-07-28 (around the go-sdk's own
	// bridge, which makes one), then the tasks (a task's call answers at
	// once, with no round).
	m.AddReceivingMiddleware(plainValidationMiddleware, s.trackInitialize, s.legacyRounds, s.tasksMiddleware)
	if s.tel != nil {
		// A traceparent in a request's _meta is the parent of its cell.
		m.AddReceivingMiddleware(telemetry.ExtractMeta)
	}
	return m
}

// check applies the defaults to o and checks what needs no file system:
// the bounds, the approval mode, the allowed tools (returned parsed), the
// backends that exclude each other, and the binds.
func (o *Options) check() ([]allowPattern, error) {
	if err := defaults.Apply("mcpserver",
		defaults.Duration{Name: "Options.HTTP.SessionIdleTimeout", V: &o.HTTP.SessionIdleTimeout, Def: defaultSessionIdleTimeout},
		defaults.Duration{Name: "Options.Sessions.StartTimeout", V: &o.Sessions.StartTimeout, Def: defaultStartTimeout},
		defaults.Duration{Name: "Options.Approvals.Timeout", V: &o.Approvals.Timeout, Def: defaultApprovalTimeout},
		defaults.Duration{Name: "Options.Durability.HibernateAfter", V: &o.Durability.HibernateAfter, Def: defaultHibernateAfter},
		defaults.Duration{Name: "Options.Durability.SessionExpiry", V: &o.Durability.SessionExpiry, Def: defaultSessionExpiry},
	); err != nil {
		return nil, err
	}
	switch o.Durability.Checkpoint {
	case "":
		o.Durability.Checkpoint = CheckpointNone
	case CheckpointNone, CheckpointCell:
	default:
		return nil, fmt.Errorf("checkpoint mode %q: want %q or %q", o.Durability.Checkpoint, CheckpointNone, CheckpointCell)
	}
	if o.Durability.SnapshotBytes == 0 {
		o.Durability.SnapshotBytes = defaultSnapshotBytes
	}
	if o.Durability.SnapshotWorkspaceBytes == 0 {
		o.Durability.SnapshotWorkspaceBytes = defaultSnapshotWorkspaceBytes
	}
	switch o.Approvals.Mode {
	case "":
		o.Approvals.Mode = ApprovalAuto
	case ApprovalAuto, ApprovalElicit:
	default:
		return nil, fmt.Errorf("approval mode %q: want %q or %q", o.Approvals.Mode, ApprovalAuto, ApprovalElicit)
	}
	allow, err := parseAllowPatterns(o.Approvals.AllowTools)
	if err != nil {
		return nil, err
	}
	if o.SpillCellBytes == 0 {
		o.SpillCellBytes = defaultSpillCellBytes
	}
	if o.SpillWorkspaceBytes == 0 {
		o.SpillWorkspaceBytes = defaultSpillWorkspaceBytes
	}
	if o.Container != nil && o.Sandbox != nil {
		return nil, errors.New("Options.Container and Options.Sandbox exclude each other")
	}
	if o.Gateway != nil && (o.Sandbox != nil || o.Container != nil) {
		return nil, errors.New("Options.Gateway runs kernels on the gateway, and Sandbox and Container confine local ones; leave them nil with a gateway")
	}
	for _, b := range o.Binds {
		if err := checkBind(b); err != nil {
			return nil, err
		}
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	return allow, nil
}

// workspaceDir returns the workspace (dir, "" for the current directory)
// as an absolute, real path, checked the way every kernel start would
// check it: once, here, instead of by the pool in the background.
func workspaceDir(dir string) (string, error) {
	ws, err := filepath.Abs(cmp.Or(dir, "."))
	if err != nil {
		return "", fmt.Errorf("workspace: %w", err)
	}
	if st, err := os.Stat(ws); err != nil || !st.IsDir() {
		return "", fmt.Errorf("workspace %q is not a directory; create it or choose another", ws)
	}
	if real, err := filepath.EvalSymlinks(ws); err == nil {
		ws = real
	}
	if err := ipybox.CheckWorkspace(ws); err != nil {
		return "", err
	}
	return ws, nil
}

// Workspace returns the workspace's absolute, real path.
func (s *Server) Workspace() string { return s.workspace }

// Serve runs one MCP session over t (for example &mcp.StdioTransport{})
// until the client disconnects or ctx ends, then stops the session's
// kernel. In stdio mode the transport carries only JSON-RPC: logs go to
// Options.Logger.
func (s *Server) Serve(ctx context.Context, t mcp.Transport) error {
	ss, err := s.mcp.Connect(ctx, t, nil)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- ss.Wait() }() // lifetime: the MCP session; done is buffered
	select {
	case err = <-done:
		s.endConn(ss)
	case <-ctx.Done():
		err = s.stopConn(ss, done)
	case <-s.ctx.Done():
		err = s.stopConn(ss, done)
	}
	if err != nil && !errors.Is(err, context.Canceled) && !isClosedErr(err) && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// stopConn ends a connection from our side: its implicit session's kernel
// first (so that its running calls return), then the connection. The wait
// is bounded: a transport blocked in a read it cannot interrupt (a
// terminal's stdin) is abandoned.
func (s *Server) stopConn(ss *mcp.ServerSession, done <-chan error) error {
	s.endConn(ss)
	go ss.Close()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		s.log.Warn("the MCP connection did not close within 5s; leaving it")
		return nil
	}
}

func isClosedErr(err error) bool {
	return errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, os.ErrClosed)
}

// Close ends every session in this process and stops every kernel and
// the MCP servers they started, without saving them: a session of
// create_session stays in the state folder, and a server started on it
// later brings it back from its last snapshot (Shutdown saves them all
// first). A gateway kernel of a session of create_session is left running
// on the gateway (detached), for the next front end. It is idempotent, safe to call concurrently, and bounded in
// time.
func (s *Server) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closeDone {
		return s.closeErr
	}
	s.closeDone = true
	s.unreport()
	s.cancel()
	s.factory.warm.Close()
	all := s.sessions.close()
	sess := s.sessions.store.all()
	// Stop the kernels first: that ends the cells tool calls wait for, so
	// that closing the MCP sessions (which waits for their calls) is quick.
	var errs []error
	var ewg sync.WaitGroup
	var emu sync.Mutex
	for _, x := range sess {
		ewg.Add(1)
		go func() {
			defer ewg.Done()
			if err := x.stop(); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
			}
		}()
	}
	ewg.Wait() // bound: each session's close is bounded
	for _, ss := range all {
		ss.Close()
	}
	if !s.wg.Wait(30 * time.Second) {
		errs = append(errs, errors.New("sessions did not end within 30s"))
	}
	// Last: the kernels they forked are closed.
	for _, t := range s.allTenants() {
		t.close()
	}
	if err := errors.Join(errs...); err != nil {
		s.closeErr = fmt.Errorf("close: %w", err)
	}
	return s.closeErr
}
