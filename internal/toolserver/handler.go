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
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
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
		release, aerr := s.admit(w, r)
		if aerr != nil {
			s.writeError(w, r, start, aerr)
			return
		}
		defer release()
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

// admit holds a request with a body until this server and the process can
// hold its body: one of MaxConcurrentCalls, and its Content-Length (or
// MaxBodyBytes when it sends none) of MaxHeldBytes and of the process's
// budget. The body is not read while it waits: the bytes stay in the
// kernel's socket. A request that finds too many waiting already is
// answered "busy" at once. release gives everything back; call it once the
// answer is written, when nothing of the body is held any more.
func (s *Server) admit(w http.ResponseWriter, r *http.Request) (release func(), _ *apiError) {
	n := r.ContentLength
	if n > s.opts.MaxBodyBytes {
		return nil, s.tooLarge()
	}
	if n < 0 {
		n = s.opts.MaxBodyBytes
	}
	if s.waiting.Add(1) > int64(s.maxWaiting()) {
		s.waiting.Add(-1)
		// Read the body away (it is not kept), so that the kernel reads
		// the answer instead of a broken pipe.
		io.Copy(io.Discard, http.MaxBytesReader(nil, r.Body, s.opts.MaxBodyBytes))
		return nil, &apiError{status: http.StatusTooManyRequests, kind: kindBusy,
			message: fmt.Sprintf("the tool server already holds %d requests of this kernel and has %d more waiting, its limits; wait for some to finish, or pass large data through files in the workspace",
				s.opts.MaxConcurrentCalls, s.maxWaiting())}
	}
	defer s.waiting.Add(-1)
	ctx := r.Context()
	gone := func() *apiError {
		if s.ctx.Err() != nil {
			return unavailable()
		}
		return errClientGone
	}
	if s.calls.acquire(ctx, 1) != nil {
		return nil, gone()
	}
	if s.bytes.acquire(ctx, n) != nil {
		s.calls.release(1)
		return nil, gone()
	}
	total := totalBodies()
	if total.acquire(ctx, n) != nil {
		s.bytes.release(n)
		s.calls.release(1)
		return nil, gone()
	}
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyReadTimeout))
	return func() {
		total.release(n)
		s.bytes.release(n)
		s.calls.release(1)
	}, nil
}

// maxWaiting is how many requests may wait to be admitted.
func (s *Server) maxWaiting() int { return 4 * s.opts.MaxConcurrentCalls }

func (s *Server) tooLarge() *apiError {
	return &apiError{status: http.StatusRequestEntityTooLarge, kind: kindBadRequest,
		message: fmt.Sprintf("request body is over the limit of %d bytes; pass large data through files in the workspace", s.opts.MaxBodyBytes)}
}

// readBody reads the admitted body whole, into a buffer of its declared
// length when it has one, and checks that it is JSON in valid UTF-8.
func (s *Server) readBody(r *http.Request) ([]byte, *apiError) {
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		return nil, &apiError{status: http.StatusUnsupportedMediaType, kind: kindBadRequest,
			message: fmt.Sprintf("Content-Type %q is not accepted; send application/json", ct)}
	}
	var body []byte
	var err error
	if r.ContentLength >= 0 {
		// admit checked the length against MaxBodyBytes; net/http ends
		// the body there.
		body = make([]byte, r.ContentLength)
		_, err = io.ReadFull(r.Body, body)
	} else {
		body, err = io.ReadAll(http.MaxBytesReader(nil, r.Body, s.opts.MaxBodyBytes))
	}
	if err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			return nil, s.tooLarge()
		}
		return nil, badRequest("read request body: %v", err)
	}
	// encoding/json silently replaces invalid UTF-8; refuse it instead,
	// so that what is approved is exactly what was sent.
	if !utf8.Valid(body) {
		return nil, badRequest("request body is not valid UTF-8")
	}
	return body, nil
}

// fields decodes body as one JSON object whose members are each one of
// known (no other, nothing after the object), without decoding the
// members' values: each is a copy of its raw text, so that a value the
// host only passes on (a tool call's args) is never turned into Go maps
// and slices, which take tens of times its size.
func fields(body []byte, known ...string) (map[string]json.RawMessage, *apiError) {
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&m); err != nil {
		return nil, badRequest("decode request body: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, badRequest("request body has data after the JSON object")
	}
	if m == nil {
		return nil, badRequest("request body is null; send a JSON object")
	}
	for k := range m {
		if !slices.Contains(known, k) {
			return nil, badRequest("decode request body: json: unknown field %q", k)
		}
	}
	return m, nil
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
