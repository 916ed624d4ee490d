package mcpserver

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The Tasks extension (SEP-2663, io.modelcontextprotocol/tasks, as the
// 2026-07-28 conformance suite checks it).
//
// A client that declares the extension, in its per-request capabilities
// (_meta "io.modelcontextprotocol/clientCapabilities") or in initialize's,
// gets a task for every execute_ipython_cell call that starts a cell: the
// call answers at once with a CreateTaskResult (resultType "task", a
// taskId, ttlMs and pollIntervalMs) and the cell runs on with no request
// waiting for it. The client then:
//
//   - tasks/get: the task's status, "working"; "input_required" with the
//     cell's open approvals as inputRequests (elicitation/create, keyed as
//     in SEP-2322's results); "completed" with the cell's result inlined;
//     or "cancelled". A cell that fails is "completed" with isError, as a
//     synchronous call's result is: "failed" is for JSON-RPC errors, and a
//     started cell always has a result.
//   - tasks/update: answers (some of) the open approvals; the others stay
//     open. Answers to keys that are not open are ignored.
//   - tasks/cancel: interrupts the cell, as the interrupt tool does: the
//     kernel keeps its state, and the status becomes "cancelled" once the
//     cell has stopped (or "completed", when it ended first).
//
// tasks/result and tasks/list, of the experimental tasks of 2025-11-25,
// are gone from the extension: the go-sdk answers them -32601.
//
// A task is its principal's: another principal's tasks/get, tasks/update
// and tasks/cancel get the answer of an unknown taskId (-32602), so that
// it learns nothing of it. A principal keeps at most maxTasks tasks,
// running or finished; past that, a call that would make one fails with
// a message that says what to do. A task is kept until its ttl, which is
// the cell's timeout plus taskKeep while it runs, and taskKeep after its
// end once it has ended: its result can be fetched, again and again,
// until then. Tasks need no goroutine of their own: the cell's goroutine
// is the Server's (startCell), and expired tasks are swept on access (a
// cell whose task expires while it runs, which its timeout prevents, is
// interrupted). Lock order: taskTable.mu, then a cell's mu.
//
// The cell of a task is the session's running cell, as with max_wait:
// other calls on the session answer at once that it runs, and
// collect_cell and interrupt reach it too.

// tasksExtension is the extension's identifier.
const tasksExtension = "io.modelcontextprotocol/tasks"

const (
	// taskKeep is how long a task is kept after its cell's end.
	taskKeep = 30 * time.Minute
	// maxTasks bounds the tasks a principal keeps, running or finished.
	maxTasks = 64
	// maxTaskBytes bounds what a principal's finished tasks keep of their
	// cells' output (a cell keeps up to 8 times its max_output_chars of
	// text, and 64 tasks of 10,000,000 would keep 5 GB for 30 minutes).
	maxTaskBytes = 128 << 20
	// taskQuick is how long a call waits for its cell before it answers
	// with a task: a cell that ends sooner, with no approval asked, is
	// answered as without the extension.
	taskQuick = 2 * time.Second
	// taskPoll is the polling interval suggested to clients.
	taskPoll = 2 * time.Second
)

// Why a cell was interrupted (cells.go has the others).
const (
	byTaskCancel = "by tasks/cancel"
	byTaskExpiry = "because its task's ttl passed (the task is gone)"
)

// A task is an execute_ipython_cell call that answered with a task handle.
type task struct {
	id        string
	principal string
	created   time.Time
	timeout   time.Duration
	c         *cellRun // nil while the call that makes it starts the cell

	// guarded by taskTable.mu
	cancelled  bool
	taken      bool // its result was fetched: the session forgot the cell
	lastStatus string
	updated    time.Time
}

// taskTable is the server's tasks, by id.
type taskTable struct {
	mu    sync.Mutex
	tasks map[string]*task
	// max, maxBytes and keep are maxTasks, maxTaskBytes and taskKeep
	// (tests shorten them).
	max      int
	maxBytes int
	keep     time.Duration
	// quick is how long a call waits for its cell before it becomes a
	// task (taskQuick; the conformance fixtures' test sets 0).
	quick time.Duration
}

func newTaskTable() *taskTable {
	return &taskTable{tasks: map[string]*task{}, max: maxTasks, maxBytes: maxTaskBytes, keep: taskKeep, quick: taskQuick}
}

// expiresLocked is when t is dropped. Called with mu held.
func (tt *taskTable) expiresLocked(t *task) time.Time {
	if t.c != nil {
		t.c.mu.Lock()
		done, ended := t.c.done, t.c.endedAt
		t.c.mu.Unlock()
		if done {
			return ended.Add(tt.keep)
		}
	}
	return t.created.Add(t.timeout + tt.keep)
}

// sweepLocked drops the tasks whose ttl passed, and interrupts their
// cells if they still run. Called with mu held.
func (tt *taskTable) sweepLocked(now time.Time) {
	for id, t := range tt.tasks {
		if t.c == nil || now.Before(tt.expiresLocked(t)) {
			continue
		}
		delete(tt.tasks, id)
		t.c.interrupt(byTaskExpiry)
	}
}

// errNoTask is why a call of a client that declared the extension made
// no task: its principal keeps too many (errTooManyTasks, errTaskBytes).
// The call then runs its cell as without the extension, and says why.
var errNoTask = errors.New("no task was made for this call, which waits for its cell as without the tasks extension")

// errTooManyTasks is errNoTask for a principal at maxTasks.
func errTooManyTasks(n, running int, keep time.Duration) error {
	return fmt.Errorf("%w: you have %d tasks (%d running), the most ipybox mcp keeps for one token; "+
		"a finished task is kept for %v after its end, so that its result can be fetched: "+
		"cancel running ones (tasks/cancel) or let finished ones expire to get tasks again", errNoTask, n, running, keep)
}

// errTaskBytes is errNoTask for a principal whose finished tasks keep
// more than maxTaskBytes.
func errTaskBytes(held, limit int, keep time.Duration) error {
	return fmt.Errorf("%w: your finished tasks keep %.1f MiB of results, past the %d MiB ipybox mcp keeps for one token; "+
		"a finished task is kept for %v after its end: let those expire, print less or pass a smaller max_output_chars "+
		"to get tasks again", errNoTask, float64(held)/(1<<20), limit>>20, keep)
}

// keptBytes reports whether c (nil while its task is made) is done, and
// then what it keeps of its output: its text and its displays.
func (c *cellRun) keptBytes() (int, bool) {
	if c == nil {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.done {
		return 0, false
	}
	n := 0
	if r := c.res; r != nil {
		n += len(r.Text)
		for _, d := range r.Displays {
			n += len(d.Text)
			for _, v := range d.Data {
				if s, ok := v.(string); ok {
					n += len(s)
				}
			}
		}
	}
	return n, true
}

// reserve makes a task for principal p, for a cell to start with timeout,
// or fails when p has maxTasks, or its finished tasks keep more than
// maxTaskBytes.
func (tt *taskTable) reserve(p string, timeout time.Duration) (*task, error) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	now := time.Now()
	tt.sweepLocked(now)
	n, running, held := 0, 0, 0
	for _, t := range tt.tasks {
		if t.principal != p {
			continue
		}
		n++
		if b, done := t.c.keptBytes(); done {
			held += b
		} else {
			running++
		}
	}
	if n >= tt.max {
		return nil, errTooManyTasks(n, running, tt.keep)
	}
	if held > tt.maxBytes {
		return nil, errTaskBytes(held, tt.maxBytes, tt.keep)
	}
	t := &task{id: "task_" + strings.ToLower(rand.Text()), principal: p, created: now, timeout: timeout, updated: now, lastStatus: "working"}
	tt.tasks[t.id] = t
	return t, nil
}

// drop forgets t, a reservation that became no task.
func (tt *taskTable) drop(t *task) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	delete(tt.tasks, t.id)
}

// start gives t its cell; tasks/get finds it from now on.
func (tt *taskTable) start(t *task, c *cellRun) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	t.c = c
}

// lookup returns principal p's task id, or nil: the same nil whether it
// never existed, expired, or is another principal's.
func (tt *taskTable) lookup(id, p string) *task {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	tt.sweepLocked(time.Now())
	t := tt.tasks[id]
	if t == nil || t.c == nil || subtle.ConstantTimeCompare([]byte(t.principal), []byte(p)) != 1 {
		return nil
	}
	return t
}

// count returns the number of tasks kept (tests).
func (tt *taskTable) count() int {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	return len(tt.tasks)
}

// taskSlot is where executeTool leaves the task it made, for the
// middleware to answer with.
type taskSlot struct{ t *task }

type taskSlotKey struct{}

func taskSlotOf(ctx context.Context) *taskSlot {
	s, _ := ctx.Value(taskSlotKey{}).(*taskSlot)
	return s
}

// declaresTasks reports whether the client of a request declared the
// extension: in the request's own capabilities (_meta), or in its
// session's (initialize, or a 2026-07-28 request's _meta, which the
// go-sdk puts there).
func declaresTasks(ss *mcp.ServerSession, meta mcp.Meta) bool {
	if caps, ok := meta[mcp.MetaKeyClientCapabilities].(map[string]any); ok {
		if ext, ok := caps["extensions"].(map[string]any); ok {
			if _, ok := ext[tasksExtension]; ok {
				return true
			}
		}
	}
	if ss == nil {
		return false
	}
	ip := ss.InitializeParams()
	if ip == nil || ip.Capabilities == nil {
		return false
	}
	_, ok := ip.Capabilities.Extensions[tasksExtension]
	return ok
}

// startTask starts x's cell (start, which has a timeout) as a task, and
// leaves the task in slot: the middleware answers the call with its
// handle. A cell that ends within the quick window (taskTable.quick) with
// no approval asked is no task: slot stays empty, and the caller answers
// with the cell's result (the extension lets the server choose; clients
// that declare it by default, as the MCP Inspector does, would otherwise
// get a handle for print(1)).
func (s *Server) startTask(slot *taskSlot, x *session, timeout time.Duration, start func() (*cellRun, *attachment)) (*cellRun, *attachment, error) {
	t, err := s.tasks.reserve(x.principal, timeout)
	if err != nil {
		return nil, nil, err
	}
	s.tasks.mu.Lock()
	quick := s.tasks.quick
	s.tasks.mu.Unlock()
	c, att := start()
	if c.settles(quick) {
		s.tasks.drop(t)
		return c, att, nil
	}
	// The call ends now; the cell runs on without it.
	c.detach(att)
	c.mu.Lock()
	c.task = t.id
	c.mu.Unlock()
	s.tasks.start(t, c)
	slot.t = t
	s.log.Info("task started", "task", t.id, "cell", c.id, "session", x.id, "principal", x.principal)
	return c, nil, nil
}

// settles waits at most d for the cell's end, and reports whether it
// ended with no approval asked: an approval (or d) ends the wait, so that
// a task's client gets it as input_required.
func (c *cellRun) settles(d time.Duration) bool {
	if d <= 0 {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		c.mu.Lock()
		done, asked, changed := c.done, c.nasks > 0, c.changed
		c.mu.Unlock()
		switch {
		case asked:
			return false
		case done:
			return true
		}
		select {
		case <-changed:
		case <-t.C:
			return false
		}
	}
}

// taskWire is a Task (SEP-2663) as it goes on the wire, with its
// status's fields: a CreateTaskResult (resultType "task") or a tasks/get
// result (resultType "complete").
type taskWire struct {
	mcp.ResultBase
	ResultType     string              `json:"resultType"`
	TaskID         string              `json:"taskId"`
	Status         string              `json:"status"`
	StatusMessage  string              `json:"statusMessage,omitempty"`
	CreatedAt      string              `json:"createdAt"`
	LastUpdatedAt  string              `json:"lastUpdatedAt"`
	TTLMs          int64               `json:"ttlMs"`
	PollIntervalMs int64               `json:"pollIntervalMs"`
	InputRequests  mcp.InputRequestMap `json:"inputRequests,omitempty"`
	Result         *mcp.CallToolResult `json:"result,omitempty"`
}

// ackResult is the empty acknowledgement of tasks/update and tasks/cancel.
type ackResult struct {
	mcp.ResultBase
	ResultType string `json:"resultType"`
}

// taskParams are the params of tasks/get, tasks/update and tasks/cancel.
type taskParams struct {
	mcp.ParamsBase
	TaskID         string                     `json:"taskId"`
	InputResponses map[string]json.RawMessage `json:"inputResponses,omitempty"`
}

const (
	methodTasksGet    = "tasks/get"
	methodTasksUpdate = "tasks/update"
	methodTasksCancel = "tasks/cancel"
)

// addTaskMethods registers the extension's methods with m. The
// middleware (tasksMiddleware) answers them, with the request's
// principal; these handlers are reached only if it is not installed.
func addTaskMethods(m *mcp.Server) {
	for _, method := range []string{methodTasksGet, methodTasksUpdate, methodTasksCancel} {
		err := mcp.AddReceivingCustomMethod(m, method, func(context.Context, *mcp.ServerSession, *taskParams) (*ackResult, error) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "ipybox mcp: " + method + " reached no handler"}
		})
		if err != nil {
			panic(err) // the names are not the go-sdk's own
		}
	}
}

// tasksMiddleware makes tasks of execute_ipython_cell calls from clients
// that declare the extension, and answers tasks/get, tasks/update and
// tasks/cancel.
func (s *Server) tasksMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "tools/call":
			ctr, ok := req.(*mcp.CallToolRequest)
			if !ok || ctr.Params == nil || ctr.Params.Name != "execute_ipython_cell" || !declaresTasks(ctr.Session, ctr.Params.Meta) {
				return next(ctx, method, req)
			}
			slot := &taskSlot{}
			res, err := next(context.WithValue(ctx, taskSlotKey{}, slot), method, req)
			if slot.t == nil {
				return res, err
			}
			w := s.taskState(slot.t)
			w.ResultType = "task"
			w.InputRequests, w.Result = nil, nil
			return w, nil
		case methodTasksGet, methodTasksUpdate, methodTasksCancel:
			return s.taskMethod(method, req)
		}
		return next(ctx, method, req)
	}
}

// errMissingTasks answers a task method from a client that did not
// declare the extension (SEP-2575's Missing Required Client Capability).
var errMissingTasks = &jsonrpc.Error{
	Code:    mcp.CodeMissingRequiredClientCapabilities,
	Message: "missing required client capability: declare the " + tasksExtension + " extension in the request's capabilities to use tasks/get, tasks/update and tasks/cancel",
	Data:    json.RawMessage(`{"requiredCapabilities":{"extensions":{"` + tasksExtension + `":{}}}}`),
}

// errUnknownTask answers a taskId that names no task of the caller's.
func errUnknownTask(id string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown taskId %q: no task of yours has it (a task is kept for a while after its cell's end, its ttlMs from its creation, and only its own token reaches it)", clipN(id, 100))}
}

// taskMethod answers tasks/get, tasks/update and tasks/cancel.
func (s *Server) taskMethod(method string, req mcp.Request) (mcp.Result, error) {
	p, _ := req.GetParams().(*taskParams)
	if p == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: method + " needs params with a taskId"}
	}
	if !declaresTasks(req.GetSession().(*mcp.ServerSession), p.Meta) {
		return nil, errMissingTasks
	}
	if err := checkTaskRouting(req, p.TaskID); err != nil {
		return nil, err
	}
	t := s.tasks.lookup(p.TaskID, principalOf(req))
	if t == nil {
		return nil, errUnknownTask(p.TaskID)
	}
	switch method {
	case methodTasksGet:
		w := s.taskState(t)
		w.ResultType = "complete"
		return w, nil
	case methodTasksUpdate:
		client := ""
		if ip := req.GetSession().(*mcp.ServerSession).InitializeParams(); ip != nil && ip.ClientInfo != nil {
			client = ip.ClientInfo.Name
		}
		t.c.answer(p.InputResponses, client)
	case methodTasksCancel:
		s.tasks.mu.Lock()
		t.c.mu.Lock()
		if !t.c.done {
			t.cancelled = true
		}
		t.c.mu.Unlock()
		s.tasks.mu.Unlock()
		t.c.interrupt(byTaskCancel)
	}
	return &ackResult{ResultType: "complete"}, nil
}

// checkTaskRouting checks, for a 2026-07-28 request over HTTP, that its
// Mcp-Name header is its taskId (SEP-2663's routing header, checked as
// SEP-2243 checks tools/call's).
func checkTaskRouting(req mcp.Request, id string) error {
	ex := req.GetExtra()
	if ex == nil || ex.Header == nil {
		return nil
	}
	if v := ex.Header.Get("Mcp-Protocol-Version"); v < "2026-07-28" {
		return nil
	}
	name := strings.TrimSpace(ex.Header.Get("Mcp-Name"))
	if name != id {
		return &jsonrpc.Error{Code: mcp.CodeHeaderMismatch, Message: fmt.Sprintf("header mismatch: Mcp-Name %q is not the taskId %q of the body; send Mcp-Name: <taskId>", clipN(name, 100), clipN(id, 100))}
	}
	return nil
}

// answer decides the open approvals that responses answer; the others
// stay open, and keys that are not open are ignored.
func (c *cellRun) answer(responses map[string]json.RawMessage, client string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return
	}
	var keep []*ask
	for _, a := range c.asks {
		raw, ok := responses[a.id]
		var er mcp.ElicitResult
		if !ok || json.Unmarshal(raw, &er) != nil || er.Action == "" {
			keep = append(keep, a)
			continue
		}
		settle(a.r, a.form, &er, client)
	}
	if len(keep) != len(c.asks) {
		c.asks = keep
		c.changedLocked()
	}
}

// taskState is t's DetailedTask now.
func (s *Server) taskState(t *task) *taskWire {
	c := t.c
	w := &taskWire{TaskID: t.id, PollIntervalMs: taskPoll.Milliseconds()}
	c.mu.Lock()
	done := c.done
	var interrupted bool
	if done {
		var ie *interruptedError
		interrupted = errors.As(c.cellErrLocked(), &ie)
	}
	asks, _ := c.openAsks(time.Now())
	if len(asks) > 0 && !done {
		w.InputRequests = mcp.InputRequestMap{}
		for _, a := range asks {
			w.InputRequests[a.id] = a.question
		}
	}
	recent := c.recent.String()
	c.mu.Unlock()

	s.tasks.mu.Lock()
	switch {
	case done && t.cancelled && interrupted:
		w.Status = "cancelled"
	case done:
		w.Status = "completed"
	case len(w.InputRequests) > 0:
		w.Status = "input_required"
	default:
		w.Status = "working"
	}
	if w.Status != t.lastStatus {
		t.lastStatus, t.updated = w.Status, time.Now()
	}
	w.CreatedAt = t.created.UTC().Format(time.RFC3339Nano)
	w.LastUpdatedAt = t.updated.UTC().Format(time.RFC3339Nano)
	w.TTLMs = max(s.tasks.expiresLocked(t).Sub(t.created).Milliseconds(), 1)
	take := done && !t.taken
	t.taken = t.taken || done
	s.tasks.mu.Unlock()

	switch w.Status {
	case "working", "input_required":
		w.StatusMessage = fmt.Sprintf("cell %s runs since %s", c.id, c.start.UTC().Format(time.RFC3339))
		if len(w.InputRequests) > 0 {
			w.StatusMessage += fmt.Sprintf("; it waits for the approval of %d call(s): answer with tasks/update", len(w.InputRequests))
		}
		if tail := lastChars(recent, 500); tail != "" {
			w.StatusMessage += "; its latest output: " + tail
		}
	case "completed":
		w.Result = c.result()
	case "cancelled":
		// Its output is not lost: the result's text, as bounded as a
		// result's (max_output_chars), names the file with the rest.
		w.StatusMessage = text0(c.result())
	}
	if take {
		// The result is the task's now: the session's next call need not
		// wait for it, and collect_cell no longer returns it.
		s.runs.forgetCell(c)
		s.runs.dropRun(c)
	}
	return w
}

// lastChars is the end of s, at most n bytes, cut at a rune start.
func lastChars(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	for i := 0; i < len(s) && i < 4; i++ {
		if s[i]&0xC0 != 0x80 {
			return "..." + s[i:]
		}
	}
	return "..." + s
}

// text0 is the text of a tool result.
func text0(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
