package toolserver

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
	"unsafe"
)

// Error kinds of the JSON error body {"error": {"kind": ..., "message": ...}}.
// docs/toolserver.md lists them with their HTTP status; the kernel-side
// runtime maps them to its exceptions.
const (
	kindBadRequest      = "bad_request"      // 400, 404, 405, 413, 415
	kindUnauthorized    = "unauthorized"     // 401
	kindForbidden       = "forbidden"        // 403: wrong Host header
	kindUnknownServer   = "unknown_server"   // 404
	kindRejected        = "rejected"         // 403
	kindApprovalTimeout = "approval_timeout" // 504
	kindToolError       = "tool_error"       // 502: the call failed (not a result with isError)
	kindTimeout         = "timeout"          // 504: CallTimeout expired
	kindUnavailable     = "unavailable"      // 503: the server is closing
	kindInternal        = "internal"         // 500
	kindNoModule        = "no_module"        // 404: /v1/modules/get
	kindBusy            = "busy"             // 429: too many requests held or waiting
)

// maxNameBytes bounds server and tool names. MCP tool names are at most
// 128 characters; this leaves room without letting a name flood a prompt.
const maxNameBytes = 256

type apiError struct {
	status  int
	kind    string
	message string
}

func (e *apiError) Error() string { return e.kind + ": " + e.message }

// errClientGone is returned internally when the kernel closed the
// connection; there is nobody to answer.
var errClientGone = &apiError{status: 499, kind: "client_gone", message: "the client closed the connection"}

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, kind: kindBadRequest, message: fmt.Sprintf(format, args...)}
}

// serveHTTP checks the Host header (403) and the token (401), then routes
// the request.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if r.TLS != nil {
		// A ListenTLS listener: the Host must be the address it serves.
		if !s.tlsHostAllowed(r.Host) {
			s.writeError(w, r, start, &apiError{status: http.StatusForbidden, kind: kindForbidden,
				message: fmt.Sprintf("Host header %q is not accepted; use the address in $%s", r.Host, EnvURL)})
			return
		}
	} else if !hostAllowed(r) {
		s.writeError(w, r, start, &apiError{status: http.StatusForbidden, kind: kindForbidden,
			message: fmt.Sprintf("Host header %q is not accepted; use localhost (unix socket) or 127.0.0.1:PORT of this server", r.Host)})
		return
	}
	if !s.tokenOK(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="ipybox"`)
		s.writeError(w, r, start, &apiError{status: http.StatusUnauthorized, kind: kindUnauthorized,
			message: "missing or wrong token; send Authorization: Bearer $" + EnvToken})
		return
	}
	var route func(http.ResponseWriter, *http.Request, time.Time) *apiError
	method := http.MethodPost
	switch r.URL.Path {
	case "/v1/tools/call":
		route = s.handleCall
	case "/v1/shell/approve":
		route = s.handleShell
	case "/v1/health":
		route, method = s.handleHealth, http.MethodGet
	case "/v1/modules/get":
		if s.opts.Modules != nil {
			route = s.handleModule
			break
		}
		fallthrough
	default:
		s.writeError(w, r, start, &apiError{status: http.StatusNotFound, kind: kindBadRequest,
			message: fmt.Sprintf("no endpoint %q; use /v1/tools/call, /v1/shell/approve or /v1/health", r.URL.Path)})
		return
	}
	if r.Method != method {
		w.Header().Set("Allow", method)
		s.writeError(w, r, start, &apiError{status: http.StatusMethodNotAllowed, kind: kindBadRequest,
			message: fmt.Sprintf("%s %s is not allowed; use %s", r.Method, r.URL.Path, method)})
		return
	}
	if method == http.MethodPost {
		r2, release, aerr := s.admit(w, r)
		if aerr != nil {
			s.writeError(w, r, start, aerr)
			return
		}
		defer release()
		r = r2
	}
	if err := route(w, r, start); err != nil {
		s.writeError(w, r, start, err)
	}
}

// hostAllowed implements the Host check. On the unix socket the kernel
// sends "localhost"; the sandbox's in-namespace forwarder relays TCP from
// 127.0.0.1:<inner port> to the socket, so 127.0.0.1 or localhost with any
// port is accepted there too. On TCP only 127.0.0.1 or localhost with the
// port of this listener is accepted, which defeats DNS rebinding (a
// browser would send the attacker's name).
func hostAllowed(r *http.Request) bool {
	host, port, err := net.SplitHostPort(r.Host)
	if err != nil {
		host, port = r.Host, ""
	}
	if host != "localhost" && host != "127.0.0.1" {
		return false
	}
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	switch a := local.(type) {
	case *net.UnixAddr:
		return true
	case *net.TCPAddr:
		return port != "" && port == fmt.Sprint(a.Port)
	default:
		return false
	}
}

func (s *Server) tokenOK(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return false
	}
	got := strings.TrimSpace(h[len(prefix):])
	return subtle.ConstantTimeCompare([]byte(got), []byte(s.opts.Token)) == 1
}

// bodyReadTimeout bounds reading a body once its request is admitted
// (http.Server.ReadTimeout counts from the request's start, which may be
// long before, while it waited in line).
const bodyReadTimeout = 60 * time.Second

// heldKey carries a request's *held from admit to readBody.
type heldKey struct{}

// held is what a request with a body holds: its place among the kernel's
// requests and bytes (taken by admit), and its bytes of the principal's
// share and of the process's budget (taken by readBody once the body
// starts to arrive). release gives it all back.
type held struct {
	s            *Server
	n            int64
	shared       bool
	principal    *budget
	total        *budget
	mu           sync.Mutex // guards released
	released     bool
	readDeadline time.Time
	rc           *http.ResponseController
}

func (h *held) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.released {
		return
	}
	h.released = true
	if h.shared {
		h.total.release(h.n)
		h.principal.release(h.n)
	}
	h.s.bytes.release(h.n)
	h.s.calls.release(1)
}

// admit holds a request with a body until this server can hold its body:
// one of MaxConcurrentCalls, and its Content-Length (or MaxBodyBytes when
// it sends none) of MaxHeldBytes. These are the kernel's own: its
// requests wait only for each other. The body is not read while it
// waits: the bytes stay in the kernel's socket. A request that finds too
// many waiting already is answered "busy" at once. The budgets that
// kernels share are taken by readBody, once the body arrives. release
// gives everything back; call it once the answer is written, when
// nothing of the body is held any more.
func (s *Server) admit(w http.ResponseWriter, r *http.Request) (*http.Request, func(), *apiError) {
	n := r.ContentLength
	if n > s.opts.MaxBodyBytes {
		return nil, nil, s.tooLarge()
	}
	if n < 0 {
		n = s.opts.MaxBodyBytes
	}
	if s.waiting.Add(1) > int64(s.maxWaiting()) {
		s.waiting.Add(-1)
		// Read the body away (it is not kept), so that the kernel reads
		// the answer instead of a broken pipe.
		io.Copy(io.Discard, http.MaxBytesReader(nil, r.Body, s.opts.MaxBodyBytes))
		return nil, nil, &apiError{status: http.StatusTooManyRequests, kind: kindBusy,
			message: fmt.Sprintf("the tool server already holds %d requests of this kernel and has %d more waiting, its limits; wait for some to finish, or pass large data through files in the workspace",
				s.opts.MaxConcurrentCalls, s.maxWaiting())}
	}
	defer s.waiting.Add(-1)
	ctx := r.Context()
	if s.calls.acquire(ctx, 1) != nil {
		return nil, nil, s.gone()
	}
	if s.bytes.acquire(ctx, n) != nil {
		s.calls.release(1)
		return nil, nil, s.gone()
	}
	h := &held{s: s, n: n, principal: s.principal, total: totalBodies(), rc: http.NewResponseController(w),
		readDeadline: time.Now().Add(bodyReadTimeout)}
	return r.WithContext(context.WithValue(ctx, heldKey{}, h)), h.release, nil
}

// gone is the answer to a request whose wait ended with its context.
func (s *Server) gone() *apiError {
	if s.ctx.Err() != nil {
		return unavailable()
	}
	return errClientGone
}

// maxWaiting is how many requests may wait to be admitted.
func (s *Server) maxWaiting() int { return 4 * s.opts.MaxConcurrentCalls }

func (s *Server) tooLarge() *apiError {
	return &apiError{status: http.StatusRequestEntityTooLarge, kind: kindBadRequest,
		message: fmt.Sprintf("request body is over the limit of %d bytes; pass large data through files in the workspace", s.opts.MaxBodyBytes)}
}

// progressReader reads a body with a deadline before each read: no
// progress within progressTimeout, or the whole body not within its
// overall deadline, ends the read; so does the end of ctx (the server's
// Close), which a read blocked on the connection would not see.
type progressReader struct {
	r   io.Reader
	h   *held
	to  time.Duration
	ctx context.Context
	mu  sync.Mutex // orders a read's deadline against stop's
}

func (p *progressReader) Read(b []byte) (int, error) {
	p.mu.Lock()
	if err := p.ctx.Err(); err != nil {
		p.mu.Unlock()
		return 0, err
	}
	d := time.Now().Add(p.to)
	if p.h.readDeadline.Before(d) {
		d = p.h.readDeadline
	}
	p.h.rc.SetReadDeadline(d)
	p.mu.Unlock()
	return p.r.Read(b)
}

// stop ends a blocked read at once; it runs when ctx ends.
func (p *progressReader) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.h.rc.SetReadDeadline(time.Now())
}

// share takes the body's bytes of the principal's share and of the
// process's budget, once its first bytes have come: a request that sends
// only its headers holds nothing that other kernels need. It waits in
// line there as in admit.
func (h *held) share(ctx context.Context) *apiError {
	h.s.sharing.Add(1)
	defer h.s.sharing.Add(-1)
	if h.principal.acquire(ctx, h.n) != nil {
		return h.s.gone()
	}
	if h.total.acquire(ctx, h.n) != nil {
		h.principal.release(h.n)
		return h.s.gone()
	}
	h.mu.Lock()
	h.shared = true
	h.mu.Unlock()
	return nil
}

// readBody reads the admitted body whole, into a buffer of its declared
// length when it has one, and checks that it is JSON in valid UTF-8. It
// waits for the body's first bytes (at most progressTimeout) before it
// takes the shared budgets (see held.share), and gives up on a body that
// makes no progress for progressTimeout.
func (s *Server) readBody(r *http.Request) ([]byte, *apiError) {
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		return nil, &apiError{status: http.StatusUnsupportedMediaType, kind: kindBadRequest,
			message: fmt.Sprintf("Content-Type %q is not accepted; send application/json", ct)}
	}
	h, _ := r.Context().Value(heldKey{}).(*held)
	if h == nil {
		panic("toolserver: readBody without admit")
	}
	to := progressTimeout
	body := &progressReader{r: r.Body, h: h, to: to, ctx: r.Context()}
	defer context.AfterFunc(r.Context(), body.stop)()
	// The first bytes, into a small buffer that the kernel's own budget
	// covers (MaxConcurrentCalls of them at most).
	first := make([]byte, min(max(h.n, 1), 4<<10))
	k, err := io.ReadAtLeast(body, first, 1)
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		first, err = first[:k], nil
	case err != nil:
		return nil, s.readErr(r.Context(), err, to)
	}
	first = first[:k]
	// The wait for the shared budgets is not the body's to make progress
	// in: no deadline while it waits.
	h.rc.SetReadDeadline(time.Time{})
	if aerr := h.share(r.Context()); aerr != nil {
		return nil, aerr
	}
	h.readDeadline = time.Now().Add(bodyReadTimeout)
	var buf []byte
	if r.ContentLength >= 0 {
		// admit checked the length against MaxBodyBytes; net/http ends
		// the body there.
		buf = make([]byte, r.ContentLength)
		copy(buf, first)
		if k < len(buf) {
			_, err = io.ReadFull(body, buf[k:])
		}
	} else {
		rest, rerr := io.ReadAll(http.MaxBytesReader(nil, io.NopCloser(body), s.opts.MaxBodyBytes-int64(k)))
		buf, err = append(first, rest...), rerr
	}
	if err != nil {
		// The deadline stays: net/http reads away what is left of the
		// body after the answer, and must not wait for a sender that
		// stalls.
		return nil, s.readErr(r.Context(), err, to)
	}
	h.rc.SetReadDeadline(time.Time{})
	// encoding/json silently replaces invalid UTF-8; refuse it instead,
	// so that what is approved is exactly what was sent.
	if !utf8.Valid(buf) {
		return nil, badRequest("request body is not valid UTF-8")
	}
	return buf, nil
}

// readErr words a failed read of a body.
func (s *Server) readErr(ctx context.Context, err error, to time.Duration) *apiError {
	switch {
	case ctx.Err() != nil:
		return s.gone()
	case errors.As(err, new(*http.MaxBytesError)):
		return s.tooLarge()
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &apiError{status: http.StatusRequestTimeout, kind: kindBadRequest,
			message: fmt.Sprintf("the request body sent nothing for %v, or did not arrive within %v; send the body with the headers", to, bodyReadTimeout)}
	}
	return badRequest("read request body: %v", err)
}

// fields decodes body as one JSON object whose members are each one of
// known (no other, nothing after the object), without decoding the
// members' values: each is its raw text, a slice of body itself where
// encoding/json hands it out that way (no copy), so that a value the host
// only passes on (a tool call's args) is never turned into Go maps and
// slices, which take tens of times its size, nor copied. The caller must
// not modify body while it uses the values.
func fields(body []byte, known ...string) (map[string]json.RawMessage, *apiError) {
	var m map[string]rawView
	// Unmarshal, not a Decoder: a Decoder copies the whole body into a
	// buffer of its own first.
	if err := json.Unmarshal(body, &m); err != nil {
		if trailing(body) {
			return nil, badRequest("request body has data after the JSON object")
		}
		return nil, badRequest("decode request body: %v", err)
	}
	if m == nil {
		return nil, badRequest("request body is null; send a JSON object")
	}
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		if !slices.Contains(known, k) {
			return nil, badRequest("decode request body: json: unknown field %q", k)
		}
		if !within(v, body) {
			// Not a view of body: a copy of its own, as RawMessage makes.
			v = bytes.Clone(v)
		}
		out[k] = json.RawMessage(v)
	}
	return out, nil
}

// trailing reports whether body is one JSON value with more after it
// (only on the error path: the Decoder copies body).
func trailing(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	var v json.RawMessage
	if dec.Decode(&v) != nil {
		return false
	}
	_, err := dec.Token()
	return err != io.EOF
}

// rawView is a JSON value's raw text as encoding/json hands it to
// UnmarshalJSON, kept without a copy (fields checks whether it is a view
// of the body, and copies it if not).
type rawView []byte

func (r *rawView) UnmarshalJSON(b []byte) error {
	*r = b
	return nil
}

// within reports whether v lies in body's memory.
func within(v, body []byte) bool {
	if len(v) == 0 || len(body) == 0 {
		return len(v) == 0
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(body)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(v)))
	return p >= lo && p+uintptr(len(v)) <= lo+uintptr(len(body))
}

// stringField decodes the member name of m, a JSON string, into v; an
// absent member or null leaves v as it is.
func stringField(m map[string]json.RawMessage, name string, v *string) *apiError {
	raw, ok := m[name]
	if !ok {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return badRequest("decode request body: %q: %v", name, err)
	}
	return nil
}

func checkName(what, name string) *apiError {
	switch {
	case name == "":
		return badRequest("%s is empty; name a registered %s", what, what)
	case len(name) > maxNameBytes:
		return badRequest("%s is %d bytes long, over the limit of %d", what, len(name), maxNameBytes)
	}
	for _, r := range name {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return badRequest("%s %q contains a control or invalid character", what, name)
		}
	}
	return nil
}

// syncKey carries a request's sync marker (see SyncMarker).
type syncKey struct{}

// SyncMarker returns the sync marker the kernel sent with the request whose
// context ctx is, or "". The runtime publishes the same marker on the
// kernel's iopub channel just before it sends the request, after flushing
// stdout and stderr: an approver that waits until it has seen the marker
// on iopub knows it has seen all the output printed before the call.
func SyncMarker(ctx context.Context) string {
	s, _ := ctx.Value(syncKey{}).(string)
	return s
}

func withSync(ctx context.Context, sync string) (context.Context, *apiError) {
	if sync == "" {
		return ctx, nil
	}
	if len(sync) > 64 {
		return ctx, badRequest(`"sync" is longer than 64 bytes`)
	}
	return context.WithValue(ctx, syncKey{}, sync), nil
}

// callRequest is the body of /v1/tools/call. Args is the raw JSON object
// the kernel sent: it is passed on as it is.
type callRequest struct {
	Server, Tool, Sync string
	Args               json.RawMessage
}

func (s *Server) readCall(r *http.Request) (*callRequest, *apiError) {
	body, aerr := s.readBody(r)
	if aerr != nil {
		return nil, aerr
	}
	m, aerr := fields(body, "server", "tool", "args", "sync")
	if aerr != nil {
		return nil, aerr
	}
	var req callRequest
	for _, f := range []struct {
		name string
		v    *string
	}{{"server", &req.Server}, {"tool", &req.Tool}, {"sync", &req.Sync}} {
		if aerr := stringField(m, f.name, f.v); aerr != nil {
			return nil, aerr
		}
	}
	switch args := m["args"]; {
	case args == nil || string(args) == "null":
		req.Args = json.RawMessage("{}")
	case args[0] != '{':
		return nil, badRequest(`decode request body: "args" is not a JSON object; send {"args": {...}}`)
	default:
		req.Args = args
	}
	return &req, nil
}

func (s *Server) handleCall(w http.ResponseWriter, r *http.Request, start time.Time) (aerr *apiError) {
	req, aerr := s.readCall(r)
	if aerr != nil {
		return aerr
	}
	if aerr := checkName("server", req.Server); aerr != nil {
		return aerr
	}
	if aerr := checkName("tool", req.Tool); aerr != nil {
		return aerr
	}
	if s.opts.KnownServer != nil && !s.opts.KnownServer(req.Server) {
		return unknownServer(req.Server)
	}
	ctx, aerr := withSync(r.Context(), req.Sync)
	if aerr != nil {
		return aerr
	}
	call := &ToolCall{Server: req.Server, Tool: req.Tool, Args: req.Args}
	what := fmt.Sprintf("tool call %s.%s", req.Server, req.Tool)
	ctx, observed := s.observe(ctx, call, "")
	outcome := "ok"
	defer func() {
		if aerr != nil {
			outcome = aerr.kind
		}
		observed(outcome)
	}()
	if !s.opts.AutoApproveTools {
		if aerr := s.approve(ctx, what, func(ctx context.Context, a Approver) error {
			return a.ApproveTool(ctx, call)
		}); aerr != nil {
			return aerr
		}
	}
	cctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout)
	defer cancel()
	res, err := s.caller.CallTool(cctx, call.Server, call.Tool, call.Args)
	switch {
	case err == nil && res == nil:
		return &apiError{status: http.StatusInternalServerError, kind: kindInternal,
			message: what + " returned neither a result nor an error"}
	case err == nil:
	case s.ctx.Err() != nil:
		return unavailable()
	case ctx.Err() != nil:
		return errClientGone
	case errors.Is(err, ErrUnknownServer):
		return unknownServer(req.Server)
	case cctx.Err() == context.DeadlineExceeded:
		return &apiError{status: http.StatusGatewayTimeout, kind: kindTimeout,
			message: fmt.Sprintf("%s did not finish within %v", what, s.opts.CallTimeout)}
	default:
		return &apiError{status: http.StatusBadGateway, kind: kindToolError,
			message: fmt.Sprintf("%s failed: %v", what, err)}
	}
	out, err := json.Marshal(res)
	if err != nil {
		return &apiError{status: http.StatusInternalServerError, kind: kindInternal,
			message: fmt.Sprintf("encode the result of %s: %v", what, err)}
	}
	if res.IsError {
		outcome = "is_error"
	}
	s.log.DebugContext(ctx, "toolserver: call", "server", req.Server, "tool", req.Tool,
		"args_bytes", len(req.Args), "result_bytes", len(out), "is_error", res.IsError, "dur", time.Since(start))
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleShell(w http.ResponseWriter, r *http.Request, start time.Time) (aerr *apiError) {
	body, aerr := s.readBody(r)
	if aerr != nil {
		return aerr
	}
	m, aerr := fields(body, "command", "sync")
	if aerr != nil {
		return aerr
	}
	var cmd, sync string
	if aerr := stringField(m, "command", &cmd); aerr != nil {
		return aerr
	}
	if aerr := stringField(m, "sync", &sync); aerr != nil {
		return aerr
	}
	if cmd == "" {
		return badRequest(`"command" is missing or empty; send {"command": "<the expanded command>"}`)
	}
	ctx, aerr := withSync(r.Context(), sync)
	if aerr != nil {
		return aerr
	}
	ctx, observed := s.observe(ctx, nil, cmd)
	defer func() {
		outcome := "ok"
		if aerr != nil {
			outcome = aerr.kind
		}
		observed(outcome)
	}()
	if aerr := s.approve(ctx, "shell command", func(ctx context.Context, a Approver) error {
		return a.ApproveShell(ctx, cmd)
	}); aerr != nil {
		return aerr
	}
	s.log.DebugContext(ctx, "toolserver: shell approved", "command_bytes", len(cmd), "dur", time.Since(start))
	writeJSON(w, http.StatusOK, []byte(`{"approved":true}`))
	return nil
}

// handleModule serves a module's source from Options.Modules.
func (s *Server) handleModule(w http.ResponseWriter, r *http.Request, start time.Time) *apiError {
	body, aerr := s.readBody(r)
	if aerr != nil {
		return aerr
	}
	m, aerr := fields(body, "name")
	if aerr != nil {
		return aerr
	}
	var name string
	if aerr := stringField(m, "name", &name); aerr != nil {
		return aerr
	}
	if aerr := checkName("module", name); aerr != nil {
		return aerr
	}
	src, pkg, err := s.opts.Modules(name)
	switch {
	case errors.Is(err, ErrNoModule):
		return &apiError{status: http.StatusNotFound, kind: kindNoModule, message: fmt.Sprintf("no module %q", name)}
	case err != nil:
		s.log.Warn("toolserver: module source", "module", name, "err", err)
		return &apiError{status: http.StatusInternalServerError, kind: kindInternal, message: fmt.Sprintf("module %q cannot be read; see the host's log", name)}
	}
	out, err := json.Marshal(struct {
		Source  string `json:"source"`
		Package bool   `json:"package"`
	}{string(src), pkg})
	if err != nil {
		return &apiError{status: http.StatusInternalServerError, kind: kindInternal, message: err.Error()}
	}
	s.log.Debug("toolserver: module served", "module", name, "bytes", len(src), "dur", time.Since(start))
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request, _ time.Time) *apiError {
	writeJSON(w, http.StatusOK, []byte(`{"ok":true}`))
	return nil
}

// approve asks the Approver under ApprovalTimeout and maps its answer.
func (s *Server) approve(ctx context.Context, what string, ask func(context.Context, Approver) error) *apiError {
	a := s.opts.Approver
	if a == nil {
		return &apiError{status: http.StatusForbidden, kind: kindRejected,
			message: what + " rejected: no approver is configured on the host, so everything is rejected"}
	}
	actx, cancel := context.WithTimeout(ctx, s.opts.ApprovalTimeout)
	defer cancel()
	err := ask(actx, a)
	if err == nil {
		return nil
	}
	var rej *RejectedError
	switch {
	case s.ctx.Err() != nil:
		return unavailable()
	case ctx.Err() != nil:
		return errClientGone
	case errors.Is(err, ErrApprovalTimeout) || actx.Err() == context.DeadlineExceeded:
		return &apiError{status: http.StatusGatewayTimeout, kind: kindApprovalTimeout,
			message: fmt.Sprintf("%s was not approved in time (the host waits up to %v)", what, s.opts.ApprovalTimeout)}
	case errors.As(err, &rej):
		msg := what + " rejected by the application"
		if rej.Reason != "" {
			msg += ": " + rej.Reason
		}
		return &apiError{status: http.StatusForbidden, kind: kindRejected, message: msg}
	case errors.Is(err, ErrRejected):
		return &apiError{status: http.StatusForbidden, kind: kindRejected, message: what + " " + err.Error()}
	default:
		// An approver that fails rejects; its error may hold host details,
		// so it goes to the log, not to the kernel.
		s.log.Warn("toolserver: approver failed; rejecting", "what", what, "err", err)
		return &apiError{status: http.StatusForbidden, kind: kindRejected,
			message: what + " rejected: the approval failed on the host"}
	}
}

func unknownServer(name string) *apiError {
	return &apiError{status: http.StatusNotFound, kind: kindUnknownServer,
		message: fmt.Sprintf("unknown MCP server %q; register it on the host (the kernel cannot add servers)", name)}
}

func unavailable() *apiError {
	return &apiError{status: http.StatusServiceUnavailable, kind: kindUnavailable,
		message: "the tool server is shutting down"}
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, start time.Time, e *apiError) {
	level := slog.LevelInfo
	if e.kind == kindInternal || e.kind == kindForbidden || e.kind == kindUnauthorized {
		level = slog.LevelWarn
	}
	s.log.Log(context.Background(), level, "toolserver: request failed", "path", r.URL.Path,
		"kind", e.kind, "message", e.message, "dur", time.Since(start))
	if e == errClientGone {
		return
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"kind": e.kind, "message": e.message}})
	writeJSON(w, e.status, body)
}
