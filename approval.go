package ipybox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ipybox/ipybox/internal/approvaltext"
	"github.com/ipybox/ipybox/internal/cellctl"
	"github.com/ipybox/ipybox/internal/escape"
	"github.com/ipybox/ipybox/internal/toolserver"
)

// The kinds of [ApprovalRequest].
const (
	kindTool  = "tool"  // a call of an MCP tool from kernel code
	kindShell = "shell" // a shell command through IPython
)

// ApprovalRequest asks the application whether a tool call, or a shell
// command, from the running cell may go ahead. Stream yields it; the
// consumer answers with Accept or Reject, at once or later from any
// goroutine. Until then the call waits, and the cell's timeout is paused.
//
// A request that is not answered within Options.ApprovalTimeout raises
// ApprovalTimeoutError in the cell. A request still open when the consumer
// stops iterating, or when the cell ends, is rejected.
type ApprovalRequest struct {
	// Kind is "tool" (a call of an MCP tool from kernel code) or "shell"
	// (a shell command through IPython).
	Kind string
	// Server, Tool and Args describe a tool call (Kind "tool"). Server is
	// the registered name; Tool is the tool's original MCP name. Args is
	// the JSON object that kernel code sent, byte for byte as it goes to
	// the MCP server; an application that looks inside decodes what it
	// needs (json.Unmarshal into a struct), and must not modify it. It is
	// not decoded for you: kernel code chooses it, up to 16 MiB, and as Go
	// maps and slices that would take tens of times as much memory.
	Server string
	Tool   string
	Args   json.RawMessage
	// Command is the exact shell command that will run (Kind "shell"),
	// after IPython's expansion. Script magics carry their magic line:
	// "%%bash --out x\n<script>".
	Command string
	// Deadline is when the request stops waiting and the call fails with
	// ApprovalTimeoutError: Options.ApprovalTimeout from the request, or
	// the cell's remaining time (ExecOptions.Timeout), whichever comes
	// first. Zero when neither bounds it.
	Deadline time.Time
	// Why says why the application is asked, for the person who decides:
	// the ask rule of Options.ApprovalPolicy that matched (its ID, its
	// text, and its file and line), or "no rule matched". Empty without
	// an approval policy.
	Why string

	exec    *Executor // the Executor that asks, for remembered answers
	askRule bool      // an ask rule matched

	mu         sync.Mutex
	decided    bool
	answer     Answer
	remembered []string   // the rules the answer added
	decision   chan error // receives nil (accept) or a *toolserver.RejectedError
	verdict    verdict    // how the policy's audit saw the decision, for tracing
}

// ErrNotPending is returned by Accept and Reject for a request that has no
// call waiting on it: a request made by hand rather than yielded by
// Stream, or one already decided.
var ErrNotPending = errors.New("ipybox: no call waits on this approval request (it was not yielded by Stream, or it was already decided)")

// Accept lets the call run, this once. Only the first Accept, Reject or
// Answer counts; a later one, or one on a request that Stream did not
// yield, returns ErrNotPending.
func (r *ApprovalRequest) Accept() error { return r.Answer(Answer{Accept: true}) }

// Reject refuses the call, this once; kernel code sees
// ApprovalRejectedError with reason. Only the first Accept, Reject or
// Answer counts; a later one, or one on a request that Stream did not
// yield, returns ErrNotPending.
func (r *ApprovalRequest) Reject(reason string) error {
	return r.Answer(Answer{Reason: reason})
}

// abandon refuses the call for ipybox (a timeout, the end of the cell);
// the audit log says that nobody decided.
func (r *ApprovalRequest) abandon(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.decision == nil || r.decided {
		return
	}
	r.decided = true
	r.decision <- &toolserver.RejectedError{Reason: reason} // bound: buffered, and sent once (decided)
}

// ApproveAll is an Options.Approver that accepts every request: the named
// opt-out from approval for Execute, as upstream ipybox's execute() does.
// Without the sandbox, approvals are advice anyway (kernel code has the
// user's rights); with it, ApproveAll lets kernel code call every
// registered server and run every shell command.
func ApproveAll(context.Context, *ApprovalRequest) error { return nil }

// errNoApprover is the rejection of Execute without an Approver.
const errNoApprover = "no Options.Approver is set, so Execute rejects every call that needs approval; " +
	"set Options.Approver (ipybox.ApproveAll to let every call run), or answer the requests through Stream"

// String describes the request for a person deciding on it: kernel code
// chose the command and the arguments, so they are escaped, and a long or
// many-lined one is summarised with its first and last lines and what is
// left out between.
func (r *ApprovalRequest) String() string {
	if r.Kind == kindShell {
		return "shell command:\n" + approvaltext.Command(r.Command)
	}
	call := escape.Text(r.Server) + "." + escape.Text(r.Tool)
	if len(r.Args) <= 200 && !bytes.ContainsAny(r.Args, "\n\r") {
		return "tool call " + call + "(" + escape.Text(string(r.Args)) + ")"
	}
	return "tool call " + call + " with arguments:\n" + approvaltext.Args(r.Args)
}

// cell is the execution that currently runs, as the approval path sees it.
type cell struct {
	calls   chan cellctl.Call        // to the Stream loop
	deliver func(r *ApprovalRequest) // runs on the Stream loop
	done    chan struct{}            // closed when the cell's Stream ends
	budget  *cellctl.Budget
	span    trace.SpanContext // the cell's span (invalid: not traced)

	mu      sync.Mutex
	pending map[*ApprovalRequest]struct{}
}

func (c *cell) track(r *ApprovalRequest, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if on {
		c.pending[r] = struct{}{}
	} else {
		delete(c.pending, r)
	}
}

// rejectPending rejects every open request of the cell.
func (c *cell) rejectPending(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for r := range c.pending {
		r.abandon(reason)
	}
}

// approver is the toolserver.Approver of an Executor: it routes each
// request to the cell that is running, as an event of its Stream.
type approver struct{ e *Executor }

func (a approver) ApproveTool(ctx context.Context, c *toolserver.ToolCall) error {
	return a.e.approve(ctx, &ApprovalRequest{Kind: kindTool, Server: c.Server, Tool: c.Tool, Args: c.Args})
}

func (a approver) ApproveShell(ctx context.Context, command string) error {
	return a.e.approve(ctx, &ApprovalRequest{Kind: kindShell, Command: command})
}

var errNoCell = &toolserver.RejectedError{Reason: "no cell is running: calls from threads that outlive their cell are not approved"}

// ask delivers r to the running cell's consumer and waits for the decision,
// the approval timeout (ctx, set by the tool server), or the end of the
// cell. answered reports that the error (or nil) is the consumer's answer.
func (e *Executor) ask(ctx context.Context, r *ApprovalRequest) (err error, answered bool) {
	e.cellMu.Lock()
	c := e.cur
	e.cellMu.Unlock()
	if c == nil {
		return errNoCell, false
	}
	// A decision cannot outlast the cell's remaining time either.
	if c.budget != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, max(c.budget.Remaining(), time.Millisecond))
		defer cancel()
	}
	if d, ok := ctx.Deadline(); ok {
		r.Deadline = d
	}
	r.decision = make(chan error, 1)
	c.track(r, true)
	defer c.track(r, false)
	// The time spent waiting for the application does not count against
	// the cell's budget; the budget resumes however the wait ends.
	if c.budget != nil {
		c.budget.Pause()
		defer c.budget.Resume()
	}
	select {
	case c.calls <- cellctl.Call{After: toolserver.SyncMarker(ctx), Run: func() { c.deliver(r) }}:
	case <-c.done:
		return errNoCell, false
	case <-ctx.Done():
		return approvalCtxErr(ctx), false
	}
	select {
	case err := <-r.decision:
		r.mu.Lock()
		answered = r.answer.By != ""
		r.mu.Unlock()
		return err, answered
	case <-c.done:
		return &toolserver.RejectedError{Reason: "the cell ended before the call was approved"}, false
	case <-ctx.Done():
		r.abandon("approval timed out")
		return approvalCtxErr(ctx), false
	}
}

func approvalCtxErr(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return toolserver.ErrApprovalTimeout
	}
	return &toolserver.RejectedError{Reason: "the call was abandoned"}
}
