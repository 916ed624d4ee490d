package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/container"
	"github.com/ipybox/ipybox/internal/defaults"
	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/mcpconn"
	"github.com/ipybox/ipybox/mcpserver"
)

const mcpUsage = `
Usage: ipybox mcp [flags]

Serves MCP for agents such as Claude Code: a stateful IPython kernel with
programmatic MCP tool calling, as the tools execute_ipython_cell,
register_mcp_server, install_package, reset, upload_file and download_file,
and sessions: create_session returns a handle to a kernel of its own, which
those tools take (close_session, list_sessions).

By default it speaks stdio (standard output carries only JSON-RPC; logs go to
standard error or --log-file). With --http HOST:PORT it serves streamable
HTTP at /mcp instead, for MCP 2026-07-28 (every call names its session's
handle) and 2025-11-25 and older (each connection has a kernel of its own
too); the workspace and the registered MCP servers are shared. A session's
kernel starts at its first cell.

The workspace's .env file is read: variables named KERNEL_ENV_<NAME> reach the
kernel as <NAME>; all of them fill ${VAR} placeholders in MCP server configs.
Nothing else from the environment reaches the kernel.
`

type mcpFlags struct {
	workspace, python          string
	imagesDir                  string
	requireShellEscape         bool
	logLevel, logFile          string
	allowedDirs                stringList
	kernelEnv, binds           stringList
	kernelEnvFile              string
	mcpConfig                  string
	allowHostServers           bool
	allowPrivateURLs           bool
	approval                   string
	allowTools                 stringList
	policy                     policyFlags
	telemetry                  telemetryFlags
	httpAddr, authToken        string
	ui                         bool
	authTokenFile              string
	principals                 map[string]string // from --auth-token-file
	noAuth                     bool
	generatedToken             bool // authToken was generated: write it to a file
	idle, startTimeout         time.Duration
	approvalTimeout            time.Duration
	pool, poolMax, maxSessions int
	maxPerPrincipal            int
	maxServers                 int
	noZygote                   bool
	sandboxZygote              explicitBool
	shutdownGrace              time.Duration
	sandbox                    sandboxFlags
	container                  containerFlags
	sandboxExplicit            bool // set by mcpOptions
	gateway                    gatewayFlags
	durable                    durableFlags
}

func mcpCommand() *command {
	return &command{name: "mcp", summary: "serve a stateful Python kernel to agents over MCP (stdio or HTTP)", run: runMCP}
}

func runMCP(ctx context.Context, env *cliEnv, args []string) int {
	var f mcpFlags
	fs := f.flagSet(env)
	if done, code := parseFlags(fs, env, args); done {
		return code
	}
	fail := func(code int, err error) int {
		fmt.Fprintf(env.stderr, "ipybox mcp: %v\n", err)
		return code
	}
	if fs.NArg() > 0 {
		return fail(exitUsage, fmt.Errorf("unexpected argument %q; all settings are flags", fs.Arg(0)))
	}
	if err := f.auth(env); err != nil {
		return fail(exitUsage, err)
	}
	// Flag values are checked before the host is touched (checkHost
	// creates the workspace).
	if err := errors.Join(checkMCPApproval(f.approval), checkLogLevel(f.logLevel)); err != nil {
		return fail(exitUsage, err)
	}
	if code, err := f.checkHost(ctx, env); err != nil {
		return fail(code, err)
	}
	opts, err := mcpOptions(env, &f)
	if err != nil {
		return fail(exitUsage, err)
	}
	if code, err := f.probeBackend(ctx, env, opts); err != nil {
		return fail(code, err)
	}
	if opts.Approvals.Mode == mcpserver.ApprovalAuto {
		fmt.Fprintln(env.stderr, "ipybox mcp: --approval auto: tool calls and shell commands of cells run without approval (--approval elicit asks the client)")
	}
	log, closeLog, err := newLogger(env, f.logLevel, f.logFile)
	if err != nil {
		return fail(exitUsage, err)
	}
	defer closeLog()
	opts.Logger = log
	if err := harden(); err != nil {
		log.Warn("could not make the server non-dumpable; kernel code of this user could read its environment", "err", err)
	}
	if opts.Approvals.Policy, err = f.policy.load(log); err != nil {
		return fail(exitUsage, err)
	}
	if opts.Approvals.Policy != nil {
		defer opts.Approvals.Policy.Close() // after the server's Close, deferred below
		// The web page shows its rows.
		_, opts.Approvals.AuditLog, _ = f.policy.paths()
	}
	tp, flush, err := f.telemetry.tracing(ctx, env, log)
	if err != nil {
		return fail(exitUsage, err)
	}
	defer flush() // after the server's Close: its last spans go out
	opts.TracerProvider, opts.TraceCode = tp, f.telemetry.includeCode
	srv, err := mcpserver.New(opts)
	if err != nil {
		return fail(exitUsage, err)
	}
	defer func() {
		if err := srv.Close(); err != nil {
			log.Error("shutdown", "err", err)
		}
	}()
	stopMetrics, err := f.telemetry.serveMetrics(env, srv, &f)
	if err != nil {
		return fail(exitFail, err)
	}
	defer stopMetrics()
	if f.httpAddr == "" {
		// The stop budget starts once the sessions of create_session are
		// saved: none over stdio, usually, so at once.
		saved := make(chan struct{})
		if tp == nil {
			defer armStop(ctx, env, log, saved, f.shutdownGrace)()
		}
		err := srv.Serve(ctx, mcpserver.StdioTransport())
		if ctx.Err() != nil {
			hctx, cancel := context.WithTimeout(context.Background(), f.shutdownGrace)
			srv.Hibernate(hctx)
			cancel()
		}
		close(saved)
		if err != nil && ctx.Err() == nil {
			return fail(exitFail, err)
		}
		return exitOK
	}
	return serveHTTP(ctx, env, srv, &f)
}

// stopBudget bounds how long ipybox mcp over stdio takes to exit after a
// SIGINT or SIGTERM: Claude Code, for one, kills a server 0.5 s after its
// SIGINT. What the kernels' teardown still waits for by then (a sandbox's
// exit, on a loaded machine) is not needed: every process ipybox started
// ends with it (a sandbox's init when its control socket closes, other
// kernels with their lifeline), nothing of ipybox's is left in the
// workspace, and the run directories left in /tmp are reaped by the next
// start. With tracing on, the exit waits for the spans' flush instead.
const stopBudget = 100 * time.Millisecond

// armStop makes a stop by signal (ctx done) end the process within
// stopBudget of the sessions' saves (saved closed, at most grace). It
// returns the disarm for a return before the signal.
func armStop(ctx context.Context, env *cliEnv, log *slog.Logger, saved <-chan struct{}, grace time.Duration) (disarm func() bool) {
	if env.exit == nil {
		return func() bool { return true }
	}
	return context.AfterFunc(ctx, func() {
		// The sessions of create_session are saved first (Hibernate),
		// within grace.
		select {
		case <-saved:
		case <-time.After(grace):
		}
		time.AfterFunc(stopBudget, func() {
			log.Warn("stopping: the kernels' teardown outlasted " + stopBudget.String() + "; exiting, and they end with this process")
			env.exit(exitOK)
		})
	})
}

// flagSet is mcp's flag set, bound to f.
func (f *mcpFlags) flagSet(env *cliEnv) *flag.FlagSet {
	fs := newFlagSet(env, "mcp", mcpUsage)
	fs.StringVar(&f.workspace, "workspace", ".", "kernel working `DIR`, shared by all sessions (holds mcptools/, images/, .ipybox/); created if missing")
	fs.StringVar(&f.imagesDir, "images-dir", "", "`DIR` for the images cells produce (default: <workspace>/images)")
	fs.BoolVar(&f.requireShellEscape, "require-shell-escape", false, "guard subprocess, os.system and the like in the kernel, so that code starts processes through ! (and so through shell approval); a guard for well-behaved code, not a boundary")
	fs.StringVar(&f.python, "python", "", "Python `interpreter` with ipykernel to create the workspace's virtualenv from (default: discovered)")
	fs.StringVar(&f.logLevel, "log-level", "warn", "log `level`: debug, info, warn or error")
	fs.StringVar(&f.logFile, "log-file", "", "write logs to `FILE` instead of standard error")
	fs.Var(&f.allowedDirs, "allowed-dir", "host `DIR` that upload_file and download_file may use (repeatable; when given, it replaces the default: the workspace and the system temp dir)")
	fs.Var(&f.kernelEnv, "kernel-env", "`KEY=VALUE` for the kernel's environment (repeatable)")
	fs.StringVar(&f.kernelEnvFile, "kernel-env-file", "", "`FILE` of KEY=VALUE lines (.env format) for the kernel's environment")
	fs.Var(&f.binds, "bind", "`HOST_PATH:RELPATH` makes a host directory visible at RELPATH in the workspace (repeatable)")
	fs.StringVar(&f.mcpConfig, "mcp-config", "", "register the MCP servers of this `FILE` ({\"mcpServers\": {...}}) at start")
	fs.BoolVar(&f.allowPrivateURLs, "allow-private-urls", false, "let URL servers registered through register_mcp_server reach loopback, private and link-local addresses (default: refused, so that a client cannot make this host send requests to its own services; --allow-host-servers implies it; servers of --mcp-config are not limited)")
	fs.BoolVar(&f.allowHostServers, "allow-host-servers", false, "let register_mcp_server start stdio servers on this host, unsandboxed: every client that can call tools can then run commands here (default: they run in the sandbox, and are refused without one; servers of --mcp-config run as configured)")
	fs.StringVar(&f.approval, "approval", string(mcpserver.ApprovalAuto), "how tool calls and IPython shell commands (!cmd, %%bash…; not subprocess) of cells are approved: auto (all run) or elicit (ask the MCP client each time)")
	fs.Var(&f.allowTools, "allow-tool", "`SERVER.TOOL` glob, matched against the server name and the MCP tool name (not the Python module name), whose calls run without asking under --approval elicit (repeatable), e.g. fs.read_*")
	f.policy.register(fs)
	f.telemetry.register(fs, true)
	fs.StringVar(&f.httpAddr, "http", "", "serve streamable HTTP on `HOST:PORT` (e.g. 127.0.0.1:8080) instead of stdio")
	fs.BoolVar(&f.ui, "ui", false, "with --http, also serve a web page at /ui/ where each principal, signed in with its token, watches its sessions' cells, answers their approvals, reads its audit rows and downloads notebooks")
	fs.StringVar(&f.authTokenFile, "auth-token-file", "", "read the bearer token HTTP clients must send from `FILE`, or NAME:TOKEN lines, one principal each, whose sessions the others cannot see (default $IPYBOX_MCP_AUTH_TOKEN, else a generated one written to a private file whose path is printed)")
	fs.BoolVar(&f.noAuth, "no-auth", false, "serve HTTP without a bearer token (loopback addresses only): any local user or unsandboxed kernel code could then open a session and approve its own calls")
	fs.StringVar(&f.authToken, "auth-token", "", "refused: a `TOKEN` on the command line is visible to every local user; use --auth-token-file")
	fs.DurationVar(&f.idle, "session-idle-timeout", defaults.SessionIdle, "end an HTTP connection's implicit session (a 2025-11-25 client's), and stop its kernel, after this long without a call; sessions of create_session hibernate instead (--hibernate-after)")
	f.durable.register(fs)
	fs.DurationVar(&f.startTimeout, "start-timeout", defaults.SessionStart, "how long a tool call waits for its kernel to start")
	fs.DurationVar(&f.approvalTimeout, "approval-timeout", defaults.Approval, "how long an approval question waits for the client, in cells without a timeout (a cell's remaining time bounds it otherwise)")
	fs.IntVar(&f.pool, "pool", 1, "kernels kept started in advance for new sessions and resets (`N`; 0: none)")
	fs.IntVar(&f.poolMax, "pool-max", 0, "how far the pool grows when sessions find it empty (`N`; 0: 4 or --pool; about 20 MB per sandboxed kernel)")
	fs.IntVar(&f.maxSessions, "max-sessions", defaults.MaxSessions, "most sessions with a kernel at once, over all principals (`N`; -1: no limit); a session takes its kernel at its first cell, and one more gets an error that says so")
	fs.IntVar(&f.maxPerPrincipal, "max-sessions-per-principal", 0, "most sessions with a kernel at once for each principal of --auth-token-file (`N`; 0: half of --max-sessions, at least 1, with several principals, as --max-sessions with one; -1: no limit of its own)")
	fs.IntVar(&f.maxServers, "max-registered-servers", 0, "most stdio MCP servers the clients of one principal may register (`N`; 0: 16; -1: no limit); each runs a process of its own in each session that uses it")
	fs.BoolVar(&f.noZygote, "no-fork-server", false, "start every kernel cold instead of forking it from a pre-imported Python (both fork servers off)")
	f.sandboxZygote.v = true
	fs.Var(&f.sandboxZygote, "sandbox-fork-server", "fork each sandboxed kernel into a sandbox of its own from a pre-imported Python instead of starting it cold (=false starts each cold; docs/sandbox.md, \"Forked kernels\")")
	f.gateway.register(fs)
	fs.DurationVar(&f.shutdownGrace, "shutdown-grace", 10*time.Second, "at SIGTERM or SIGINT, how long sessions may take to hibernate (a session not saved by then comes back from its last checkpoint), and then HTTP requests to finish")
	f.sandbox.register(fs, true)
	f.container.register(fs)
	return fs
}

// auth checks the token flags and reads the token: from --auth-token-file,
// or (over HTTP or --metrics-addr, without --no-auth) from
// $IPYBOX_MCP_AUTH_TOKEN, else a new one.
func (f *mcpFlags) auth(env *cliEnv) error {
	if f.authToken != "" {
		return errTokenOnCommandLine
	}
	// --metrics-addr takes the token rules of --http.
	served := f.httpAddr != "" || f.telemetry.metricsAddr != ""
	switch {
	case !served && (f.authTokenFile != "" || f.noAuth):
		return errors.New("--auth-token-file and --no-auth apply to --http (and --metrics-addr); stdio needs no token")
	case f.noAuth && f.authTokenFile != "":
		return errors.New("--no-auth contradicts --auth-token-file; choose one")
	case f.authTokenFile != "":
		principals, err := readTokenFile(env, f.authTokenFile)
		if err != nil {
			return err
		}
		f.principals = principals
	case served && !f.noAuth:
		// Read once, then gone from the environment: a server config that
		// the agent registers must not expand ${IPYBOX_MCP_AUTH_TOKEN}, and
		// no child inherits it.
		f.authToken = takeEnv(env, "IPYBOX_MCP_AUTH_TOKEN")
		if f.authToken == "" {
			f.authToken, f.generatedToken = newToken(), true
		}
	}
	switch {
	case f.ui && f.httpAddr == "":
		return errors.New("--ui needs --http: the page is served beside /mcp")
	case f.ui && f.noAuth:
		return errors.New("--ui needs a token to sign in with; drop --no-auth")
	}
	if f.httpAddr != "" {
		if err := mcpserver.CheckHTTPAddr(f.httpAddr, f.noAuth); err != nil {
			return fmt.Errorf("--http: %w", err)
		}
	}
	if a := f.telemetry.metricsAddr; a != "" {
		if err := mcpserver.CheckHTTPAddr(a, f.noAuth); err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
	}
	return nil
}

// checkHost checks, at start, what every kernel start would otherwise
// find only as retries in the log (kernels start with the sessions, in
// the background): the workspace, and --python. It returns the exit
// status for its error.
func (f *mcpFlags) checkHost(ctx context.Context, env *cliEnv) (int, error) {
	if err := ensureWorkspace(env, "ipybox mcp", f.workspace); err != nil {
		return exitUsage, err
	}
	if err := ipybox.CheckWorkspace(f.workspace); err != nil {
		return exitFail, workspaceError(env, f.workspace, f.httpAddr != "", err)
	}
	if f.python != "" {
		if _, err := kernel.CheckPython(ctx, f.python, "--python", f.workspace); err != nil {
			return exitUsage, err
		}
	}
	return exitOK, nil
}

// probeBackend finds out now, not at the first cell, that the container
// or the sandbox cannot run here. An explicit --sandbox fails closed; the
// default sandbox falls back to none, and says so.
func (f *mcpFlags) probeBackend(ctx context.Context, env *cliEnv, opts *mcpserver.Options) (int, error) {
	if opts.Container != nil {
		if err := containerProbe(ctx, opts.Container, env.stderr); err != nil {
			return exitFail, fmt.Errorf("--container-tag: %w", err)
		}
		// Whether the kernels' user can write the workspace, now, not as
		// retries of every session.
		if err := container.CheckUser(f.workspace); err != nil {
			return exitFail, err
		}
	}
	if opts.Sandbox != nil {
		if err := sandboxProbe(ctx); err != nil {
			if f.sandboxExplicit {
				return exitFail, fmt.Errorf("%s: %w", f.sandbox.explicitFlag(), err)
			}
			fmt.Fprintf(env.stderr, "ipybox mcp: warning: kernels run UNSANDBOXED, with your rights (approvals are advice, not a boundary): %v; "+
				"fix that, or pass --no-sandbox to run unsandboxed on purpose\n", err)
			opts.Sandbox = nil
		}
	}
	return exitOK, nil
}

// serveHTTP serves srv on f.httpAddr until ctx ends (SIGINT, SIGTERM).
func serveHTTP(ctx context.Context, env *cliEnv, srv *mcpserver.Server, f *mcpFlags) int {
	ln, err := net.Listen("tcp", f.httpAddr)
	if err != nil {
		fmt.Fprintf(env.stderr, "ipybox mcp: %v\n", listenError(f.httpAddr, err))
		return exitFail
	}
	if f.generatedToken {
		// No token was given: tell where the generated one is (not what
		// it is).
		path, err := writeTokenFile(env.getenv, ln.Addr(), f.authToken)
		if err != nil {
			ln.Close()
			fmt.Fprintf(env.stderr, "ipybox mcp: writing the generated token: %v\n", err)
			return exitFail
		}
		defer os.Remove(path)
		fmt.Fprintf(env.stderr, "ipybox mcp: generated a bearer token in %s; clients send \"Authorization: Bearer <its content>\"\n", path)
	}
	mux := http.NewServeMux()
	h := srv.Handler() // one handler: it holds the sessions
	mux.Handle("/mcp", h)
	mux.Handle("/mcp/", h)
	if f.ui {
		mux.Handle("/ui/", h)
	}
	// Everything else, the OAuth endpoints that clients probe after a
	// 401 among them, is not found, with the reason and the fix.
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, mcpserver.NoOAuth, http.StatusNotFound)
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second}
	fmt.Fprintf(env.stderr, "ipybox mcp: serving streamable HTTP at http://%s/mcp (workspace %s)\n", ln.Addr(), srv.Workspace())
	if f.ui {
		fmt.Fprintf(env.stderr, "ipybox mcp: serving the web page at http://%s/ui/ (sign in with the bearer token)\n", ln.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }() // bound: errc is buffered
	select {
	case err := <-errc:
		fmt.Fprintf(env.stderr, "ipybox mcp: %v\n", err)
		return exitFail
	case <-ctx.Done():
	}
	// Hibernate the sessions and stop the kernels first, so that running
	// cells end and their requests can finish; then stop the listener.
	hibernateAll(srv, f.shutdownGrace, nil)
	sctx, cancel := context.WithTimeout(context.Background(), f.shutdownGrace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		hs.Close()
	}
	<-errc // bound: Serve returns once Shutdown or Close closed the listener
	return exitOK
}

// hibernateAll saves every session of create_session and closes srv, at
// most grace for the saves (a session not saved by then comes back from
// its last checkpoint, or without its state).
func hibernateAll(srv *mcpserver.Server, grace time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil && log != nil {
		log.Error("shutdown", "err", err)
	}
}

// listenError says what to do when --http cannot listen on addr.
func listenError(addr string, err error) error {
	host, port, _ := net.SplitHostPort(addr)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		next := "8081"
		if n, perr := strconv.Atoi(port); perr == nil && n > 0 && n < 65535 {
			next = strconv.Itoa(n + 1)
		}
		return fmt.Errorf("--http %s: the address is in use, by another ipybox mcp or another server "+
			"(`ss -ltnp 'sport = :%s'` shows which); stop it, or choose another port, as in --http %s", addr, port, net.JoinHostPort(host, next))
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("--http %s: %v; ports below 1024 need privileges: choose one above, as in --http %s", addr, err, net.JoinHostPort(host, "8080"))
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Errorf("--http %s: no interface of this machine has the address %s; use 127.0.0.1, or one that `ip addr` lists", addr, host)
	}
	return fmt.Errorf("--http %s: %w", addr, err)
}

// mcpOptions turns the flags into the server's options: the workspace's
// .env, the kernel's environment, binds and servers to register.
func mcpOptions(env *cliEnv, f *mcpFlags) (*mcpserver.Options, error) {
	o := &mcpserver.Options{
		Workspace:          f.workspace,
		Python:             f.python,
		ImagesDir:          f.imagesDir,
		RequireShellEscape: f.requireShellEscape,
		AllowHostServers:   f.allowHostServers,
		AllowPrivateURLs:   f.allowPrivateURLs,
		Version:            strings.Fields(versionString())[1],
		KernelEnv:          map[string]string{},
		Approvals: mcpserver.ApprovalOptions{
			Mode:       mcpserver.ApprovalMode(f.approval),
			AllowTools: f.allowTools,
			Timeout:    f.approvalTimeout,
		},
		HTTP: mcpserver.HTTPOptions{
			AuthToken:          f.authToken,
			Principals:         f.principals,
			NoAuth:             f.noAuth,
			UI:                 f.ui,
			SessionIdleTimeout: f.idle,
		},
		Sessions: mcpserver.SessionOptions{
			StartTimeout:            f.startTimeout,
			Pool:                    f.pool,
			PoolMax:                 f.poolMax,
			MaxSessions:             f.maxSessions,
			MaxSessionsPerPrincipal: f.maxPerPrincipal,
			MaxRegisteredServers:    f.maxServers,
			NoZygote:                f.noZygote,
			SandboxZygote:           f.sandboxZygote.v && !f.noZygote,
		},
	}
	if err := checkMCPApproval(f.approval); err != nil {
		return nil, err
	}
	if f.noZygote && f.sandboxZygote.set && f.sandboxZygote.v {
		return nil, errors.New("--no-fork-server starts every kernel cold, and --sandbox-fork-server forks sandboxed ones: drop one of them")
	}
	if len(f.allowTools) > 0 && mcpserver.ApprovalMode(f.approval) != mcpserver.ApprovalElicit {
		return nil, errors.New("--allow-tool only matters with --approval elicit (auto approves every call)")
	}
	if f.poolMax < 0 || f.poolMax > 64 {
		return nil, fmt.Errorf("--pool-max %d: want 0 to 64", f.poolMax)
	}
	if f.pool < 0 || f.pool > 64 {
		return nil, fmt.Errorf("--pool %d: want 0 to 64", f.pool)
	}
	if f.approvalTimeout <= 0 {
		return nil, fmt.Errorf("--approval-timeout %v: want a positive duration", f.approvalTimeout)
	}
	if f.idle <= 0 {
		return nil, fmt.Errorf("--session-idle-timeout %v: want a positive duration", f.idle)
	}
	if err := f.durable.apply(o); err != nil {
		return nil, err
	}
	var err error
	if o.DotEnv, err = f.environment(o.KernelEnv); err != nil {
		return nil, err
	}
	if o.ImagesDir != "" {
		abs, err := filepath.Abs(o.ImagesDir)
		if err != nil {
			return nil, fmt.Errorf("--images-dir: %w", err)
		}
		o.ImagesDir = abs
	}
	for _, d := range f.allowedDirs {
		o.AllowedDirs = append(o.AllowedDirs, d)
	}
	for _, b := range f.binds {
		host, rel, ok := strings.Cut(b, ":")
		if !ok || host == "" || rel == "" {
			return nil, fmt.Errorf("--bind %q: want HOST_PATH:RELPATH", b)
		}
		if abs, err := filepath.Abs(host); err == nil {
			host = abs
		}
		o.Binds = append(o.Binds, mcpserver.Bind{HostPath: host, RelPath: rel})
	}
	if f.mcpConfig != "" {
		servers, err := loadMCPConfig(f.mcpConfig)
		if err != nil {
			return nil, err
		}
		o.Servers = map[string]ipybox.ServerConfig{}
		for _, s := range servers {
			o.Servers[s.name] = s.cfg
		}
	}
	if err := f.backend(env, o); err != nil {
		return nil, err
	}
	return o, nil
}

// environment reads the workspace's .env (returned: every variable can
// fill ${VAR} in server configs, and KERNEL_ENV_<NAME> reaches the kernel
// as <NAME>), then --kernel-env-file and --kernel-env, into kernelEnv.
func (f *mcpFlags) environment(kernelEnv map[string]string) (map[string]string, error) {
	dot, err := mcpconn.LoadDotEnv(filepath.Join(f.workspace, ".env"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("workspace .env: %w", err)
	}
	for k, v := range dot {
		if name, ok := strings.CutPrefix(k, "KERNEL_ENV_"); ok && name != "" {
			kernelEnv[name] = v
		}
	}
	if f.kernelEnvFile != "" {
		m, err := mcpconn.LoadDotEnv(f.kernelEnvFile)
		if err != nil {
			return nil, fmt.Errorf("--kernel-env-file: %w", err)
		}
		maps.Copy(kernelEnv, m)
	}
	for _, kv := range f.kernelEnv {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--kernel-env %q: want KEY=VALUE", kv)
		}
		kernelEnv[k] = v
	}
	return dot, nil
}

// backend sets where kernels run: a container, a gateway, or here, with
// the sandbox the flags ask for (or the default one), and checks the
// flags that only one of them takes.
func (f *mcpFlags) backend(env *cliEnv, o *mcpserver.Options) error {
	var err error
	if o.Container, err = f.container.config(&f.sandbox); err != nil {
		return err
	}
	if o.Gateway, err = f.gateway.config(env); err != nil {
		return err
	}
	if o.Gateway != nil && o.Container != nil {
		return errors.New("--container runs kernels in a local container and --gateway-url on a gateway; drop one of them")
	}
	if o.Container != nil {
		if len(o.Binds) > 0 {
			return errors.New("--bind makes links to host paths, which a container cannot follow; use --container-bind HOST:REL (mounted at /app/REL)")
		}
		if f.python != "" {
			return errors.New("--python names a host interpreter; a container runs its image's python3")
		}
		return f.checkSandboxZygote("a container runs its image's python3, started by Docker (docs/container.md, \"Forked kernels\")")
	}
	policy, explicit, err := f.sandbox.policy()
	if err != nil {
		return err
	}
	o.Sandbox = policy
	f.sandboxExplicit = explicit
	if o.Gateway != nil {
		if explicit {
			return errors.New("--sandbox confines local kernels; gateway kernels are confined by their gateway: drop one of --sandbox and --gateway-url")
		}
		o.Sandbox = nil // the default sandbox is for local kernels
		o.ToolServerAddr = f.gateway.toolAddr
		return f.checkSandboxZygote("gateway kernels start on the gateway")
	}
	if o.Sandbox == nil {
		return f.checkSandboxZygote("--no-sandbox kernels come from the unsandboxed fork server already (--no-fork-server turns it off)")
	}
	return nil
}

// checkSandboxZygote refuses --sandbox-fork-server where kernels are not
// sandboxed here; why says where they come from instead.
func (f *mcpFlags) checkSandboxZygote(why string) error {
	if f.sandboxZygote.set && f.sandboxZygote.v {
		return fmt.Errorf("--sandbox-fork-server forks sandboxed kernels on this host, and %s: drop --sandbox-fork-server", why)
	}
	return nil
}

// explicitBool is a boolean flag that records whether the command line
// gave it: a default that is on is not refused where it cannot apply.
type explicitBool struct{ v, set bool }

func (b *explicitBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	b.v, b.set = v, true
	return nil
}

func (b *explicitBool) String() string   { return strconv.FormatBool(b != nil && b.v) }
func (b *explicitBool) IsBoolFlag() bool { return true }

// checkMCPApproval checks --approval's value.
func checkMCPApproval(v string) error {
	if a := mcpserver.ApprovalMode(v); a != mcpserver.ApprovalAuto && a != mcpserver.ApprovalElicit {
		return fmt.Errorf("--approval %q: want auto or elicit", v)
	}
	return nil
}
