package kernel

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ipybox/ipybox/internal/cellctl"
	"github.com/ipybox/ipybox/internal/jupyter"
	"github.com/ipybox/ipybox/internal/safefs"
	"github.com/ipybox/ipybox/internal/telemetry"
)

// ExecOptions configures one Execute. A nil *ExecOptions means the defaults.
type ExecOptions struct {
	// Timeout bounds the cell's run time. On expiry the cell is
	// interrupted, the kernel keeps its state, and Execute returns a
	// *TimeoutError. Zero means no limit beyond ctx; negative is an error.
	Timeout time.Duration
	// OnEvent receives each event as it arrives, on the calling goroutine.
	OnEvent func(Event)
	// Input answers input() calls. Nil makes input() raise a clear error.
	// It runs on its own goroutine, so the cell's timeout and ctx still
	// apply while it waits; ctx ends when the cell does, and Input should
	// return then (its answer is dropped).
	Input func(ctx context.Context, prompt string, password bool) (string, error)
	// Silent runs the code without output events, history or an execution
	// count (for housekeeping code). What a silent cell outputs is kernel
	// code's to choose (it can replace what the housekeeping code calls)
	// and nobody reads it, so a silent cell saves no image and keeps at
	// most SilentKeepText bytes of text and of displays, as KeepText does,
	// unless KeepText says less.
	Silent bool
	// KeepText bounds the text the Result keeps: its first and last
	// KeepText/2 bytes; Result.Omitted says how much was left out. It
	// bounds the displays the Result keeps too: KeepText bytes of display
	// messages, then Result.OmittedDisplays counts the rest. Every output
	// still reaches OnEvent, so a consumer that streams loses nothing. It
	// bounds memory when a cell prints a lot. Zero (or less) keeps all.
	KeepText int
}

const sigint = syscall.SIGINT

// maxCellImageBytes bounds the bytes of images one cell saves to the
// images directory; past it, an image is dropped and the display's text
// says so. A variable for the tests.
var maxCellImageBytes = 256 << 20

// SilentKeepText bounds what a silent cell's Result keeps (see
// ExecOptions.Silent): room for one display of a few MiB, such as a file
// transfer's chunk, and no more.
const SilentKeepText = 8 << 20

// Execute runs code as one cell and returns when the cell is done: when both
// the execute_reply and the final status: idle have arrived.
//
// A Python exception gives a non-nil *Result (with the output printed before
// it) and a *PythonError. A cancelled ctx or an expired timeout interrupts
// the cell; if it does not stop within the grace period, the kernel is
// restarted. A dead kernel gives ErrKernelDied; the next call starts a fresh
// kernel.
func (k *Kernel) Execute(ctx context.Context, code string, opts *ExecOptions) (*Result, error) {
	if opts != nil && opts.Timeout < 0 {
		return nil, fmt.Errorf("kernel: ExecOptions.Timeout is %v; use a positive duration, or 0 for no limit beyond ctx", opts.Timeout)
	}
	in, err := k.current(ctx)
	if err != nil {
		return nil, err
	}
	var o ExecOptions
	if opts != nil {
		o = *opts
	}
	k.mu.Lock()
	lost := k.lost
	k.lost = nil
	k.mu.Unlock()
	res, err := in.execute(ctx, code, &o)
	if errors.Is(err, ErrKernelDied) {
		in.reported.Store(true)
	}
	if res != nil {
		res.Restarted = lost
	} else if lost != nil {
		k.mu.Lock()
		if k.lost == nil {
			k.lost = lost // for the next call that gets a Result
		}
		k.mu.Unlock()
	}
	return res, err
}

// call collects the messages answering one request. Readers push; the
// caller's goroutine pops. The queue holds up to callBudget bytes, more
// when the caller lags: then a push waits, which holds the channel's
// reader back (see jupyter's guard) rather than the host's memory filling
// with what kernel code sends. A push never waits once the call is over
// (unregistered) or the kernel is dead.
type call struct {
	mu     sync.Mutex
	queue  []routed
	bytes  int
	over   bool          // unregistered: pushes are dropped
	notify chan struct{} // something was pushed
	space  chan struct{} // the caller drained the queue
	dead   <-chan struct{}
}

// callBudget is how many bytes of messages a call queues before a push
// waits for the caller.
const callBudget = 16 << 20

type routed struct {
	ch jupyter.Channel
	m  *jupyter.Message
}

func newCall(dead <-chan struct{}) *call {
	return &call{notify: make(chan struct{}, 1), space: make(chan struct{}, 1), dead: dead}
}

func (c *call) push(ch jupyter.Channel, m *jupyter.Message) {
	size := len(m.Content) + len(m.Metadata)
	for _, b := range m.Buffers {
		size += len(b)
	}
	for {
		c.mu.Lock()
		if c.over {
			c.mu.Unlock()
			return
		}
		if c.bytes < callBudget || len(c.queue) == 0 || isClosed(c.dead) {
			c.queue = append(c.queue, routed{ch, m})
			c.bytes += size
			c.mu.Unlock()
			signal(c.notify)
			return
		}
		c.mu.Unlock()
		// bound: the caller drains the queue or ends the call, or the kernel dies
		select {
		case <-c.space:
		case <-c.dead:
		}
	}
}

func (c *call) drain() []routed {
	c.mu.Lock()
	q := c.queue
	c.queue = nil
	c.bytes = 0
	c.mu.Unlock()
	signal(c.space)
	return q
}

// end marks the call over: what is pushed from now on is dropped, and a
// push waiting for room returns.
func (c *call) end() {
	c.mu.Lock()
	c.over = true
	c.queue = nil
	c.mu.Unlock()
	signal(c.space)
}

// signal wakes the one waiter of a channel of capacity 1, or leaves the
// wake-up for the next.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// waitInfo waits for a kernel_info reply and an iopub message for it.
func (c *call) waitInfo(ctx context.Context, in *instance, per time.Duration) error {
	t := time.NewTimer(per)
	defer t.Stop()
	gotReply, gotIOPub := false, false
	for {
		for _, r := range c.drain() {
			switch r.ch {
			case jupyter.Shell:
				gotReply = true
			case jupyter.IOPub:
				gotIOPub = true
			}
		}
		if gotReply && gotIOPub {
			return nil
		}
		select {
		case <-c.notify:
		case <-t.C:
			return errRetry
		case <-in.dead:
			return in.deadErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// cellState accumulates a cell's outputs.
type cellState struct {
	k       *Kernel
	ctx     context.Context // ends when the cell does
	outputs []any           // *textSeg or *Display, in order, after clear_output
	clearAt bool            // a clear_output(wait=True) is pending
	pyErr   *PythonError
	// replyErr is the exception the execute_reply names, for when the
	// iopub error message never came: IPython sends none when formatting
	// the traceback fails, as it can for a KeyboardInterrupt that lands
	// between two statements of a cell (it then prints "Unexpected
	// exception formatting exception" to stdout instead).
	replyErr *PythonError
	count    int
	aborted  bool
	gotReply bool
	gotIdle  bool
	// running: the kernel runs the cell's handler, so SIGINT raises
	// KeyboardInterrupt in it. Before, ipykernel ignores SIGINT: an
	// interrupt sent then is lost, and the cell runs on.
	running bool

	silent bool // ExecOptions.Silent: no image is saved

	imageBytes int // bytes of images saved for this cell (maxCellImageBytes)

	synced  map[string]bool // sync markers seen
	waiting []waitingCall   // calls held for their marker

	capped *headTail // the text, when ExecOptions.KeepText bounds it

	// With KeepText, the displays kept in outputs are bounded too: past
	// keepDisplays bytes of display messages, a display is streamed but
	// not kept (its text still goes to capped, its images to omittedImages).
	keepDisplays    int
	displayBytes    int
	omittedDisplays int
	omittedImages   []string
}

// headTail keeps the first and the last bytes of a text, and counts what
// falls between.
type headTail struct {
	half    int
	head    strings.Builder
	tail    []string // the last chunks, at most half bytes in all
	tailLen int
	omitted int64
}

func (h *headTail) add(s string) {
	if room := h.half - h.head.Len(); room > 0 {
		n := min(room, len(s))
		h.head.WriteString(s[:n])
		s = s[n:]
	}
	if s == "" {
		return
	}
	if len(s) > h.half {
		h.omitted += int64(h.tailLen + len(s) - h.half)
		h.tail, h.tailLen = []string{strings.Clone(s[len(s)-h.half:])}, h.half
		return
	}
	h.tail = append(h.tail, s)
	h.tailLen += len(s)
	for h.tailLen > h.half {
		over := h.tailLen - h.half
		if len(h.tail[0]) <= over {
			h.omitted += int64(len(h.tail[0]))
			h.tailLen -= len(h.tail[0])
			h.tail = h.tail[1:]
			continue
		}
		h.omitted += int64(over)
		h.tail[0] = strings.Clone(h.tail[0][over:])
		h.tailLen -= over
	}
}

func (h *headTail) text() string {
	var b strings.Builder
	b.WriteString(h.head.String())
	if h.omitted > 0 {
		fmt.Fprintf(&b, "\n[... %d bytes of output not kept here ...]\n", h.omitted)
	}
	for _, t := range h.tail {
		b.WriteString(t)
	}
	return b.String()
}

type waitingCall struct {
	call     cellctl.Call
	deadline time.Time
}

// runCall runs c now if its marker was seen, else holds it.
func (st *cellState) runCall(c cellctl.Call) {
	if c.After == "" || st.synced[c.After] {
		c.Run()
		return
	}
	st.waiting = append(st.waiting, waitingCall{c, time.Now().Add(cellctl.SyncWait)})
}

// release runs the held calls whose marker arrived or whose wait is over.
func (st *cellState) release(now time.Time) {
	for i := 0; i < len(st.waiting); {
		w := st.waiting[i]
		if st.synced[w.call.After] || !now.Before(w.deadline) {
			st.waiting = append(st.waiting[:i], st.waiting[i+1:]...)
			w.call.Run()
			continue
		}
		i++
	}
}

// nextDeadline returns a timer channel for the earliest held call.
func (st *cellState) nextDeadline() <-chan time.Time {
	if len(st.waiting) == 0 {
		return nil
	}
	d := st.waiting[0].deadline
	for _, w := range st.waiting[1:] {
		if w.deadline.Before(d) {
			d = w.deadline
		}
	}
	return time.After(time.Until(d))
}

// executeRequest builds the execute_request of a cell.
func (in *instance) executeRequest(code string, o *ExecOptions) (*jupyter.Message, error) {
	return jupyter.NewMessage(in.k.session, "execute_request", map[string]any{
		"code":             code,
		"silent":           o.Silent,
		"store_history":    !o.Silent,
		"user_expressions": map[string]any{},
		"allow_stdin":      o.Input != nil,
		// Cells are serialised by the caller, so there is no queue to
		// abort; with stop_on_error ipykernel would abort a request that
		// arrives right after an error (its abort window is call_later(0)).
		"stop_on_error": false,
	})
}

// cellWaits are the timers of a cell's wait for its end, and its
// interrupt.
type cellWaits struct {
	in            *instance
	idle          <-chan time.Time // the grace for idle after the reply
	interruptedAt time.Time        // zero until we decided to interrupt
	stopErr       error            // why we interrupt
	grace         <-chan time.Time // the interrupt's grace
	signalPending bool             // decided, not sent: the cell has not started
	noReply       <-chan time.Time // idle came without a reply
}

// update sets the timers after the messages of one batch (fresh: any).
func (w *cellWaits) update(st *cellState, fresh bool) {
	opts := w.in.k.opts
	if w.signalPending && st.running {
		// The interrupt waited for the cell to start; its grace counts
		// from now.
		w.signalPending = false
		w.in.signal(sigint)
		w.grace = time.After(opts.InterruptGrace)
	}
	if st.gotIdle && !st.gotReply && !w.interruptedAt.IsZero() && !w.signalPending && w.noReply == nil {
		// Idle without a reply: the interrupt landed in ipykernel's
		// handler before the cell's code ran, and ipykernel ended the
		// handler without a reply. The kernel is idle and keeps its
		// state: no restart. A reply on its way has IdleGrace.
		w.noReply = time.After(opts.IdleGrace)
		w.grace = nil
	}
	// The grace for the final idle counts from the last message, not
	// from the reply: output still arriving (and being written to a slow
	// consumer) is progress, not a kernel that forgot idle.
	if st.gotReply && (w.idle == nil || fresh) {
		w.idle = time.After(opts.IdleGrace)
	}
}

// interrupt interrupts the cell once, for why, then gives it
// InterruptGrace to stop. A cell that has not started yet (a loaded
// machine, a timeout of a few milliseconds) is interrupted when it starts:
// the grace then bounds the wait for the start too.
func (w *cellWaits) interrupt(st *cellState, why error) {
	w.stopErr = why
	w.interruptedAt = time.Now()
	if st.running || st.gotReply {
		w.in.signal(sigint)
	} else {
		w.signalPending = true
	}
	w.grace = time.After(w.in.k.opts.InterruptGrace)
}

// ErrInterruptIgnored is in the error of a cell stopped for another
// reason than its timeout (its context ended) that ignored the interrupt:
// its kernel was restarted.
var ErrInterruptIgnored = errors.New("the cell ignored the interrupt, so the kernel was restarted and its state is lost")

// restartIgnored restarts the kernel of a cell that ignored the interrupt
// for stopErr's reason, and says so in the error it returns.
func (in *instance) restartIgnored(stopErr error) error {
	rctx, cancel := context.WithTimeout(context.Background(), in.k.opts.StartTimeout)
	rerr := in.k.restartAfter(rctx, in)
	cancel()
	var te *TimeoutError
	if errors.As(stopErr, &te) {
		te.Restarted = true
	} else {
		stopErr = fmt.Errorf("%w; %w", stopErr, ErrInterruptIgnored)
	}
	if rerr != nil {
		stopErr = fmt.Errorf("%w (restart failed: %v)", stopErr, rerr)
	}
	return stopErr
}

// newCellState is the state of one cell with options o (a silent cell
// keeps at most SilentKeepText).
func newCellState(k *Kernel, ctx context.Context, o *ExecOptions) *cellState {
	st := &cellState{k: k, ctx: ctx, silent: o.Silent}
	if o.Silent && (o.KeepText <= 0 || o.KeepText > SilentKeepText) {
		o.KeepText = SilentKeepText
	}
	if o.KeepText > 0 {
		st.capped = &headTail{half: max(o.KeepText/2, 1)}
		st.keepDisplays = o.KeepText
	}
	return st
}

func (in *instance) execute(ctx context.Context, code string, o *ExecOptions) (*Result, error) {
	msg, err := in.executeRequest(code, o)
	if err != nil {
		return nil, err
	}
	if h := cellctl.From(ctx); h != nil && h.TraceParent != "" {
		// The cell's trace context, for ipybox_runtime.traceparent().
		msg.Metadata = json.RawMessage(`{"traceparent":` + strconv.Quote(h.TraceParent) + `}`)
	}
	id := msg.Header.MsgID
	c := in.register(id)
	defer in.unregister(id)
	if err := in.conn.Send(jupyter.Shell, msg); err != nil {
		return nil, in.sendErr(err)
	}
	var calls <-chan cellctl.Call
	var budget *cellctl.Budget
	if h := cellctl.From(ctx); h != nil {
		calls, budget = h.Calls, h.Budget
	}
	if budget == nil && o.Timeout > 0 {
		budget = cellctl.NewBudget(o.Timeout)
	}
	cellCtx, endCell := context.WithCancel(ctx)
	defer endCell() // ends a pending Input
	st := newCellState(in.k, cellCtx, o)
	w := &cellWaits{in: in}
	for {
		batch := c.drain()
		for _, r := range batch {
			st.handle(in, r, o)
		}
		if st.gotReply && st.gotIdle {
			break
		}
		w.update(st, len(batch) > 0)
		idleTimer, interruptedAt, graceTimer, noReplyTimer := w.idle, w.interruptedAt, w.grace, w.noReply
		var expired <-chan struct{}
		if budget != nil && interruptedAt.IsZero() {
			expired = budget.Expired()
		}
		var ctxDone <-chan struct{}
		if interruptedAt.IsZero() {
			ctxDone = ctx.Done()
		}
		syncTimer := st.nextDeadline()
		// bound: ctx or the budget, then the interrupt's grace; or the kernel's death
		select {
		case <-c.notify:
			continue
		case cl := <-calls:
			// Drain output first, so a call sees the events before it.
			for _, r := range c.drain() {
				st.handle(in, r, o)
			}
			st.runCall(cl)
			continue
		case now := <-syncTimer:
			st.release(now)
			continue
		case <-noReplyTimer:
			return st.result(false), st.finalErr(w.stopErr)
		case <-idleTimer:
			if in.conn.Backlog(jupyter.IOPub) > 0 {
				// Output received and still being decoded: not a kernel
				// that forgot its idle.
				w.idle = time.After(in.k.opts.IdleGrace)
				continue
			}
			res := st.result(true)
			return res, st.finalErr(w.stopErr)
		case <-in.dead:
			return st.result(false), in.deathErr()
		case <-expired:
			w.interrupt(st, &TimeoutError{Timeout: budget.Total()})
		case <-ctxDone:
			w.interrupt(st, ctx.Err())
		case <-graceTimer:
			// The cell ignored SIGINT: only a restart stops it.
			res := st.result(false)
			return res, in.restartIgnored(w.stopErr)
		}
	}
	return st.result(false), st.finalErr(w.stopErr)
}

var errAborted = errors.New("the kernel aborted the execution without running it; run it again")

func (st *cellState) finalErr(stopErr error) error {
	if stopErr != nil {
		return stopErr
	}
	if st.pyErr != nil {
		return st.pyErr
	}
	if st.replyErr != nil {
		return st.replyErr
	}
	if st.aborted {
		return errAborted
	}
	return nil
}

func (st *cellState) emit(o *ExecOptions, e Event) {
	if o.OnEvent != nil {
		o.OnEvent(e)
	}
}

// textSeg is a run of consecutive stream output. Its chunks are joined once,
// at the end: growing one buffer as megabytes arrive would copy them again
// and again and double the peak memory.
type textSeg struct{ chunks []string }

// clearPending applies a clear_output(wait=True) now that output arrives.
func (st *cellState) clearPending() {
	if st.clearAt {
		st.outputs = nil
		st.clearAt = false
		if st.capped != nil {
			st.capped = &headTail{half: st.capped.half}
		}
		st.displayBytes, st.omittedDisplays, st.omittedImages = 0, 0, nil
	}
}

func (st *cellState) add(out any) {
	st.clearPending()
	st.outputs = append(st.outputs, out)
	if d, ok := out.(*Display); ok && st.capped != nil && d.Text != "" && len(d.Images) == 0 {
		st.capped.add(d.Text + "\n")
	}
}

func (st *cellState) addText(text string) {
	st.clearPending()
	if st.capped != nil {
		st.capped.add(text)
		return
	}
	if n := len(st.outputs); n > 0 {
		if seg, ok := st.outputs[n-1].(*textSeg); ok {
			seg.chunks = append(seg.chunks, text)
			return
		}
	}
	st.outputs = append(st.outputs, &textSeg{chunks: []string{text}})
}

func (st *cellState) handle(in *instance, r routed, o *ExecOptions) {
	m := r.m
	switch r.ch {
	case jupyter.Shell:
		if m.Header.MsgType != "execute_reply" {
			return
		}
		var rep struct {
			Status         string   `json:"status"`
			ExecutionCount int      `json:"execution_count"`
			Name           string   `json:"ename"`
			Value          string   `json:"evalue"`
			Traceback      []string `json:"traceback"`
		}
		json.Unmarshal(m.Content, &rep)
		st.gotReply = true
		st.aborted = rep.Status == "aborted"
		st.count = rep.ExecutionCount
		if rep.Status == "error" {
			name := rep.Name
			if name == "" {
				name = "Exception" // a reply that says error without naming it
			}
			st.replyErr = &PythonError{Name: name, Value: stripANSI(rep.Value), Traceback: cleanTraceback(rep.Traceback)}
		}
	case jupyter.Stdin:
		st.handleInput(in, m, o)
	case jupyter.IOPub:
		st.handleIOPub(m, o)
	}
}

func (st *cellState) handleIOPub(m *jupyter.Message, o *ExecOptions) {
	switch m.Header.MsgType {
	case "status":
		var s struct {
			State string `json:"execution_state"`
		}
		json.Unmarshal(m.Content, &s)
		switch {
		case s.State == "idle":
			st.gotIdle = true
		case s.State == "busy" && o.Silent:
			// A silent cell has no execute_input; busy comes just
			// before the handler.
			st.running = true
		}
	case "execute_input":
		// Published by the handler itself.
		st.running = true
	case "stream":
		name, text, err := decodeStream(m.Content)
		if err != nil {
			return
		}
		s := &Output{Stream: name, Text: text}
		st.addText(text)
		st.emit(o, s)
	case "display_data", "execute_result", "update_display_data":
		d := st.display(m)
		if d == nil {
			return
		}
		switch {
		case d.Update:
			st.update(d)
		case st.keepDisplays > 0 && (st.omittedDisplays > 0 || st.displayBytes+len(m.Content) > st.keepDisplays):
			// Over the bound: streamed, not kept. Once one is left out,
			// the later ones are too, so that Displays stays in order.
			st.clearPending()
			st.omittedDisplays++
			st.omittedImages = append(st.omittedImages, d.Images...)
			if d.Text != "" && len(d.Images) == 0 {
				st.capped.add(d.Text + "\n")
			}
		default:
			st.displayBytes += len(m.Content)
			st.add(d)
		}
		st.emit(o, d)
	case "ipybox_sync":
		var m2 struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(m.Content, &m2) == nil && m2.ID != "" {
			if st.synced == nil {
				st.synced = map[string]bool{}
			}
			st.synced[m2.ID] = true
			st.release(time.Now())
		}
	case "clear_output":
		var c struct {
			Wait bool `json:"wait"`
		}
		json.Unmarshal(m.Content, &c)
		st.clearAt = true
		if !c.Wait {
			st.clearPending()
		}
		st.emit(o, &ClearOutput{Wait: c.Wait})
	case "error":
		var e struct {
			Name      string   `json:"ename"`
			Value     string   `json:"evalue"`
			Traceback []string `json:"traceback"`
		}
		if json.Unmarshal(m.Content, &e) != nil {
			return
		}
		st.pyErr = &PythonError{Name: e.Name, Value: stripANSI(e.Value), Traceback: cleanTraceback(e.Traceback)}
	}
}

// cleanTraceback strips ANSI codes and splits multi-line entries.
func cleanTraceback(tb []string) []string {
	var out []string
	for _, entry := range tb {
		entry = strings.TrimRight(stripANSI(entry), "\n")
		out = append(out, strings.Split(entry, "\n")...)
	}
	return out
}

func (st *cellState) update(d *Display) {
	for i, out := range st.outputs {
		if old, ok := out.(*Display); ok && old.ID != "" && old.ID == d.ID {
			nd := *d
			nd.Update = false
			st.outputs[i] = &nd
		}
	}
}

var imageExt = map[string]string{"image/png": ".png", "image/jpeg": ".jpg", "image/svg+xml": ".svg"}

// display decodes a display message and writes its images to disk.
func (st *cellState) display(m *jupyter.Message) *Display {
	var raw struct {
		Data      map[string]json.RawMessage `json:"data"`
		Transient struct {
			DisplayID string `json:"display_id"`
		} `json:"transient"`
	}
	if json.Unmarshal(m.Content, &raw) != nil {
		return nil
	}
	d := &Display{
		ID:     raw.Transient.DisplayID,
		Update: m.Header.MsgType == "update_display_data",
		Result: m.Header.MsgType == "execute_result",
	}
	// Stable order: PNG, JPEG, SVG.
	var saveErrs []string
	for _, mime := range []string{"image/png", "image/jpeg", "image/svg+xml"} {
		v, ok := raw.Data[mime]
		if !ok {
			continue
		}
		delete(raw.Data, mime)
		if st.silent {
			// Housekeeping code shows no image: one here is kernel
			// code's, and would fill the host's disk.
			continue
		}
		var s string
		if json.Unmarshal(v, &s) != nil {
			continue
		}
		var b []byte
		if mime == "image/svg+xml" {
			b = []byte(s)
		} else {
			var err error
			if b, err = base64.StdEncoding.DecodeString(strings.TrimSpace(s)); err != nil {
				st.k.opts.Logger.Warn("bad base64 image", "mime", mime, "err", err)
				continue
			}
		}
		if st.imageBytes+len(b) > maxCellImageBytes {
			// The images directory is on the host's disk, and a kernel
			// (on a gateway, in a container) may not be: it is not
			// filled without bound.
			saveErrs = append(saveErrs, fmt.Sprintf("[ipybox: a %s image of %d bytes was not saved: this cell's images passed %d MiB]", mime, len(b), maxCellImageBytes>>20))
			continue
		}
		st.imageBytes += len(b)
		path, err := st.k.saveImage(b, imageExt[mime])
		if err != nil {
			// Nothing is lost: the image stays in Data, and the text
			// says why there is no file (a link planted at the images
			// directory, a full disk…).
			st.k.opts.Logger.Warn("cannot save image", "err", err)
			if d.Data == nil {
				d.Data = map[string]any{}
			}
			d.Data[mime] = s
			saveErrs = append(saveErrs, fmt.Sprintf("[ipybox: a %s image was not saved: %v]", mime, err))
			continue
		}
		d.Images = append(d.Images, path)
	}
	if v, ok := raw.Data["text/plain"]; ok {
		delete(raw.Data, "text/plain")
		json.Unmarshal(v, &d.Text)
	}
	if len(saveErrs) > 0 {
		d.Text = strings.TrimLeft(d.Text+"\n"+strings.Join(saveErrs, "\n"), "\n")
	}
	for mime, v := range raw.Data {
		var x any
		if json.Unmarshal(v, &x) == nil {
			if d.Data == nil {
				d.Data = map[string]any{}
			}
			d.Data[mime] = x
		}
	}
	return d
}

// saveImage writes an image to a new file in the images directory. Kernel
// code can write that directory (it is in the workspace): no link is
// followed, neither the directory itself nor a file planted at the name,
// and the file is created exclusively, with a random part in its name so
// that it cannot be predicted.
func (k *Kernel) saveImage(b []byte, ext string) (string, error) {
	base, rel := imagesBase(k.imagesDir, k.opts.Dir)
	if err := safefs.MkdirAll(base, rel, 0o755); err != nil {
		return "", err
	}
	k.mu.Lock()
	k.imageCount++
	n := k.imageCount
	k.mu.Unlock()
	for attempt := 0; ; attempt++ {
		var rnd [4]byte
		rand.Read(rnd[:])
		name := fmt.Sprintf("%s-%04d-%x%s", time.Now().Format("20060102-150405"), n, rnd, ext)
		f, err := safefs.CreateExclusive(base, filepath.Join(rel, name), 0o644)
		if errors.Is(err, fs.ErrExist) && attempt < 10 {
			continue
		}
		if err != nil {
			return "", err
		}
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", err
		}
		telemetry.AddImageBytes(len(b))
		return filepath.Join(k.imagesDir, name), nil
	}
}

// imagesBase splits the images directory into a trusted base and the path
// below it that kernel code may control: the workspace when the images
// directory is inside it, else the images directory's parent (a directory
// the caller chose).
func imagesBase(imagesDir, workspace string) (base, rel string) {
	if r, err := filepath.Rel(workspace, imagesDir); err == nil && r != "." && !strings.HasPrefix(r, "..") && !filepath.IsAbs(r) {
		return workspace, r
	}
	return filepath.Dir(imagesDir), filepath.Base(imagesDir)
}

func (st *cellState) handleInput(in *instance, m *jupyter.Message, o *ExecOptions) {
	if m.Header.MsgType != "input_request" || o.Input == nil {
		return
	}
	var req struct {
		Prompt   string `json:"prompt"`
		Password bool   `json:"password"`
	}
	json.Unmarshal(m.Content, &req)
	// Off the cell's loop: output, the timeout and ctx go on meanwhile.
	ctx := st.ctx
	go func() {
		value, err := o.Input(ctx, req.Prompt, req.Password)
		if ctx.Err() != nil {
			return // the cell is over: nobody waits for this answer
		}
		if err != nil {
			// The kernel waits for a reply; an interrupt makes input() raise.
			in.signal(sigint)
			return
		}
		reply, err := jupyter.NewMessage(in.k.session, "input_reply", map[string]string{"value": value})
		if err != nil {
			return
		}
		reply.ParentHeader = m.Header
		in.conn.Send(jupyter.Stdin, reply)
	}()
}

// result assembles the final Result from the outputs as they stand.
func (st *cellState) result(truncated bool) *Result {
	res := &Result{ExecutionCount: st.count, Truncated: truncated}
	// Collect the pieces first, so the text is built with one allocation
	// (or none, for a cell whose output is a single chunk).
	var parts []string
	size := 0
	endsNL := true
	for _, out := range st.outputs {
		switch v := out.(type) {
		case *textSeg:
			for _, c := range v.chunks {
				if c != "" {
					parts = append(parts, c)
					size += len(c)
					endsNL = c[len(c)-1] == '\n'
				}
			}
		case *Display:
			res.Displays = append(res.Displays, v)
			res.Images = append(res.Images, v.Images...)
			if v.Text != "" && len(v.Images) == 0 {
				if !endsNL {
					parts = append(parts, "\n")
				}
				parts = append(parts, v.Text, "\n")
				size += len(v.Text) + 2
				endsNL = true
			}
		}
	}
	if st.capped != nil {
		// Display texts were kept in order with the stream text.
		res.Text = strings.TrimSuffix(st.capped.text(), "\n")
		res.Omitted = st.capped.omitted
		res.OmittedDisplays = st.omittedDisplays
		res.Images = append(res.Images, st.omittedImages...)
		return res
	}
	var text string
	if len(parts) == 1 {
		text = parts[0]
	} else {
		var b strings.Builder
		b.Grow(size)
		for _, p := range parts {
			b.WriteString(p)
		}
		text = b.String()
	}
	res.Text = strings.TrimSuffix(text, "\n")
	return res
}
