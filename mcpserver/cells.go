package mcpserver

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/kernel"
)

// A client can stop a cell, and is never left waiting on a session
// without a word (issue 35):
//
//   - interrupt(session) stops the session's running cell: its open
//     approvals are rejected, the kernel is interrupted and keeps its
//     state, and the cell's result says it was interrupted. The cell's
//     result goes to the request that waits for it, and to interrupt's.
//   - notifications/cancelled for a request that waits for a cell (the
//     go-sdk then cancels the handler's context) does the same; the
//     session's next result says so, since the client ignores the
//     cancelled request's answer.
//   - A call on a session whose cell runs with no request waiting for it
//     (it waits on an approval no client answers, or an earlier call
//     returned after max_wait) answers at once with what is pending and
//     how to go on, instead of waiting behind the cell.
//   - execute_ipython_cell(max_wait=N) returns after N seconds with a
//     "still running" result, the cell's id and its output so far;
//     collect_cell(session) waits for more, asks the open approvals
//     again, and returns the result when the cell ends.
//
// The cells of a session are kept in the run table (runs.go), oldest first, from their
// start until a request took the result (or keepFinished after their
// end).

// Why a cell was interrupted.
const (
	byInterruptTool = "by the interrupt tool"
	byCancel        = "because the client cancelled its call"
)

// interruptedError is the error of a cell that was interrupted on
// purpose: the kernel kept its state, unless the cell ignored the
// interrupt (restarted: the kernel was restarted).
type interruptedError struct {
	why       string
	at        time.Time
	restarted bool
}

func (e *interruptedError) Error() string {
	if e.restarted {
		return fmt.Sprintf("the cell was interrupted %s at %s; it ignored the interrupt, so the kernel was restarted and its state is lost", e.why, e.at.Format("15:04:05"))
	}
	return fmt.Sprintf("the cell was interrupted %s at %s; the kernel kept its state", e.why, e.at.Format("15:04:05"))
}

func (e *interruptedError) Unwrap() error { return context.Canceled }

// newCellID names a cell in results, for collect_cell.
func newCellID() string { return "cell_" + strings.ToLower(rand.Text()[:10]) }

// interrupt stops the cell, saying why, unless it has ended.
func (c *cellRun) interrupt(why string) {
	c.mu.Lock()
	if c.done || c.interrupted != "" {
		c.mu.Unlock()
		return
	}
	c.interrupted, c.interruptedAt = why, time.Now()
	c.mu.Unlock()
	c.cancel()
}

// cellErr is the cell's error as its result reports it. Called with mu
// held.
func (c *cellRun) cellErrLocked() error {
	if c.interrupted != "" && errors.Is(c.err, context.Canceled) {
		return &interruptedError{why: c.interrupted, at: c.interruptedAt, restarted: errors.Is(c.err, kernel.ErrInterruptIgnored)}
	}
	return c.err
}

// busyAnswer is the answer to a call on x while x's oldest cell runs
// with no request waiting for it, or nil when the call may wait its turn
// (no cell, or a request waits for it). The cell goes on.
func (s *Server) busyAnswer(x *session, handle string) *mcp.CallToolResult {
	c := s.runs.oldestCell(x, true)
	if c == nil {
		return nil
	}
	c.mu.Lock()
	if c.interrupted != "" && !c.done {
		// It is stopping: the call waits for its end, and then has the
		// note that says it was interrupted.
		c.mu.Unlock()
		c.waitDone(30 * time.Second)
		c.mu.Lock()
	}
	defer c.mu.Unlock()
	if c.done || c.att != nil || c.legacyHeld {
		return nil
	}
	asks, deadline := c.openAsks(time.Now())
	arg := ""
	if handle != "" {
		arg = fmt.Sprintf("session=%q", handle)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[ipybox: this code did not run. The session's cell %s (started %s) still runs, and no request waits for it", c.id, c.start.Format("15:04:05"))
	if c.task != "" {
		fmt.Fprintf(&b, "; it runs as task %s: poll tasks/get for its result, or tasks/cancel to stop it (the kernel keeps its state)]", c.task)
	} else if len(asks) > 0 {
		fmt.Fprintf(&b, ": it waits for the client's approval of %d call(s):\n", len(asks))
		for _, a := range asks {
			fmt.Fprintf(&b, "  - %s\n", clipN(a.question.Message, 300))
		}
		fmt.Fprintf(&b, "To go on: call collect_cell(%s) to be asked again and answer; or interrupt(%s) to reject them and stop the cell (the kernel keeps its state); or wait: at %s the calls fail in the cell (ApprovalTimeoutError) and it goes on.]", arg, arg, deadline.Format("15:04:05"))
	} else {
		fmt.Fprintf(&b, ".\nTo go on: call collect_cell(%s) to wait for it and get its output and result; or interrupt(%s) to stop it (the kernel keeps its state).]", arg, arg)
	}
	res := textResult("%s", b.String())
	res.IsError = true
	pending := make([]string, 0, len(asks))
	for _, a := range asks {
		pending = append(pending, a.question.Message)
	}
	res.Meta = mcp.Meta{CellMetaKey: cellMeta{Error: &cellError{Kind: "busy", Message: b.String()}, Cell: c.id, Pending: pending}}
	return res
}

// unansweredAsks counts the open approvals of x's running cell when no
// request waits for it (list_sessions).
func (s *Server) unansweredAsks(x *session) int {
	c := s.runs.oldestCell(x, true)
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.att != nil || c.legacyHeld {
		return 0
	}
	asks, _ := c.openAsks(time.Now())
	return len(asks)
}

// clipN shortens s to n bytes, marking the cut.
func clipN(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// stillRunning is the answer of a call whose max_wait passed before the
// cell ended: the output printed since the last such answer (the whole
// output is in the final result, and what it cannot show in the file it
// names), and how to go on.
func (c *cellRun) stillRunning(handle string) *mcp.CallToolResult {
	// The output is now shown in parts, each cut to max_output_chars:
	// whatever the result cannot show goes to the file it names.
	if c.sp != nil {
		c.sp.lower(c.maxChars)
	}
	c.mu.Lock()
	out := c.recent.String()
	c.recent.Reset()
	c.mu.Unlock()
	arg := ""
	if handle != "" {
		arg = fmt.Sprintf("session=%q", handle)
	}
	note := fmt.Sprintf("[ipybox: cell %s still runs (started %s, %s ago); the output above is what it printed since the last answer. Call collect_cell(%s) to wait for more and get its result, or interrupt(%s) to stop it (the kernel keeps its state). Until it ends, other calls on this session answer at once that it runs.]",
		c.id, c.start.Format("15:04:05"), time.Since(c.start).Round(time.Second), arg, arg)
	text := truncate(out, c.maxChars)
	if text != "" && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	res := textResult("%s%s", text, note)
	res.Meta = mcp.Meta{CellMetaKey: cellMeta{Text: truncate(out, c.maxChars), Cell: c.id, Running: true}}
	return res
}

// maxRecent bounds the output kept for the next "still running" answer
// (its tail); the final result has all of it.
const maxRecent = 1 << 20

// keepRecent adds text to the output of the next "still running" answer.
// Called with mu held.
func (c *cellRun) keepRecentLocked(text string) {
	c.recent.WriteString(text)
	if c.recent.Len() > maxRecent {
		tail := c.recent.String()[c.recent.Len()-maxRecent/2:]
		c.recent.Reset()
		c.recent.WriteString("...\n" + tail)
	}
}

type collectArgs struct {
	Session string  `json:"session"`
	Wait    float64 `json:"wait"`
}

type interruptArgs struct {
	Session string `json:"session"`
}

const (
	defaultCollectWait = 60
	maxCollectWait     = 3600
)

// addClientTools adds interrupt and collect_cell.
func (s *Server) addClientTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "interrupt",
		Title:       "Interrupt the running cell",
		Description: `Stop the cell that runs in a session, as Ctrl-C would: the kernel keeps its variables, the cell's open approval questions are rejected, and its result (returned here too) says it was interrupted. Use it for a cell that takes too long, or that waits on an approval you cannot answer. Without a running cell it does nothing.` + threadHandle,
		InputSchema: schema(`{"type": "object", "properties": {` + sessionProp + `}, "additionalProperties": false}`),
		Annotations: &mcp.ToolAnnotations{Title: "Interrupt the running cell", DestructiveHint: boolPtr(true), IdempotentHint: true, OpenWorldHint: boolPtr(false)},
	}, s.interruptTool)
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "collect_cell",
		Title:       "Wait for a running cell",
		Description: `Wait for the cell that runs in a session with no call waiting for it (execute_ipython_cell returned "still running" after its max_wait, or a call was left on an approval question): returns its result when it ends, or after wait seconds its output since the last answer and "still running" again. Open approval questions are asked again. Call it until it returns the result.` + threadHandle,
		InputSchema: schema(`{
  "type": "object",
  "properties": {
    "wait": {"type": "number", "exclusiveMinimum": 0, "maximum": 3600, "default": 60, "description": "Seconds to wait for the cell's end before answering that it still runs. Default 60."},
    ` + sessionProp + `
  },
  "additionalProperties": false
}`),
		Annotations: &mcp.ToolAnnotations{Title: "Wait for a running cell", ReadOnlyHint: true, OpenWorldHint: boolPtr(false)},
	}, s.collectTool)
}

func (s *Server) interruptTool(ctx context.Context, req *mcp.CallToolRequest, a interruptArgs) (*mcp.CallToolResult, any, error) {
	x, _, _, done, err := s.useSession(ctx, req, a.Session, false)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	c := s.runs.oldestCell(x, true)
	if c == nil {
		return textResult("No cell runs in this session; nothing was interrupted."), nil, nil
	}
	c.interrupt(byInterruptTool)
	if !c.waitDone(30 * time.Second) {
		return nil, nil, fmt.Errorf("cell %s was interrupted but has not ended within 30s; the kernel may be stuck in code that ignores interrupts: reset(session) starts a fresh one", c.id)
	}
	res := c.result()
	c.mu.Lock()
	took := c.att == nil
	c.mu.Unlock()
	if took {
		// No request waits for it: this answer is its result.
		s.runs.forgetCell(c)
		s.runs.dropRun(c)
	}
	res.IsError = false
	return res, nil, nil
}

func (s *Server) collectTool(ctx context.Context, req *mcp.CallToolRequest, a collectArgs) (*mcp.CallToolResult, any, error) {
	if req.Params.RequestState != "" {
		res, err := s.resumeCell(ctx, req)
		return res, nil, err
	}
	if a.Wait == 0 {
		a.Wait = defaultCollectWait
	}
	if a.Wait < 0 || a.Wait > maxCollectWait {
		return nil, nil, fmt.Errorf("wait %v: want seconds between 0 and %d", a.Wait, maxCollectWait)
	}
	x, _, ctx, done, err := s.useSession(ctx, req, a.Session, false)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	c := s.runs.oldestCell(x, false)
	if c == nil {
		return textResult("No cell of this session runs or waits to be collected."), nil, nil
	}
	c.mu.Lock()
	busy := c.att != nil || c.legacyHeld
	c.mu.Unlock()
	if busy {
		return nil, nil, fmt.Errorf("another call waits for cell %s; wait for that call, or interrupt(session) to stop the cell", c.id)
	}
	s.runs.rearm(c, req)
	res, err := s.awaitFor(ctx, c, c.attach(ctx, req), time.Duration(a.Wait*float64(time.Second)), a.Session)
	return res, nil, err
}
