package toolserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipybox/ipybox/internal/defaults"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Environment variables through which the kernel-side runtime
// (ipybox_runtime) finds the tool server. The façade puts them into the
// kernel's constructed environment.
const (
	// EnvURL holds the address: "unix:///abs/path/tool.sock" or
	// "http://127.0.0.1:PORT", as ListenUnix and ListenTCP return it.
	EnvURL = "IPYBOX_TOOL_URL"
	// EnvToken holds the bearer token (Server.Token).
	EnvToken = "IPYBOX_TOOL_TOKEN"
	// EnvTimeout optionally holds the runtime's per-request timeout in
	// seconds. It must exceed ApprovalTimeout + CallTimeout, because the
	// host bounds those waits; the runtime's default is 900.
	EnvTimeout = "IPYBOX_TOOL_TIMEOUT"
)

// Defaults for the zero values of Options.
const (
	DefaultCallTimeout     = defaults.ToolCall
	DefaultApprovalTimeout = defaults.Approval
	DefaultMaxBodyBytes    = 16 << 20
	// DefaultMaxConcurrentCalls and DefaultMaxHeldBytes bound what one
	// Server (one kernel's) holds at once. 32 is as many calls as the
	// runtime's run_tool_async makes at once.
	DefaultMaxConcurrentCalls = 32
	DefaultMaxHeldBytes       = 32 << 20
	// TotalHeldBytes bounds the request bodies that all the Servers of
	// this process hold at once: with many kernels (sessions of one
	// ipybox mcp), one more budget that no kernel can pass alone.
	TotalHeldBytes = 128 << 20
	// PrincipalHeldBytes bounds the part of TotalHeldBytes that the
	// Servers of one principal (Options.Principal) hold at once, so that
	// one principal's kernels leave the rest to the others.
	PrincipalHeldBytes = TotalHeldBytes / 2
	// DefaultProgressTimeout bounds how long a request's body may send
	// nothing: before its first byte (its bytes are charged to the
	// shared budgets only once they come), and between reads after.
	DefaultProgressTimeout = 5 * time.Second
)

// total is the process's budget of held request bodies (TotalHeldBytes)
// and each principal's share of it (PrincipalHeldBytes); a var so that
// tests can replace them.
var total = struct {
	sync.Mutex
	b          *budget
	share      int64
	principals map[string]*budget
}{b: newBytesBudget(TotalHeldBytes), share: PrincipalHeldBytes, principals: map[string]*budget{}}

func totalBodies() *budget {
	total.Lock()
	defer total.Unlock()
	return total.b
}

// principalBodies returns principal's share of the process's budget. A
// principal's budget stays for the life of the process: principals are
// few (a token file's), and it is a few words.
func principalBodies(principal string) *budget {
	total.Lock()
	defer total.Unlock()
	b := total.principals[principal]
	if b == nil {
		b = newBytesBudget(total.share)
		total.principals[principal] = b
	}
	return b
}

// progressTimeout is DefaultProgressTimeout; a var so that tests can
// shorten it.
var progressTimeout = DefaultProgressTimeout

// shutdownTimeout bounds how long Close waits for handlers to return after
// it cancelled them; a var so that tests can shorten it.
var shutdownTimeout = 5 * time.Second

// maxUnixPath is the longest unix socket path Linux accepts
// (sizeof(sun_path) - 1).
const maxUnixPath = 107

// Caller calls a tool of a server in the host-side registry. The façade
// implements it over mcpconn. It returns ErrUnknownServer (or an error
// wrapping it) for a server that is not registered. A tool that failed is a
// result with IsError set, not an error; an error means the call itself
// failed (transport, protocol, unknown tool). CallTool must return once ctx
// is done.
//
// args is the JSON object the kernel sent, byte for byte (valid UTF-8 and
// valid JSON): pass it on as it is (the go-sdk's CallToolParams.Arguments
// takes it), rather than decoding it into maps, which take tens of times
// its size in memory. The Caller must not modify it.
type Caller interface {
	CallTool(ctx context.Context, server, tool string, args json.RawMessage) (*mcp.CallToolResult, error)
}

// CallerFunc adapts a function to Caller.
type CallerFunc func(ctx context.Context, server, tool string, args json.RawMessage) (*mcp.CallToolResult, error)

// CallTool calls f.
func (f CallerFunc) CallTool(ctx context.Context, server, tool string, args json.RawMessage) (*mcp.CallToolResult, error) {
	return f(ctx, server, tool, args)
}

// Options configures a Server. A nil *Options means the defaults; New
// copies the struct.
type Options struct {
	// Token is the bearer token every request must carry. Empty means a
	// fresh one: 32 random bytes, hex-encoded. A given token must be at
	// least 32 characters of [A-Za-z0-9._~+/=-].
	Token string

	// Approver decides tool calls and shell commands. Nil means that every
	// tool call and every shell command is rejected: the safe default.
	// Use AutoApprove to approve everything.
	Approver Approver

	// AutoApproveTools skips approval for tool calls only: they go to the
	// Caller without asking the Approver. Shell commands are still sent to
	// the Approver (and rejected if it is nil), so shell approval stays on
	// when tool approval is turned off. False means tool calls are approved.
	AutoApproveTools bool

	// KnownServer reports whether a server name is in the host-side
	// registry. When it is set, calls to other names are refused with
	// "unknown_server" before any approval is asked. Nil means no
	// pre-check: the Caller decides (and may return ErrUnknownServer).
	KnownServer func(server string) bool

	// CallTimeout bounds one Caller.CallTool. Zero means
	// DefaultCallTimeout (120 s); negative is an error.
	CallTimeout time.Duration

	// ApprovalTimeout bounds one approval. When it expires the Approver's
	// context is cancelled and the kernel gets "approval_timeout". Zero
	// means DefaultApprovalTimeout (5 min); negative is an error.
	ApprovalTimeout time.Duration

	// MaxBodyBytes bounds a request body. Zero means DefaultMaxBodyBytes
	// (16 MiB); negative, or over TotalHeldBytes, is an error. The host
	// holds a few times a body's size while it serves the request: the
	// body, the arguments' text, and what the MCP client encodes.
	MaxBodyBytes int64

	// MaxConcurrentCalls bounds the requests with a body (tool calls,
	// shell approvals, module reads) that the server holds at once,
	// including those waiting for approval. More wait in line, their
	// bodies unread, up to four times as many; past that a request is
	// answered 429 "busy". Zero means DefaultMaxConcurrentCalls (32);
	// negative is an error.
	MaxConcurrentCalls int

	// MaxHeldBytes bounds the bytes of request bodies the server holds at
	// once (a body counts its Content-Length, or MaxBodyBytes when it has
	// none); past it requests wait in line as for MaxConcurrentCalls. All
	// Servers of the process share one more bound, TotalHeldBytes, of
	// which one principal's take at most PrincipalHeldBytes; a body is
	// charged to those only once its first bytes arrive, and a body that
	// sends nothing for DefaultProgressTimeout is answered 408. A body of
	// at most 64 KiB that fits goes ahead of larger ones that wait. Zero
	// means DefaultMaxHeldBytes (32 MiB); less than MaxBodyBytes is an
	// error.
	MaxHeldBytes int64

	// Principal names the principal whose kernel this server serves
	// (ipybox mcp's principals). The request bodies of all the Servers of
	// one principal take at most PrincipalHeldBytes of the process's
	// TotalHeldBytes at once. Empty is a principal of its own name, "".
	Principal string

	// Modules, when set, serves the source of Python modules at
	// /v1/modules/get, for a kernel that does not share the host's disk: it
	// returns a module's source and whether it is a package, or an error
	// that wraps ErrNoModule. It is asked for any name the kernel sends
	// (at most 256 bytes, no control characters): it must check the name
	// itself. Nil means no such endpoint (404).
	Modules func(name string) (source []byte, pkg bool, err error)

	// Logger receives one record per request. Nil discards. Arguments and
	// commands are never logged, only names, sizes and outcomes.
	Logger *slog.Logger

	// Observe, when set, is called as a tool call (call set, once its
	// server is known) or a shell command's approval (shell set) begins.
	// It returns the context the request goes on with (its approval and
	// the MCP call: a span there is their parent) and the function to call
	// with its outcome: "ok", "is_error" (a result with isError) or the
	// error kind the kernel gets ("rejected", "timeout", ...). Nil
	// observes nothing.
	Observe func(ctx context.Context, call *ToolCall, shell string) (context.Context, func(outcome string))
}

// Server is the tool server of one executor. Create it with New, make it
// reachable with ListenUnix and/or ListenTCP, and stop it with Close.
type Server struct {
	caller Caller
	opts   Options
	log    *slog.Logger

	// ctx is the parent of every request context; Close cancels it, which
	// cancels in-flight approvals and calls.
	ctx    context.Context
	cancel context.CancelFunc
	http   *http.Server

	// calls and bytes admit requests with a body (see admit); waiting
	// counts those in line. principal is the principal's share of the
	// process's budget (Options.Principal).
	calls, bytes *budget
	waiting      atomic.Int64
	sharing      atomic.Int64 // those waiting for the shared budgets (held.share)
	principal    *budget

	mu       sync.Mutex
	closed   bool
	wg       sync.WaitGroup  // one per Serve goroutine
	tlsHosts map[string]bool // HOST:PORT of the ListenTLS listeners

	closeOnce sync.Once
	closeErr  error
}

// New returns a Server that calls tools through caller. It does not listen
// yet. It panics if caller is nil (a programmer error).
func New(caller Caller, opts *Options) (*Server, error) {
	if caller == nil {
		panic("toolserver.New: nil Caller")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Token == "" {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("tool server: generate token: %w", err)
		}
		o.Token = hex.EncodeToString(b)
	} else if err := checkToken(o.Token); err != nil {
		return nil, err
	}
	if err := defaults.Apply("toolserver",
		defaults.Duration{Name: "Options.CallTimeout", V: &o.CallTimeout, Def: DefaultCallTimeout},
		defaults.Duration{Name: "Options.ApprovalTimeout", V: &o.ApprovalTimeout, Def: DefaultApprovalTimeout},
	); err != nil {
		return nil, err
	}
	if o.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("tool server: Options.MaxBodyBytes is %d; use a positive size, or 0 for the default %d", o.MaxBodyBytes, DefaultMaxBodyBytes)
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if share := principalBodies(o.Principal).size; o.MaxBodyBytes > share {
		return nil, fmt.Errorf("tool server: Options.MaxBodyBytes is %d, over a principal's share of the process's budget (%d); pass large data through files", o.MaxBodyBytes, share)
	}
	switch {
	case o.MaxConcurrentCalls < 0:
		return nil, fmt.Errorf("tool server: Options.MaxConcurrentCalls is %d; use a positive number, or 0 for the default %d", o.MaxConcurrentCalls, DefaultMaxConcurrentCalls)
	case o.MaxConcurrentCalls == 0:
		o.MaxConcurrentCalls = DefaultMaxConcurrentCalls
	}
	if o.MaxHeldBytes == 0 {
		o.MaxHeldBytes = max(DefaultMaxHeldBytes, o.MaxBodyBytes)
	}
	if o.MaxHeldBytes < o.MaxBodyBytes {
		return nil, fmt.Errorf("tool server: Options.MaxHeldBytes is %d, less than MaxBodyBytes (%d): a largest request could never be served", o.MaxHeldBytes, o.MaxBodyBytes)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{caller: caller, opts: o, log: log,
		calls: newBudget(int64(o.MaxConcurrentCalls)), bytes: newBytesBudget(o.MaxHeldBytes)}
	s.principal = principalBodies(o.Principal)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.http = &http.Server{
		Handler:           http.HandlerFunc(s.serveHTTP),
		BaseContext:       func(net.Listener) context.Context { return s.ctx },
		ReadHeaderTimeout: 10 * time.Second,
		// The body is bounded by MaxBodyBytes; this bounds a slow sender.
		ReadTimeout: 60 * time.Second,
		// No WriteTimeout: a response waits for approval and the call,
		// which ApprovalTimeout and CallTimeout bound.
		IdleTimeout:    60 * time.Second,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// observe calls Options.Observe, if set.
func (s *Server) observe(ctx context.Context, call *ToolCall, shell string) (context.Context, func(string)) {
	if s.opts.Observe == nil {
		return ctx, func(string) {}
	}
	return s.opts.Observe(ctx, call, shell)
}

func checkToken(tok string) error {
	if len(tok) < 32 {
		return fmt.Errorf("tool server: Options.Token has %d characters; use at least 32, or leave it empty to generate one", len(tok))
	}
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == '~' || c == '+' || c == '/' || c == '=' || c == '-'
		if !ok {
			return fmt.Errorf("tool server: Options.Token has the byte %q at %d; use only [A-Za-z0-9._~+/=-]", c, i)
		}
	}
	return nil
}

// Token returns the bearer token that every request must carry.
func (s *Server) Token() string { return s.opts.Token }

// ListenUnix listens on a unix socket at path and serves in the
// background. The socket file gets mode 0600. The caller creates the
// directory (mode 0700, so that nobody else can reach the socket in the
// instant between bind and chmod); an existing file at path is an error and
// is never removed. Close removes the socket. ListenUnix returns the URL for
// EnvURL: "unix://" + path.
func (s *Server) ListenUnix(path string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("tool server: unix socket path %q is relative; use an absolute path", path)
	}
	if len(path) > maxUnixPath {
		return "", fmt.Errorf("tool server: unix socket path %q is %d bytes, over the limit of %d; use a shorter run directory", path, len(path), maxUnixPath)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", ErrClosed
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return "", fmt.Errorf("tool server: listen on unix socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return "", fmt.Errorf("tool server: restrict unix socket %q to mode 0600: %w", path, err)
	}
	s.serve(l)
	return "unix://" + path, nil
}

// kernelsHaveUnixSockets says whether a kernel's Python can connect to a
// unix socket: not on Windows, where CPython has no AF_UNIX.
var kernelsHaveUnixSockets = runtime.GOOS != "windows"

// ListenLocal listens where a local kernel reaches the server most
// privately: the unix socket at path (see ListenUnix), or, on Windows,
// 127.0.0.1 (see ListenTCP), where the token and the Host check guard it.
// It returns the URL for EnvURL.
func (s *Server) ListenLocal(path string) (string, error) {
	if kernelsHaveUnixSockets {
		return s.ListenUnix(path)
	}
	return s.ListenTCP()
}

// ListenTCP listens on 127.0.0.1 on a free port and serves in the
// background. Use it only when the kernel cannot reach a unix socket; the
// Host header must then name 127.0.0.1 or localhost with this port.
// ListenTCP returns the URL for EnvURL: "http://127.0.0.1:PORT".
func (s *Server) ListenTCP() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", ErrClosed
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("tool server: listen on loopback: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	s.serve(l)
	return "http://127.0.0.1:" + strconv.Itoa(port), nil
}

// serve starts serving l; s.mu is held.
func (s *Server) serve(l net.Listener) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.http.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Warn("toolserver: serve", "addr", l.Addr().String(), "err", err)
		}
	}()
}

// Close stops the server: it cancels in-flight approvals and calls (their
// requests get an "unavailable" error), closes the listeners, removes the
// unix socket and waits for its goroutines. It is idempotent, safe to call
// concurrently, and bounded: if a Caller or Approver ignores its context,
// Close gives up on it after a few seconds, closes its connection and
// returns an error.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.cancel()
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := s.http.Shutdown(ctx); err != nil {
			s.http.Close()
			s.closeErr = fmt.Errorf("tool server: close: requests still running after %v (a Caller or Approver ignores its context): %w", shutdownTimeout, err)
		}
		s.wg.Wait() // bound: Serve returns once Shutdown or Close closed the listeners
	})
	return s.closeErr
}
