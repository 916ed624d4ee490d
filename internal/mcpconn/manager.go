package mcpconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ipybox/ipybox/internal/defaults"
	"github.com/ipybox/ipybox/internal/telemetry"
	"github.com/ipybox/ipybox/internal/waitgroup"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ErrUnknownServer is wrapped by the error for a server name that is not in
// the registry.
var ErrUnknownServer = errors.New("unknown MCP server")

// ErrClosed is returned by a Manager's methods after Close.
var ErrClosed = errors.New("MCP server connections closed")

// Default values of Options.
const (
	DefaultConnectTimeout = defaults.MCPConnect
	DefaultCallTimeout    = defaults.ToolCall
	DefaultStopGrace      = defaults.MCPStopGrace
)

// Options configures a Manager. A nil *Options means all defaults. New
// copies the struct. For each duration, zero means the default the field
// names, and a negative value makes New fail.
type Options struct {
	// Logger receives connection events and the stderr lines of stdio
	// servers. Nil discards them.
	Logger *slog.Logger
	// ConnectTimeout bounds starting a server and its initialize handshake.
	// Zero means DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// CallTimeout bounds one tools/call, and one complete paginated
	// tools/list. Zero means DefaultCallTimeout.
	CallTimeout time.Duration
	// StopGrace is each step's wait when a stdio server is stopped: after
	// its stdin is closed, after SIGTERM, and after SIGKILL. Zero means
	// DefaultStopGrace.
	StopGrace time.Duration
	// LookupEnv looks up ${VAR} values and the host variables a stdio
	// server inherits (PATH, HOME, LANG, USER, SHELL and TERM; nothing else
	// of the host environment reaches a server). Nil means os.LookupEnv.
	LookupEnv func(name string) (string, bool)
	// DotEnv holds values from a .env file (see LoadDotEnv). A ${VAR} is
	// looked up in LookupEnv first and then here, so the environment wins,
	// as with python-dotenv. Nil means none. The map is copied.
	DotEnv map[string]string
	// StdioCommand, when set, may wrap or replace the command of a stdio
	// server before it starts, for example to run it in a sandbox. cfg has
	// its placeholders expanded. If the returned command has no
	// SysProcAttr, it is put in its own process group, which Stop ends as a
	// whole. Nil runs commands as they are.
	//
	// A command that runs on the host (StdioCommand returned the command
	// it was given, or there is no StdioCommand) starts in the private
	// folder of host processes when its config names no cwd, with the
	// search-path entries of its environment that are relative or in
	// Writable dropped; a cwd or a program in Writable is refused (see
	// internal/hostproc).
	StdioCommand func(ctx context.Context, server string, cfg Config, cmd *exec.Cmd) (*exec.Cmd, error)
	// Writable are the folders that kernel code can write (the
	// workspace): no stdio server starts on the host in one, or runs a
	// program from one. Nil means none beyond the rules above.
	Writable []string
	// ClientVars fills the ${VAR} placeholders of a client's config
	// (Config.Origin) too, as the operator's are: for a run that trusts
	// its clients as the operator (ipybox mcp --allow-host-servers, under
	// which a client runs commands on the host anyway). False means a
	// placeholder in a client's config is an error.
	ClientVars bool
	// ClientPrivateURLs lets the URL servers of a client's config
	// (Config.Origin) reach loopback, private, link-local and reserved
	// addresses, as the operator's do. False (the default) refuses every
	// connection of theirs (the MCP endpoint, its OAuth discovery and
	// token requests) to such an address, after names are resolved, with
	// internal/egress's guard: otherwise a client of ipybox mcp makes the
	// host send requests to its own loopback services and private network.
	ClientPrivateURLs bool

	// OAuthURL is called when a streamable HTTP server needs a user to sign
	// in (the OAuth authorization code grant): it should show or open url
	// in a browser and return at once. The browser is then redirected to a
	// listener on 127.0.0.1, for up to AuthorizeTimeout. An error aborts the
	// sign-in. Nil makes such a server fail with a *LoginRequiredError,
	// unless a stored token works.
	OAuthURL func(ctx context.Context, server, url string) error
	// AuthorizeTimeout bounds the wait for the browser's redirect after
	// OAuthURL. Zero means DefaultAuthorizeTimeout.
	AuthorizeTimeout time.Duration
	// TokenFile is where OAuth tokens are kept (mode 0600), keyed by
	// Workspace, server name and URL. Empty means DefaultTokenFile().
	TokenFile string
	// Workspace is the folder whose registrations this Manager serves
	// (the workspace, or a tenant's folder with several principals): the
	// sign-ins it stores are bound to it, and it uses only the sign-ins
	// stored for it (see SignInWorkspace). A registration of the same
	// name and URL in another workspace signs in anew. Empty binds them
	// to no workspace: they are shared only by the Managers without one.
	Workspace string
}

// A Manager keeps one session per registered server. Sessions are opened
// lazily on first use, reused, reopened when the server has died, and closed
// by Stop, StopAll and Close. A Manager is safe for concurrent use.
type Manager struct {
	reg    *Registry
	opts   Options
	log    *slog.Logger
	client *mcp.Client
	http   *http.Transport // shared by remote sessions; its idle connections are closed by Close
	// guarded is http for the URL servers of a client's config, which
	// reach only public addresses (see Options.ClientPrivateURLs).
	guarded *http.Transport
	// listen opens the sign-in's redirect listener: net.Listen, which
	// tests replace with an in-memory network's.
	listen func(network, address string) (net.Listener, error)

	ctx    context.Context // cancelled by Close, which aborts connects in progress
	cancel context.CancelFunc

	secrets secretSet // every ${VAR} value substituted so far, and every OAuth token
	store   tokenStore

	mu      sync.Mutex
	closed  bool
	entries map[string]*entry
	bg      waitgroup.Group // session closes running in the background

	closeOnce sync.Once
	closeErr  error
}

// entry is the state of one server name.
type entry struct {
	sem    chan struct{} // held while connecting, so concurrent callers share one connect
	mu     sync.Mutex
	sess   *session
	sseURL string // a URL that needed the SSE fallback; guarded by sem

	oauth    *oauthHandler // guarded by sem
	oauthGen uint64        // the registry generation oauth was made for
}

func (e *entry) current() *session {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sess
}

// swap replaces the session if it is old and returns whether it did.
func (e *entry) swap(old, new *session) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sess != old {
		return false
	}
	e.sess = new
	return true
}

// New returns a Manager for the servers in reg. reg is read on every call,
// so servers added to it later can be used, and a replaced config makes the
// next call reconnect.
func New(reg *Registry, opts *Options) (*Manager, error) {
	if reg == nil {
		return nil, errors.New("mcpconn.New needs a Registry (NewRegistry or LoadRegistry)")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if err := defaults.Apply("mcpconn",
		defaults.Duration{Name: "Options.ConnectTimeout", V: &o.ConnectTimeout, Def: DefaultConnectTimeout},
		defaults.Duration{Name: "Options.CallTimeout", V: &o.CallTimeout, Def: DefaultCallTimeout},
		defaults.Duration{Name: "Options.StopGrace", V: &o.StopGrace, Def: DefaultStopGrace},
		defaults.Duration{Name: "Options.AuthorizeTimeout", V: &o.AuthorizeTimeout, Def: DefaultAuthorizeTimeout},
	); err != nil {
		return nil, err
	}
	if o.LookupEnv == nil {
		o.LookupEnv = os.LookupEnv
	}
	o.DotEnv = maps.Clone(o.DotEnv)
	if o.TokenFile == "" {
		// Without a config folder, no token is found and a save fails
		// with the reason; the sign-in itself still works.
		o.TokenFile, _ = DefaultTokenFile()
	}
	ws, err := SignInWorkspace(o.Workspace)
	if err != nil {
		return nil, fmt.Errorf("the workspace that sign-ins belong to (Options.Workspace): %w", err)
	}
	o.Workspace = ws
	ctx, cancel := context.WithCancel(context.Background())
	client := mcp.NewClient(&mcp.Implementation{Name: "ipybox", Version: "v0"}, &mcp.ClientOptions{
		Logger: o.Logger,
		// No roots, sampling or elicitation: the host only lists and calls tools.
		Capabilities: &mcp.ClientCapabilities{},
	})
	// A request made under a span (a tool call from a traced cell)
	// carries its traceparent in _meta: a server that traces joins it.
	client.AddSendingMiddleware(telemetry.InjectMeta)
	return &Manager{
		reg:     reg,
		opts:    o,
		log:     o.Logger,
		client:  client,
		http:    http.DefaultTransport.(*http.Transport).Clone(),
		guarded: publicOnlyTransport(nil),
		listen:  net.Listen,
		store:   tokenStore{path: o.TokenFile, workspace: o.Workspace},
		ctx:     ctx,
		cancel:  cancel,
		entries: map[string]*entry{},
	}, nil
}

// expand is cfg.expand with the values of lookup, and for a client's
// config only when ClientVars allows it.
func (m *Manager) expand(cfg Config) (Config, []string, error) {
	if cfg.Origin != OriginClient || !m.opts.ClientVars {
		return cfg.expand(m.lookup)
	}
	c := cfg
	c.Origin = ""
	exp, values, err := c.expand(m.lookup)
	exp.Origin = cfg.Origin
	return exp, values, err
}

// lookup finds a ${VAR} value: the environment first, then .env.
func (m *Manager) lookup(name string) (string, bool) {
	if v, ok := m.opts.LookupEnv(name); ok {
		return v, true
	}
	v, ok := m.opts.DotEnv[name]
	return v, ok
}

// ListTools returns all tools of the named server, following pagination.
func (m *Manager) ListTools(ctx context.Context, server string) ([]*mcp.Tool, error) {
	var tools []*mcp.Tool
	err := m.do(ctx, server, "listing tools", true, func(ctx context.Context, s *session) error {
		tools = tools[:0]
		seen := map[string]bool{}
		params := &mcp.ListToolsParams{}
		for {
			res, err := s.cs.ListTools(ctx, params)
			if err != nil {
				return err
			}
			tools = append(tools, res.Tools...)
			if res.NextCursor == "" {
				return nil
			}
			if seen[res.NextCursor] {
				return fmt.Errorf("the server repeated the cursor %q (a pagination loop)", res.NextCursor)
			}
			seen[res.NextCursor] = true
			params = &mcp.ListToolsParams{Cursor: res.NextCursor}
		}
	})
	if err != nil {
		return nil, m.secrets.scrubErr(err)
	}
	return tools, nil
}

// CallTool calls a tool of the named server. A tool that fails reports it in
// the result (IsError set): that is not a Go error. A Go error means the
// call did not complete: unknown server, connection failure, timeout, or a
// protocol error such as an unknown tool.
//
// args is what the tool's arguments encode from as JSON: a map[string]any,
// a struct, or a json.RawMessage holding a JSON object, which is sent as it
// is (the tool server passes kernel code's arguments on that way, without
// decoding them). Nil sends {}.
func (m *Manager) CallTool(ctx context.Context, server, tool string, args any) (*mcp.CallToolResult, error) {
	var res *mcp.CallToolResult
	err := m.do(ctx, server, fmt.Sprintf("calling tool %q", tool), false, func(ctx context.Context, s *session) error {
		var err error
		res, err = s.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		return err
	})
	if err != nil {
		return nil, m.secrets.scrubErr(err)
	}
	return res, nil
}

// do runs op on the server's session, bounded by CallTimeout. When the
// session turns out to be dead and the request was not delivered (or op is
// idempotent, like listing), it reconnects and tries once more. A tool call
// that may have reached the server is never repeated.
func (m *Manager) do(ctx context.Context, server, what string, idempotent bool, op func(context.Context, *session) error) error {
	for attempt := 0; ; attempt++ {
		s, err := m.session(ctx, server)
		if err != nil {
			return err
		}
		callCtx, cancel := context.WithTimeout(ctx, m.opts.CallTimeout)
		stop := context.AfterFunc(s.ctx, cancel) // a stopped session ends its calls
		err = op(callCtx, s)
		stop()
		timedOut := errors.Is(callCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
		cancel()
		switch {
		case err == nil:
			return nil
		case timedOut:
			return fmt.Errorf("MCP server %q: %s: no answer within %v (the tool call timeout): %w", server, what, m.opts.CallTimeout, context.DeadlineExceeded)
		case ctx.Err() != nil:
			return fmt.Errorf("MCP server %q: %s: %w", server, what, err)
		case s.ctx.Err() != nil && s.stopped.Load():
			return fmt.Errorf("MCP server %q: %s: the server was stopped during the call: %w", server, what, err)
		}
		if attempt == 0 && (notDelivered(err) || idempotent && !isProtocolError(err)) {
			m.log.Info("mcp server connection failed; reconnecting", "server", server, "error", m.secrets.scrub(err.Error()))
			m.drop(server, s)
			continue
		}
		if isProtocolError(err) {
			return fmt.Errorf("MCP server %q: %s: %w", server, what, err)
		}
		// The connection failed while the request may have reached the
		// server, so it is not repeated; the next call starts afresh.
		m.drop(server, s)
		return fmt.Errorf("MCP server %q: %s: the connection failed during the request (did the server crash?); the next call reconnects: %w", server, what, err)
	}
}

// notDelivered reports whether err says that the request never reached the
// server because the connection had already ended, so it is safe to send it
// again over a new connection.
func notDelivered(err error) bool {
	return errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, mcp.ErrSessionMissing) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, os.ErrClosed) || errors.Is(err, io.ErrClosedPipe)
}

// isProtocolError reports whether err is a JSON-RPC error from the server,
// such as an unknown tool or invalid arguments: the connection is fine.
func isProtocolError(err error) bool {
	var je *jsonrpc.Error
	return errors.As(err, &je)
}

// session returns the live session of the named server, connecting if
// there is none, if it died, or if its config was replaced.
func (m *Manager) session(ctx context.Context, name string) (*session, error) {
	re, ok := m.reg.lookup(name)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	e := m.entries[name]
	if !ok {
		if e != nil {
			// The server was removed from the registry: end its session.
			if s := e.current(); s != nil && e.swap(s, nil) {
				m.closeLocked(s)
			}
		}
		m.mu.Unlock()
		names := m.reg.Names()
		if len(names) == 0 {
			return nil, fmt.Errorf("%w %q: no servers are registered", ErrUnknownServer, name)
		}
		return nil, fmt.Errorf("%w %q; registered: %s", ErrUnknownServer, name, strings.Join(names, ", "))
	}
	if e == nil {
		e = &entry{sem: make(chan struct{}, 1)}
		m.entries[name] = e
	}
	m.mu.Unlock()

	usable := func(s *session) bool { return s != nil && s.gen == re.gen && s.alive() }
	if s := e.current(); usable(s) {
		return s, nil
	}
	select {
	case e.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("MCP server %q: waiting for another connect: %w", name, ctx.Err())
	case <-m.ctx.Done():
		return nil, ErrClosed
	}
	defer func() { <-e.sem }() // bound: this call holds it
	old := e.current()
	if usable(old) {
		return old, nil
	}
	if old != nil {
		m.drop(name, old)
	}
	s, err := m.connect(ctx, name, re, e)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.closed {
		// Close ran while we connected, and may be done waiting for
		// the background closes (bg): close this one here, bounded.
		m.mu.Unlock()
		s.close(m.opts.StopGrace, m.log)
		return nil, ErrClosed
	}
	defer m.mu.Unlock()
	if !e.swap(nil, s) {
		m.closeLocked(s)
		return nil, ErrClosed
	}
	return s, nil
}

// drop takes s out of use, if it still is, and closes it in the background.
func (m *Manager) drop(name string, s *session) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.entries[name]; e != nil && e.swap(s, nil) {
		m.closeLocked(s)
	}
}

// closeLocked closes s in a background goroutine that Close waits for, and
// returns a channel closed when s is closed. m.mu must be held, and Close
// must not have run yet (bg is waited for once).
func (m *Manager) closeLocked(s *session) <-chan struct{} {
	done := make(chan struct{})
	m.bg.Add()
	go func() {
		defer m.bg.Done()
		defer close(done)
		s.close(m.opts.StopGrace, m.log)
	}()
	return done
}

// Stop closes the named server's session, if it has one. A stdio server's
// process (and its process group) is ended. The next call reconnects. Stop
// waits until the session is closed or ctx is done.
func (m *Manager) Stop(ctx context.Context, server string) error {
	m.mu.Lock()
	var done <-chan struct{}
	if e := m.entries[server]; !m.closed && e != nil {
		if s := e.current(); s != nil && e.swap(s, nil) {
			s.stopped.Store(true)
			done = m.closeLocked(s)
		}
	}
	m.mu.Unlock()
	return waitStopped(ctx, done, server)
}

// StopAll closes every session, in parallel, as Stop does.
func (m *Manager) StopAll(ctx context.Context) error {
	m.mu.Lock()
	var dones []<-chan struct{}
	if !m.closed {
		for _, e := range m.entries {
			if s := e.current(); s != nil && e.swap(s, nil) {
				s.stopped.Store(true)
				dones = append(dones, m.closeLocked(s))
			}
		}
	}
	m.mu.Unlock()
	for _, d := range dones {
		if err := waitStopped(ctx, d, ""); err != nil {
			return err
		}
	}
	return nil
}

func waitStopped(ctx context.Context, done <-chan struct{}, server string) error {
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		if server == "" {
			return fmt.Errorf("servers still stopping: %w", ctx.Err())
		}
		return fmt.Errorf("MCP server %q still stopping: %w", server, ctx.Err())
	}
}

// closeBound is how long Close waits for the sessions to close.
func (m *Manager) closeBound() time.Duration {
	// A stdio server gets three StopGrace steps and its process group one;
	// an HTTP session's DELETE is bounded at 5s by the SDK.
	return max(4*m.opts.StopGrace, 5*time.Second) + time.Second
}

// Close closes every session in parallel and aborts connects in progress.
// It waits a bounded time (a few StopGrace steps) and then returns an error
// if some server has not stopped yet. Close is idempotent; later calls
// return the first call's result. After Close, methods return ErrClosed.
func (m *Manager) Close() error {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.closed = true
		for _, e := range m.entries {
			if s := e.current(); s != nil && e.swap(s, nil) {
				s.stopped.Store(true)
				m.closeLocked(s)
			}
		}
		m.mu.Unlock()
		m.cancel()
		if bound := m.closeBound(); !m.bg.Wait(bound) {
			m.closeErr = fmt.Errorf("close: some servers did not stop within %v", bound)
		}
		m.http.CloseIdleConnections()
		m.guarded.CloseIdleConnections()
	})
	return m.closeErr
}
