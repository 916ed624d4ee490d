package ipybox

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
)

// Event is one event of a running cell, as [Executor.Stream] and
// [RemoteSession.Stream] yield them: *[Output], *[Display], *[ClearOutput]
// and *[ApprovalRequest] while the cell runs, then, last, the *[Result].
// The set is closed: no other package's type is an Event.
type Event interface{ isEvent() }

// Output is a chunk of text a cell wrote.
type Output struct {
	// Stream is "stdout" or "stderr".
	Stream string
	// Text is the chunk as the kernel sent it.
	Text string
}

// Display is a rich output of a cell (a plot, an HTML table, the value of
// the last expression), or an update of an earlier one.
type Display struct {
	// ID is the display_id, "" when the output has none.
	ID string
	// Update marks update_display_data: the display with ID changed.
	Update bool
	// Result marks execute_result: the value of the cell's last expression.
	Result bool
	// Text is the text/plain representation ("" if none).
	Text string
	// Images are the files the PNG, JPEG and SVG parts were saved to.
	Images []string
	// Data holds every other MIME part as the kernel sent it (for example
	// "text/html" or "application/json").
	Data map[string]any
}

// ClearOutput means the cell cleared its output (clear_output). With
// Wait, the clearing takes effect when the next output arrives.
type ClearOutput struct {
	Wait bool
}

// Result is the outcome of a cell. [Executor.Stream] yields it last;
// [Executor.Execute] returns it.
type Result struct {
	// Text is what the cell printed (stdout and stderr, in order) and the
	// text of its displays and result, after clear_output and
	// update_display_data were applied, without one trailing newline.
	Text string
	// Images lists the image files of the cell's displays, in order.
	Images []string
	// Displays are the cell's rich outputs as they stand at the end.
	Displays []*Display
	// ExecutionCount is the kernel's execution counter for the cell.
	ExecutionCount int
	// Truncated is true when the kernel's reply arrived but its final
	// status message did not within the grace period: output may be
	// missing.
	Truncated bool
	// Omitted is how many bytes of text [ExecOptions].KeepText left out
	// of Text (they were streamed as *[Output] events); zero when Text is
	// whole.
	Omitted int64
	// OmittedDisplays is how many displays KeepText left out of Displays:
	// past KeepText bytes of display messages, the later displays are
	// streamed as *[Display] events but not kept. Their text is in Text's
	// bounds and their images in Images.
	OmittedDisplays int
	// Restarted is set when the kernel had died since the last call
	// (killed, crashed, or exit() in a cell) and no call had reported it:
	// this cell ran in a fresh kernel, and the old one's state is gone.
	// Its Error says when and why ("kernel died at 15:04:05: process
	// exited: signal: killed").
	Restarted *DiedError
	// Note is what ipybox says about the session before this cell (a
	// rewind: what came back); empty when it has nothing to say.
	Note string
}

func (*Output) isEvent()          {}
func (*Display) isEvent()         {}
func (*ClearOutput) isEvent()     {}
func (*Result) isEvent()          {}
func (*ApprovalRequest) isEvent() {}

// Errors callers branch on. A Python exception is a *[PythonError]; a
// timeout is a *[TimeoutError], which matches ErrTimeout; a kernel's death
// is a *[DiedError], which matches ErrKernelDied.
var (
	// ErrKernelDied means the kernel process exited or stopped answering
	// its heartbeat. The next call starts a fresh kernel.
	ErrKernelDied = kernel.ErrKernelDied
	// ErrTimeout means a cell exceeded [ExecOptions].Timeout and was
	// interrupted.
	ErrTimeout = kernel.ErrTimeout
	// ErrClosed is returned by an Executor's methods after Close, by
	// [Pool.Get] after the Pool's Close, and to a
	// cell that Close ended.
	ErrClosed = errors.New("ipybox: executor closed")
)

// PythonError is an exception raised by a cell: its class name, value and
// traceback (without ANSI codes).
type PythonError struct {
	Name      string   // the exception class, e.g. "ZeroDivisionError"
	Value     string   // str(exception)
	Traceback []string // lines, without ANSI escape codes
}

func (e *PythonError) Error() string {
	if e.Value == "" {
		return e.Name
	}
	return e.Name + ": " + e.Value
}

// TracebackText returns the traceback as one string.
func (e *PythonError) TracebackText() string { return strings.Join(e.Traceback, "\n") }

// TimeoutError reports a cell that exceeded [ExecOptions].Timeout. It
// matches ErrTimeout with errors.Is.
type TimeoutError struct {
	Timeout time.Duration
	// Restarted is true when the cell ignored the interrupt and the kernel
	// had to be restarted: the kernel's state was lost.
	Restarted bool
}

func (e *TimeoutError) Error() string {
	msg := fmt.Sprintf("execution timed out after %v and was interrupted", e.Timeout)
	if e.Restarted {
		msg += "; the cell ignored the interrupt, so the kernel was restarted and its state is lost"
	} else {
		msg += "; the kernel's state is preserved"
	}
	return msg
}

// Is makes errors.Is(err, ErrTimeout) true.
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }

// DiedError says when and how a kernel died: [Result].Restarted, for a
// death between calls, and the error of a call the death ended, which
// matches ErrKernelDied.
type DiedError struct {
	Cause string
	At    time.Time // when the host saw it die (zero if unknown)
}

func (e *DiedError) Error() string {
	if e.At.IsZero() {
		return "kernel died: " + e.Cause
	}
	return "kernel died at " + e.At.Format("15:04:05") + ": " + e.Cause
}

// Is makes errors.Is(err, ErrKernelDied) true.
func (e *DiedError) Is(target error) bool { return target == ErrKernelDied }

// executorErr reports the kernel's errors as the Executor's: the user
// closed an Executor, not a kernel, and the error types are this
// package's. A kernel error inside a wrapped one is converted too, and
// the wrapping's text kept.
func executorErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, kernel.ErrClosed) {
		return ErrClosed
	}
	pub := publicErr(err)
	switch err.(type) {
	case *kernel.PythonError, *kernel.TimeoutError, *kernel.DiedError:
		return pub
	}
	if pub == nil {
		return err
	}
	return &convertedErr{err: err, pub: pub}
}

// publicErr returns this package's form of the kernel error in err's
// chain, or nil when there is none.
func publicErr(err error) error {
	var pe *kernel.PythonError
	var te *kernel.TimeoutError
	var de *kernel.DiedError
	switch {
	case errors.As(err, &pe):
		return pythonErrorOf(pe)
	case errors.As(err, &te):
		return &TimeoutError{Timeout: te.Timeout, Restarted: te.Restarted}
	case errors.As(err, &de):
		return diedOf(de)
	}
	return nil
}

// convertedErr is a wrapped kernel error with this package's form of it:
// its text is the wrapping's, and errors.As finds either form.
type convertedErr struct{ err, pub error }

func (e *convertedErr) Error() string   { return e.err.Error() }
func (e *convertedErr) Unwrap() []error { return []error{e.pub, e.err} }

func pythonErrorOf(e *kernel.PythonError) *PythonError {
	return &PythonError{Name: e.Name, Value: e.Value, Traceback: e.Traceback}
}

func diedOf(d *kernel.DiedError) *DiedError {
	if d == nil {
		return nil
	}
	return &DiedError{Cause: d.Cause, At: d.At}
}

// eventOf converts a kernel's event.
func eventOf(ev kernel.Event) Event {
	switch ev := ev.(type) {
	case *kernel.Output:
		return &Output{Stream: ev.Stream, Text: ev.Text}
	case *kernel.Display:
		return displayOf(ev)
	case *kernel.ClearOutput:
		return &ClearOutput{Wait: ev.Wait}
	case *kernel.Result:
		return resultOf(ev)
	}
	panic(fmt.Sprintf("ipybox: a kernel event of type %T has no public form", ev))
}

func displayOf(d *kernel.Display) *Display {
	return &Display{ID: d.ID, Update: d.Update, Result: d.Result, Text: d.Text, Images: d.Images, Data: d.Data}
}

// resultOf converts a kernel's result; nil stays nil.
func resultOf(r *kernel.Result) *Result {
	if r == nil {
		return nil
	}
	out := &Result{Text: r.Text, Images: r.Images, ExecutionCount: r.ExecutionCount, Truncated: r.Truncated,
		Omitted: r.Omitted, OmittedDisplays: r.OmittedDisplays, Restarted: diedOf(r.Restarted), Note: r.Note}
	if r.Displays != nil {
		out.Displays = make([]*Display, len(r.Displays))
		for i, d := range r.Displays {
			out.Displays[i] = displayOf(d)
		}
	}
	return out
}
