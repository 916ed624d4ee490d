package mcpserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/telemetry"
)

// Approvals as multi round-trip results (SEP-2322).
//
// A cell runs in a goroutine of its own (cellRun.pump), behind the
// requests that wait for it. When it reaches a tool call or a shell
// command that needs the client's approval, the request that waits gets an
// input-required result: one elicitation per open approval, and a
// requestState that names the suspended cell. The cell stays suspended at
// the call (the kernel waits in the tool server). The client's retry
// brings the answers and the requestState: it decides the approvals and
// waits for the cell again, until its result or the next approval.
//
// A client that never retries leaves the cell at the call until the
// approval's deadline (--approval-timeout, or the cell's remaining time):
// the call then fails with ApprovalTimeoutError in the cell, which goes on,
// and the kernel keeps its state. The finished cell's result waits for a
// late retry for a while (keepFinished).
//
// Clients before 2026-07-28 get the same results, turned into elicitation
// requests from the server by the go-sdk (its bridge makes one round), and
// by legacyRounds (every further round, and the deadline).

// cellRun is a cell that runs on behind the requests that wait for it.
type cellRun struct {
	s         *Server
	x         *session
	principal string
	tool      string
	args      [32]byte // the digest of the canonical arguments
	maxChars  int
	start     time.Time
	cancel    context.CancelFunc // ends the cell
	id        string             // names it in results (cells.go)
	ui        *uiCell            // its history for the web page (nil: none)
	sp        *spill             // keeps its whole output (spill.go)

	// outMu orders output: the pump's deliveries, and a request's
	// attachment (which first sends what was printed while none waited).
	outMu    sync.Mutex
	backlog  []*ipybox.Output
	backlogN int
	dropped  int64

	mu        sync.Mutex // guards what follows
	att       *attachment
	asks      []*ask // approvals the client has not answered
	nasks     int
	canElicit bool // the last attached request's client can be asked
	done      bool
	res       *ipybox.Result
	err       error
	warnings  []string
	regErrs   map[string]string // servers this session could not register
	changed   chan struct{}     // closed, and replaced, at every change
	state     [32]byte          // the key of the requestState it is suspended under
	// interrupted says why the cell was interrupted on purpose, and
	// when (cells.go); recent is its output since the last "still
	// running" answer.
	interrupted   string
	interruptedAt time.Time
	// task is the id of the task the cell runs as, if any (tasks.go);
	// endedAt is when the cell ended.
	task    string
	endedAt time.Time
	recent  strings.Builder
	// legacyHeld is set while a 2025-11-25 call, between its rounds,
	// asks the client (legacyRounds): a request still waits for the cell.
	// round is that round: an answer from the web page ends it, so that
	// the call stops waiting for the client's answers (answerWeb).
	legacyHeld bool
	round      *round

	// The progress of the whole cell (see progress.send).
	progMu     sync.Mutex
	progLast   float64
	progSent   time.Time
	progLines  int
	progChunks int
}

// attachment is a request that waits for a cell.
type attachment struct {
	ctx   context.Context
	req   *mcp.CallToolRequest
	prog  *progress
	stop  func() bool // stops cancelling the cell when the request ends
	clear func()      // forgets the request as the OAuth sign-in's
}

// ask is an approval put to the client: the request, its question, and
// the form that reads the answer.
type ask struct {
	id       string
	r        *ipybox.ApprovalRequest
	question *mcp.ElicitParams
	form     *approvalForm
	// webOnly: the client cannot be asked; only the web page answers.
	webOnly bool
}

// maxBacklog bounds the output that is kept, as progress to send, while
// no request waits for the cell; the result has the whole output either
// way (its head and tail, and the spill file).
const maxBacklog = 1 << 20

// keepFinished is how long the result of a cell that ended while no
// request waited for it is kept for the client's retry.
const keepFinished = 5 * time.Minute

// argsDigest is the digest of a call's arguments in a canonical form, so
// that a retry is bound to the call it continues.
func argsDigest(name string, raw json.RawMessage) [32]byte {
	var v any
	canon := []byte(raw)
	if len(bytes.TrimSpace(raw)) > 0 && json.Unmarshal(raw, &v) == nil {
		if b, err := json.Marshal(v); err == nil {
			canon = b
		}
	}
	return sha256.Sum256(append([]byte(name+"\x00"), canon...))
}

// startCell starts code in x's executor and returns the run, with req
// attached to it.
func (s *Server) startCell(ctx context.Context, req *mcp.CallToolRequest, x *session, ex *ipybox.Executor, a executeArgs, warnings []string, regErrs map[string]string) (*cellRun, *attachment) {
	rctx, cancel := context.WithCancel(x.ctx)
	// The request's span (the traceparent in its _meta) is the cell's
	// parent, although the cell runs on the session's context.
	rctx = telemetry.WithSpanOf(rctx, ctx)
	// The result shows a head and a tail; the kernel keeps no more than
	// that in memory, and the whole output goes to a file once it is long.
	keep := max(64<<10, 8*a.MaxOutputChars)
	inMemory := keep
	if taskSlotOf(ctx) != nil {
		// A task's output is not streamed to the client (tasks.go): what
		// the result cannot show goes to the file, so none is lost.
		inMemory = a.MaxOutputChars
	}
	sp := newSpill(x.t.dir, inMemory, s.opts.SpillCellBytes, s.opts.SpillWorkspaceBytes)
	c := &cellRun{
		s: s, x: x, principal: x.principal, tool: req.Params.Name,
		args:     argsDigest(req.Params.Name, req.Params.Arguments),
		maxChars: a.MaxOutputChars, start: time.Now(), cancel: cancel,
		warnings: warnings, regErrs: regErrs, changed: make(chan struct{}),
		id: newCellID(), sp: sp,
	}
	c.ui = s.ui.cellStart(x, c.id, a.Code, ex.SessionID())
	s.runs.addCell(x, c)
	att := c.attach(ctx, req)
	timeout := time.Duration(a.Timeout * float64(time.Second))
	x.begin()
	s.ui.changed(x)
	s.wg.Add()
	go func() {
		defer s.wg.Done()
		defer s.ui.changed(x) // after x.end: the page shows the session idle
		defer x.end()
		defer cancel()
		var res *ipybox.Result
		var cellErr error
		for ev, err := range ex.Stream(rctx, a.Code, &ipybox.ExecOptions{Timeout: timeout, KeepText: keep}) {
			if err != nil {
				cellErr = err
				break
			}
			switch e := ev.(type) {
			case *ipybox.Output:
				sp.write(e.Text)
				c.ui.output(e)
				c.output(e)
			case *ipybox.Display:
				c.ui.display(e, s.imageBases(x))
			case *ipybox.ApprovalRequest:
				c.approval(e)
			case *ipybox.Result:
				res = e
			}
		}
		// Before the end is seen: the next call, which waits for it,
		// has the note.
		s.runs.noteCancelled(c, res, cellErr)
		// The checkpoint (CheckpointCell) is saved before the result is
		// sent: a result the client has is durable, as a database
		// acknowledges a commit after its fsync.
		s.afterCell(x, ex, cellErr)
		x.checkpointWait(x.ctx)
		c.ui.end(res, cellErr)
		c.finish(res, cellErr, sp.finish())
	}()
	return c, att
}

// attach makes req the request that waits for the cell: it gets the
// output printed since the last one left, then the output as it comes.
// While it is attached, its end (the client cancels, or goes away) ends the
// cell.
func (c *cellRun) attach(ctx context.Context, req *mcp.CallToolRequest) *attachment {
	att := &attachment{ctx: ctx, req: req, clear: func() {}}
	att.prog = startProgress(ctx, req, c)
	if owner := c.x.oauthOwner(); owner != nil {
		owner.set(req.Session)
		att.clear = owner.setCall(ctx)
	}
	c.outMu.Lock()
	for _, o := range c.backlog {
		c.deliver(att, o)
	}
	c.backlog, c.backlogN = nil, 0
	c.mu.Lock()
	c.att = att
	c.legacyHeld = false
	c.round = nil
	c.canElicit = canElicit(req.ClientCapabilities())
	c.mu.Unlock()
	c.outMu.Unlock()
	att.stop = context.AfterFunc(ctx, func() { c.interrupt(byCancel) })
	return att
}

// detach ends att's wait: the cell goes on without it.
func (c *cellRun) detach(att *attachment) {
	att.stop()
	c.outMu.Lock()
	c.mu.Lock()
	if c.att == att {
		c.att = nil
	}
	c.mu.Unlock()
	c.outMu.Unlock()
	att.prog.end()
	att.clear()
}

// canElicit reports whether a client with caps can be asked a form.
func canElicit(caps *mcp.ClientCapabilities) bool {
	if caps == nil || caps.Elicitation == nil {
		return false
	}
	e := caps.Elicitation
	return e.Form != nil || e.URL == nil
}

// output delivers a chunk of output to the waiting request, or keeps it
// (bounded) for the next one.
func (c *cellRun) output(o *ipybox.Output) {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	c.mu.Lock()
	att := c.att
	c.keepRecentLocked(o.Text)
	c.mu.Unlock()
	if att != nil {
		c.deliver(att, o)
		return
	}
	if c.isTask() {
		// No call will take it as progress: the task's result has it.
		return
	}
	if c.backlogN+len(o.Text) > maxBacklog {
		c.dropped += int64(len(o.Text))
		return
	}
	c.backlog = append(c.backlog, o)
	c.backlogN += len(o.Text)
}

// deliver sends a chunk of output to att: as a progress notification when
// it gave a token, and as a log message when its client asked for them.
// Called with outMu held.
func (c *cellRun) deliver(att *attachment, o *ipybox.Output) {
	att.prog.output(o)
	streamOutput(att.ctx, att.req.Session, o)
}

// quietFor returns how long ago the last progress notification went out.
func (c *cellRun) quietFor() time.Duration {
	c.progMu.Lock()
	defer c.progMu.Unlock()
	return time.Since(c.progSent)
}

// changedLocked wakes whoever waits for the run. Called with mu held.
func (c *cellRun) changedLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// approval answers what the server can answer itself (--approval auto,
// --allow-tool, a client that cannot be asked; see selfAnswer), and
// puts the rest to the client.
func (c *cellRun) approval(r *ipybox.ApprovalRequest) {
	c.mu.Lock()
	canElicit := c.canElicit
	c.mu.Unlock()
	// With the web page, a client that cannot be asked leaves the
	// question to the page.
	webOnly := !canElicit && c.s.opts.HTTP.UI
	if a, ok := c.s.selfAnswer(r, canElicit || webOnly); ok {
		c.ui.approval(r, "", approvalMessage(r))
		r.Answer(a)
		c.ui.decided(r, a)
		return
	}
	q, form := c.s.question(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Deadline.IsZero() {
		r.Deadline = time.Now().Add(elicitTimeout)
	}
	c.nasks++
	a := &ask{id: fmt.Sprintf("approval-%d", c.nasks), r: r, question: q, form: form, webOnly: webOnly}
	c.asks = append(c.asks, a)
	c.ui.approval(r, c.id+"/"+a.id, q.Message)
	c.changedLocked()
}

// finish records the cell's end. A result that no request waits for is
// kept for a late retry, then dropped.
func (c *cellRun) finish(res *ipybox.Result, err error, spillNote string) {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done, c.res, c.err, c.endedAt = true, res, err, time.Now()
	if spillNote != "" {
		c.warnings = append(c.warnings, spillNote)
	}
	if c.dropped > 0 {
		c.warnings = append(c.warnings, fmt.Sprintf("[ipybox: %d bytes of output were printed while no request waited for the cell (an approval was open) and were not sent as progress; the result has them]", c.dropped))
	}
	c.asks = nil
	// Only a running cell's answers show it; a task keeps the ended cell
	// for its ttl, and need not keep this too.
	c.recent.Reset()
	c.changedLocked()
	// Harmless if a request waits for it, or took it: it is then not
	// suspended, and a finished cell is never suspended again.
	time.AfterFunc(keepFinished, func() { c.s.runs.dropRun(c) })
}

// result is the finished cell's tool result.
func (c *cellRun) result() *mcp.CallToolResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.progMu.Lock()
	chunks := c.progChunks
	c.progMu.Unlock()
	out := cellResult(c.res, c.cellErrLocked(), c.maxChars, c.warnings, chunks)
	if len(c.regErrs) > 0 {
		m := out.Meta[CellMetaKey].(cellMeta)
		m.Unregistered = c.regErrs
		out.Meta[CellMetaKey] = m
	}
	return out
}

// openAsks drops the approvals whose deadline passed (the call failed in
// the cell with ApprovalTimeoutError) and returns the rest, with the
// earliest deadline. Called with mu held.
func (c *cellRun) openAsks(now time.Time) ([]*ask, time.Time) {
	var open []*ask
	var first time.Time
	for _, a := range c.asks {
		if !now.Before(a.r.Deadline) {
			continue
		}
		open = append(open, a)
		if first.IsZero() || a.r.Deadline.Before(first) {
			first = a.r.Deadline
		}
	}
	c.asks = open
	return open, first
}

// await waits, as att, for the cell's result or its next approval: the
// result, or an input-required result that suspends the cell.
func (s *Server) await(ctx context.Context, c *cellRun, att *attachment) (*mcp.CallToolResult, error) {
	return s.awaitFor(ctx, c, att, 0, "")
}

// awaitFor is await that, with maxWait, answers that the cell still runs
// after maxWait (cells.go); handle is the session's, for that answer.
func (s *Server) awaitFor(ctx context.Context, c *cellRun, att *attachment, maxWait time.Duration, handle string) (*mcp.CallToolResult, error) {
	var expired <-chan time.Time
	if maxWait > 0 {
		t := time.NewTimer(maxWait)
		defer t.Stop()
		expired = t.C
	}
	for {
		c.mu.Lock()
		asks, deadline := c.openAsks(time.Now())
		switch {
		case c.done:
			c.mu.Unlock()
			c.detach(att)
			s.runs.forgetCell(c)
			return c.result(), nil
		case clientAsks(asks) > 0:
			reqs := mcp.InputRequestMap{}
			for _, a := range asks {
				if !a.webOnly {
					reqs[a.id] = a.question
				}
			}
			state := handlePrefix + "state_" + rand.Text()
			c.state = handleKey(state)
			c.legacyHeld = roundOf(ctx) != nil
			c.round = roundOf(ctx)
			c.mu.Unlock()
			c.detach(att)
			s.runs.suspend(c)
			if r := roundOf(ctx); r != nil {
				r.arm(deadline, state)
			}
			return &mcp.CallToolResult{InputRequests: reqs, RequestState: state}, nil
		}
		changed := c.changed
		c.mu.Unlock()
		select {
		case <-changed:
		case <-expired:
			c.detach(att)
			return c.stillRunning(handle), nil
		case <-ctx.Done():
			// The request ended while attached, and the cell with it
			// (attach): wait for its end, which the result reports.
			defer c.detach(att)
			if !c.waitDone(30 * time.Second) {
				return nil, fmt.Errorf("the call was cancelled: %w", ctx.Err())
			}
			s.runs.forgetCell(c) // the session's next result says what happened
			return c.result(), nil
		}
	}
}

// isTask reports whether the cell runs as a task.
func (c *cellRun) isTask() bool { return c.taskID() != "" }

// taskID is the id of the task the cell runs as, or "".
func (c *cellRun) taskID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.task
}

// waitEnd waits for the cell's end, or for ctx's.
func (c *cellRun) waitEnd(ctx context.Context) {
	for {
		c.mu.Lock()
		done, changed := c.done, c.changed
		c.mu.Unlock()
		if done {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// clientAsks counts the asks the client is asked (not the web page's
// alone).
func clientAsks(asks []*ask) int {
	n := 0
	for _, a := range asks {
		if !a.webOnly {
			n++
		}
	}
	return n
}

// waitDone waits at most d for the cell's end, and reports whether it
// came.
func (c *cellRun) waitDone(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		c.mu.Lock()
		done, changed := c.done, c.changed
		c.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-changed:
		case <-t.C:
			return false
		}
	}
}

// errBadState answers a retry whose requestState is not one this server
// gave for this call.
var errBadState = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "requestState is not that of a cell waiting for this call's answers: " +
	"it was already answered, its cell ended longer ago than ipybox keeps results, or it belongs to another call or token; run the cell again"}

// resumeCell continues a suspended cell with the retry req: it decides the
// answered approvals and waits for the cell again.
func (s *Server) resumeCell(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var failed error
	if r := roundOf(ctx); r != nil {
		if !r.disarm() {
			return nil, errRoundOver
		}
		failed = r.takeFailed()
	}
	c := s.runs.takeRun(req)
	if c == nil {
		return nil, errBadState
	}
	c.x.begin()
	defer c.x.end()
	client := ""
	if ci := req.ClientInfo(); ci != nil {
		client = ci.Name
	}
	c.mu.Lock()
	var keep []*ask
	for _, a := range c.asks {
		resp, ok := req.Params.InputResponses[a.id]
		er, isElicit := resp.(*mcp.ElicitResult)
		switch {
		case failed != nil && !a.webOnly:
			failAsk(a.r, failed)
			c.ui.decided(a.r, ipybox.Answer{By: "default", Channel: elicitChannel})
		case a.webOnly || !ok || !isElicit || er == nil:
			keep = append(keep, a) // asked again
		default:
			ans, _ := settle(a.r, a.form, er, client)
			c.ui.decided(a.r, ans)
		}
	}
	c.asks = keep
	c.mu.Unlock()
	return s.await(ctx, c, c.attach(ctx, req))
}

// reasonMetaKey is the key, in the _meta of a declined approval's
// elicitation result, of the reason a program gives (the Go SDK's
// ApprovalRequest.Reject): kernel code sees it in ApprovalRejectedError.
// Without it the reason is "declined by the user".
const reasonMetaKey = "ipybox/reason"

// declineReason is why the cell is told its call was declined.
func declineReason(er *mcp.ElicitResult) string {
	if r, ok := er.Meta[reasonMetaKey].(string); ok && strings.TrimSpace(r) != "" {
		if len(r) > 1000 {
			r = r[:1000] + "..."
		}
		return r
	}
	return "declined by the user"
}

// round is one round of approvals for a client before 2026-07-28: the
// go-sdk's bridge asks the client (an elicitation request) and calls the
// tool again with the answer. It knows no deadline; arm gives it the
// approvals': the bridge's wait ends there.
type round struct {
	cancel context.CancelFunc

	mu     sync.Mutex
	failed error // the previous round's asking failed
	timer  *time.Timer
	state  string
}

type roundKey struct{}

func roundOf(ctx context.Context) *round {
	r, _ := ctx.Value(roundKey{}).(*round)
	return r
}

// arm ends the round's wait at deadline.
func (r *round) arm(deadline time.Time, state string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state = state
	if r.timer != nil {
		r.timer.Stop()
	}
	r.timer = time.AfterFunc(time.Until(deadline), r.cancel)
}

// disarm stops the deadline of an answered round; it reports false when
// the deadline came first (the round's context is then cancelled).
func (r *round) disarm() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer == nil {
		return true
	}
	ok := r.timer.Stop()
	r.timer = nil
	return ok
}

// takeFailed returns, once, why the previous round's asking failed.
func (r *round) takeFailed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.failed
	r.failed = nil
	return err
}

func (r *round) suspendedState() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

// errRoundOver ends a call whose round ran out of time as it was answered.
var errRoundOver = errors.New("the approval's time ran out")

// legacyRounds is receiving middleware for clients before 2026-07-28
// (outside the go-sdk's bridge, which answers one input-required result
// per call by asking the client and calling again): it calls again while
// the cell has more to ask, bounds each question by its approval's
// deadline, and ends the cell if the client cancels the call.
func (s *Server) legacyRounds(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ctr, ok := req.(*mcp.CallToolRequest)
		if method != "tools/call" || !ok || !legacyClient(ctr.Session) {
			return next(ctx, method, req)
		}
		orig := ctr.Params
		var failed error
		for {
			rctx, cancel := context.WithCancel(ctx)
			r := &round{cancel: cancel, failed: failed}
			res, err := next(context.WithValue(rctx, roundKey{}, r), method, req)
			expired := !r.disarm() || rctx.Err() != nil && ctx.Err() == nil
			cancel()
			state := r.suspendedState()
			failed = nil
			switch tr, _ := res.(*mcp.CallToolResult); {
			case ctx.Err() != nil:
				if state != "" {
					s.runs.cancelRun(state)
				}
				return res, err
			case err == nil && tr != nil && tr.InputRequests != nil:
				// The cell asks again (the bridge calls once).
				state = tr.RequestState
			case err != nil && state != "" && !expired:
				// Asking failed: the cell's open calls are rejected.
				failed = err
			case err != nil && state != "" && expired:
				// No answer in time: the calls failed in the cell.
			default:
				return res, err
			}
			p := *orig
			p.RequestState, p.InputResponses = state, nil
			req = &mcp.CallToolRequest{Session: ctr.Session, Params: &p, Extra: ctr.Extra}
		}
	}
}

// legacyClient reports whether ss negotiated a protocol before
// 2026-07-28, as the go-sdk's bridge decides it.
func legacyClient(ss *mcp.ServerSession) bool {
	ip := ss.InitializeParams()
	return ip != nil && ip.ProtocolVersion < "2026-07-28"
}
