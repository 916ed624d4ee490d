package ipybox

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/telemetry"
	"github.com/ipybox/ipybox/internal/toolserver"
)

// Remote is a connection to an `ipybox mcp` server, whose kernels live in
// sessions behind handles (MCP 2026-07-28). A session outlives the
// connection that made it: a program that keeps its handle reconnects to
// its kernel, with its variables, through a new Remote (RemoteSession
// from Session(handle)), until the session is closed or idles out on the
// server.
//
//	r, err := ipybox.Dial(ctx, "http://127.0.0.1:8080/mcp", &ipybox.RemoteOptions{Token: tok})
//	s, err := r.CreateSession(ctx)   // s.Handle() is the handle to keep
//	res, err := s.Execute(ctx, "x = 42", nil)
//	// later, from another process:
//	s = r2.Session(handle)
//	res, err = s.Execute(ctx, "print(x)", nil)
//
// A Remote is safe for concurrent use. Close it when done: that closes
// the connection, not the sessions.
type Remote struct {
	cs   *mcp.ClientSession
	opts RemoteOptions
	// closing ends with Close: it cancels the calls in flight, which the
	// go-sdk's Close would otherwise wait for.
	closing context.Context
	closed  context.CancelFunc

	mu      sync.Mutex
	streams map[string]*outputQueue // by progress token
}

// RemoteOptions configures [Dial]. A nil *RemoteOptions means the
// defaults.
type RemoteOptions struct {
	// Token is the bearer token the server requires over HTTP (a line of
	// its --auth-token-file); the server's sessions are that principal's.
	// Empty sends none.
	Token string
	// HTTPClient makes Dial's requests. Nil means http.DefaultClient.
	HTTPClient *http.Client
	// Transport, when set, is how Dial reaches the server instead of
	// streamable HTTP to its url (which is then ignored, as are Token and
	// HTTPClient): for example an mcp.CommandTransport that runs `ipybox
	// mcp`, whose sessions then end with that process. Nil means HTTP.
	Transport mcp.Transport
	// Approver decides the approval requests of RemoteSession.Execute, as
	// Options.Approver does for Executor.Execute. Nil rejects every one.
	// (Stream yields them instead.)
	Approver func(ctx context.Context, r *ApprovalRequest) error
}

// remoteProtocol is the MCP revision Remote speaks: handles, and
// approvals as multi round-trip results.
const remoteProtocol = "2026-07-28"

// The keys of ipybox mcp's structured results (mcpserver.CellMetaKey,
// ApprovalMetaKey, StreamMetaKey and ReasonMetaKey).
const (
	cellMetaKey     = "ipybox/cell"
	approvalMetaKey = "ipybox/approval"
	streamMetaKey   = "ipybox/stream"
	reasonMetaKey   = "ipybox/reason"
)

// Dial connects to an `ipybox mcp --http` server at url (its /mcp
// endpoint), or over [RemoteOptions].Transport.
func Dial(ctx context.Context, url string, opts *RemoteOptions) (*Remote, error) {
	var o RemoteOptions
	if opts != nil {
		o = *opts
	}
	if o.Transport != nil {
		return dialTransport(ctx, o.Transport, &o)
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	if o.Token != "" {
		c := *hc
		c.Transport = bearer{token: o.Token, base: hc.Transport}
		hc = &c
	}
	return dialTransport(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, DisableStandaloneSSE: true}, &o)
}

// dialTransport connects to an ipybox mcp server over t.
func dialTransport(ctx context.Context, t mcp.Transport, opts *RemoteOptions) (*Remote, error) {
	r := &Remote{streams: map[string]*outputQueue{}}
	r.closing, r.closed = context.WithCancel(context.Background())
	if opts != nil {
		r.opts = *opts
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "ipybox-go", Version: "1"}, &mcp.ClientOptions{
		// Declares elicitation, so that the server asks about approvals
		// rather than rejecting them; the questions come as input-required
		// results, which Stream answers.
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "decline"}, nil
		},
		ProgressNotificationHandler: r.progress,
		// Stream makes the rounds itself: the client's own loop has a cap,
		// and a cell may ask about many calls.
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
	})
	// A call made under a span carries its traceparent in _meta: the
	// server's cell is its child (when the server traces).
	c.AddSendingMiddleware(telemetry.InjectMeta)
	cs, err := c.Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: remoteProtocol})
	if err != nil {
		return nil, fmt.Errorf("ipybox: connecting to ipybox mcp: %w", err)
	}
	if v := cs.InitializeResult().ProtocolVersion; v < remoteProtocol {
		cs.Close()
		return nil, fmt.Errorf("ipybox: the server speaks MCP %s; sessions by handle need %s (an ipybox mcp of this version or newer)", v, remoteProtocol)
	}
	r.cs = cs
	return r, nil
}

// Close closes the connection. The server's sessions go on.
//
// A call in flight (a cell's Execute or Stream, waiting for its cell) ends
// with an error: its cell is interrupted, as when its ctx ends, and the
// kernel keeps its state. Close does not wait for the cell.
func (r *Remote) Close() error {
	r.closed()
	return r.cs.Close()
}

// callTool is r.cs.CallTool, cancelled by Close.
func (r *Remote) callTool(ctx context.Context, params *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(r.closing, cancel)
	defer stop()
	return r.cs.CallTool(ctx, params)
}

// RemoteSession is a session of an ipybox mcp server: a kernel behind a
// handle.
type RemoteSession struct {
	r      *Remote
	handle string
}

// CreateSession makes a session on the server. Its kernel starts at its
// first cell.
func (r *Remote) CreateSession(ctx context.Context) (*RemoteSession, error) {
	var out struct {
		Session string `json:"session"`
	}
	if err := r.callStructured(ctx, "create_session", map[string]any{}, &out); err != nil {
		return nil, err
	}
	if out.Session == "" {
		return nil, errors.New("ipybox: create_session returned no handle")
	}
	return &RemoteSession{r: r, handle: out.Session}, nil
}

// Session returns the session of handle, from this or an earlier
// connection, without a round trip: a handle that is not a live session
// of this principal fails at the first call.
func (r *Remote) Session(handle string) *RemoteSession {
	return &RemoteSession{r: r, handle: handle}
}

// RemoteSessionInfo describes one session of Remote.Sessions.
type RemoteSessionInfo struct {
	Handle   string
	Created  time.Time
	LastUsed time.Time
	// Kernel is true once its kernel has started (at its first cell).
	Kernel bool
	// Busy is true while a call or a cell runs in it.
	Busy bool
}

// Sessions lists the live sessions of this connection's principal, oldest
// first.
func (r *Remote) Sessions(ctx context.Context) ([]RemoteSessionInfo, error) {
	var out struct {
		Sessions []struct {
			Session  string `json:"session"`
			Created  string `json:"created"`
			LastUsed string `json:"last_used"`
			Kernel   bool   `json:"kernel"`
			Busy     bool   `json:"busy"`
		} `json:"sessions"`
	}
	if err := r.callStructured(ctx, "list_sessions", map[string]any{}, &out); err != nil {
		return nil, err
	}
	var list []RemoteSessionInfo
	for _, s := range out.Sessions {
		info := RemoteSessionInfo{Handle: s.Session, Kernel: s.Kernel, Busy: s.Busy}
		info.Created, _ = time.Parse(time.RFC3339, s.Created)
		info.LastUsed, _ = time.Parse(time.RFC3339, s.LastUsed)
		list = append(list, info)
	}
	return list, nil
}

// Handle returns the session's handle: keep it to come back to the kernel.
func (s *RemoteSession) Handle() string { return s.handle }

// Close ends the session on the server: its kernel stops and the handle is
// unknown from then on.
func (s *RemoteSession) Close(ctx context.Context) error {
	_, err := s.r.callText(ctx, "close_session", map[string]any{"session": s.handle})
	return err
}

// Reset gives the session a fresh kernel; files, installed packages and
// registered servers stay.
func (s *RemoteSession) Reset(ctx context.Context) error {
	_, err := s.r.callText(ctx, "reset", map[string]any{"session": s.handle})
	return err
}

// Execute runs code in the session and returns its result, as
// Executor.Execute does; RemoteOptions.Approver decides its approval
// requests.
func (s *RemoteSession) Execute(ctx context.Context, code string, opts *ExecOptions) (*Result, error) {
	return collect(s.Stream(ctx, code, opts), func(r *ApprovalRequest) {
		if s.r.opts.Approver == nil {
			r.Reject("no RemoteOptions.Approver is set, so Execute rejects every call that needs approval; set one, or answer the requests through Stream")
		} else if err := s.r.opts.Approver(ctx, r); err != nil {
			r.Reject(err.Error())
		} else {
			r.Accept() // bound: records the answer, and returns
		}
	})
}

// Stream runs code in the session and yields its events as Executor.Stream
// does: *Output as the cell prints, *ApprovalRequest for each tool call or
// shell command the server asks about (answer each, at once or later;
// the cell waits at the call until all of a round are answered), then the
// *Result, and for a Python error or a timeout the error after it.
// Stopping early interrupts a running cell and rejects open approvals.
func (s *RemoteSession) Stream(ctx context.Context, code string, opts *ExecOptions) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		if opts != nil && opts.Timeout < 0 {
			yield(nil, errors.New("ipybox: ExecOptions.Timeout is negative"))
			return
		}
		timeout := 86400.0 // the server's most: no limit
		if opts != nil && opts.Timeout > 0 {
			timeout = opts.Timeout.Seconds()
		}
		token, q := s.r.register()
		defer s.r.unregister(token)
		params := &mcp.CallToolParams{Name: "execute_ipython_cell", Arguments: map[string]any{
			"code": code, "session": s.handle, "timeout": timeout, "max_output_chars": 10_000_000,
		}}
		params.SetProgressToken(token)
		for {
			res, ok, err := s.r.call(ctx, params, q, yield)
			if !ok {
				return
			}
			if err != nil {
				yield(nil, fmt.Errorf("ipybox: execute_ipython_cell: %w", err))
				return
			}
			if !res.NeedsInput() {
				r, chunks, err := cellOutcome(res, timeout)
				// The notifications may come after the result: wait for
				// the ones the server says it sent.
				q.wait(chunks, 10*time.Second)
				for _, o := range q.take() {
					if !yield(o, nil) {
						return
					}
				}
				if r != nil && !yield(r, nil) {
					return
				}
				if err != nil {
					yield(nil, err)
				}
				return
			}
			answers, ok := s.ask(ctx, res, yield)
			if !ok {
				s.r.abandon(params, res, answers)
				return
			}
			next := *params
			next.InputResponses, next.RequestState = answers, res.RequestState
			params = &next
		}
	}
}

// ask yields the approval requests of an input-required result and waits
// for every decision. It reports false when the consumer stopped, or ctx
// ended; the answers then hold what was decided.
func (s *RemoteSession) ask(ctx context.Context, res *mcp.CallToolResult, yield func(Event, error) bool) (mcp.InputResponseMap, bool) {
	answers := mcp.InputResponseMap{}
	type open struct {
		id string
		r  *ApprovalRequest
	}
	var asked []open
	for id, ir := range res.InputRequests {
		ep, ok := ir.(*mcp.ElicitParams)
		if !ok {
			answers[id] = &mcp.ElicitResult{Action: "decline"}
			continue
		}
		r := approvalFromMeta(ep.Meta[approvalMetaKey])
		if r == nil {
			// Not an approval of ipybox's: refuse rather than guess.
			answers[id] = &mcp.ElicitResult{Action: "decline"}
			continue
		}
		r.decision = make(chan error, 1)
		asked = append(asked, open{id, r})
	}
	for _, a := range asked {
		if !yield(a.r, nil) {
			return answers, false
		}
	}
	for _, a := range asked {
		select {
		case err := <-a.r.decision:
			var rej *toolserver.RejectedError
			if err == nil {
				answers[a.id] = &mcp.ElicitResult{Action: "accept", Content: map[string]any{}}
			} else if errors.As(err, &rej) {
				answers[a.id] = &mcp.ElicitResult{Action: "decline", Meta: mcp.Meta{reasonMetaKey: rej.Reason}}
			}
		case <-ctx.Done():
			return answers, false
		}
	}
	return answers, true
}

// approvalFromMeta reads an approval's structured form.
func approvalFromMeta(v any) *ApprovalRequest {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var m struct {
		Kind    string          `json:"kind"`
		Server  string          `json:"server"`
		Tool    string          `json:"tool"`
		Args    json.RawMessage `json:"args"`
		Command string          `json:"command"`
	}
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	switch m.Kind {
	case kindTool:
		return &ApprovalRequest{Kind: kindTool, Server: m.Server, Tool: m.Tool, Args: m.Args}
	case kindShell:
		return &ApprovalRequest{Kind: kindShell, Command: m.Command}
	}
	return nil
}

// call makes one round of a cell's call, yielding its output as it comes.
// ok is false when the consumer stopped (the call is then cancelled,
// which interrupts the cell).
func (r *Remote) call(ctx context.Context, params *mcp.CallToolParams, q *outputQueue, yield func(Event, error) bool) (*mcp.CallToolResult, bool, error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := r.callTool(cctx, params)
		done <- outcome{res, err} // bound: buffered
	}()
	for {
		// bound: done comes when CallTool returns, which cctx (the
		// caller's ctx) bounds
		select {
		case <-q.ready:
			for _, o := range q.take() {
				if !yield(o, nil) {
					cancel()
					<-done // bound: the cancel ends CallTool
					return nil, false, nil
				}
			}
		case o := <-done:
			// The client hands notifications over before the response
			// that follows them.
			for _, out := range q.take() {
				if !yield(out, nil) {
					return nil, false, nil
				}
			}
			return o.res, true, o.err
		}
	}
}

// abandon answers what the consumer left open with a rejection, so that
// the cell does not wait for it until the approval timeout, and lets the
// cell end without waiting for it.
func (r *Remote) abandon(params *mcp.CallToolParams, res *mcp.CallToolResult, answers mcp.InputResponseMap) {
	for id := range res.InputRequests {
		if _, ok := answers[id]; !ok {
			answers[id] = &mcp.ElicitResult{Action: "decline"}
		}
	}
	next := *params
	next.InputResponses, next.RequestState = answers, res.RequestState
	next.Meta = nil
	// The retry's end interrupts the cell: give it a moment to be
	// received, then leave.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r.cs.CallTool(ctx, &next)
}

// cellOutcome reads a cell's result and error from its structured form,
// and the number of chunks of output it sent.
func cellOutcome(res *mcp.CallToolResult, timeout float64) (*Result, int, error) {
	var m struct {
		Chunks    int      `json:"chunks"`
		Text      string   `json:"text"`
		Images    []string `json:"images"`
		Truncated bool     `json:"truncated"`
		Restarted *struct {
			At    string `json:"at"`
			Cause string `json:"cause"`
		} `json:"restarted"`
		Error *struct {
			Kind      string `json:"kind"`
			Message   string `json:"message"`
			Name      string `json:"name"`
			Value     string `json:"value"`
			Traceback string `json:"traceback"`
			Restarted bool   `json:"restarted"`
		} `json:"error"`
	}
	raw, ok := res.Meta[cellMetaKey]
	b, _ := json.Marshal(raw)
	if !ok || json.Unmarshal(b, &m) != nil {
		// A refusal before the cell ran (an unknown session, a limit):
		// its text says why.
		var texts []string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				texts = append(texts, tc.Text)
			}
		}
		return nil, 0, fmt.Errorf("ipybox: %s", strings.Join(texts, "\n"))
	}
	r := &Result{Text: m.Text, Images: m.Images, Truncated: m.Truncated}
	if d := m.Restarted; d != nil {
		r.Restarted = &DiedError{Cause: d.Cause}
		r.Restarted.At, _ = time.Parse(time.RFC3339Nano, d.At)
	}
	e := m.Error
	if e == nil {
		return r, m.Chunks, nil
	}
	switch e.Kind {
	case "python":
		return r, m.Chunks, &PythonError{Name: e.Name, Value: e.Value, Traceback: strings.Split(e.Traceback, "\n")}
	case "timeout":
		return r, m.Chunks, &TimeoutError{Timeout: time.Duration(timeout * float64(time.Second)), Restarted: e.Restarted}
	case "kernel_died":
		return r, m.Chunks, fmt.Errorf("ipybox: %s: %w", e.Message, ErrKernelDied)
	case "cancelled", "interrupted":
		// interrupted: the interrupt tool stopped it (another client, or
		// a person): as a cancelled cell, the kernel kept its state.
		return r, m.Chunks, fmt.Errorf("ipybox: %s: %w", e.Message, context.Canceled)
	}
	return r, m.Chunks, fmt.Errorf("ipybox: %s", e.Message)
}

// callText calls a tool and returns its text, or its error.
func (r *Remote) callText(ctx context.Context, tool string, args map[string]any) (*mcp.CallToolResult, error) {
	res, err := r.callTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return nil, fmt.Errorf("ipybox: %s: %w", tool, err)
	}
	if res.IsError {
		var texts []string
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				texts = append(texts, tc.Text)
			}
		}
		return res, fmt.Errorf("ipybox: %s: %s", tool, strings.Join(texts, "\n"))
	}
	return res, nil
}

// callStructured calls a tool and decodes its structured content into v.
func (r *Remote) callStructured(ctx context.Context, tool string, args map[string]any, v any) error {
	res, err := r.callText(ctx, tool, args)
	if err != nil {
		return err
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return fmt.Errorf("ipybox: %s: %w", tool, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("ipybox: %s: structured result: %w", tool, err)
	}
	return nil
}

// outputQueue holds the output of one Stream, as the client receives it.
// Its handler never blocks: a cell may print faster than a consumer reads.
type outputQueue struct {
	mu    sync.Mutex
	out   []*Output
	n     int           // chunks put, ever
	ready chan struct{} // has a value when out is not empty
}

func (q *outputQueue) put(o *Output) {
	q.mu.Lock()
	q.out = append(q.out, o)
	q.n++
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// wait waits, at most d, until n chunks have been put (they are usually
// there already).
func (q *outputQueue) wait(n int, d time.Duration) {
	for deadline := time.Now().Add(d); ; time.Sleep(2 * time.Millisecond) {
		q.mu.Lock()
		got := q.n
		q.mu.Unlock()
		if got >= n || time.Now().After(deadline) {
			return
		}
	}
}

func (q *outputQueue) take() []*Output {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.out
	q.out = nil
	return out
}

// register makes the progress token and queue of one Stream.
func (r *Remote) register() (string, *outputQueue) {
	token := "ipybox-" + rand.Text()
	q := &outputQueue{ready: make(chan struct{}, 1)}
	r.mu.Lock()
	r.streams[token] = q
	r.mu.Unlock()
	return token, q
}

func (r *Remote) unregister(token string) {
	r.mu.Lock()
	delete(r.streams, token)
	r.mu.Unlock()
}

// progress takes a progress notification: one with a stream in its _meta
// is a chunk of output.
func (r *Remote) progress(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	token, _ := req.Params.ProgressToken.(string)
	stream, _ := req.Params.Meta[streamMetaKey].(string)
	if token == "" || stream == "" {
		return
	}
	r.mu.Lock()
	q := r.streams[token]
	r.mu.Unlock()
	if q != nil {
		q.put(&Output{Stream: stream, Text: req.Params.Message})
	}
}

// bearer adds the token to every request.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	base := b.base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}
