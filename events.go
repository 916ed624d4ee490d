package ipybox

import "github.com/ipybox/ipybox/kernel"

// Event is something Stream yields: one of *Output, *Display,
// *ClearOutput, *ApprovalRequest, or, last, *Result.
type Event interface{ isEvent() }

// Output is a chunk of text a cell wrote.
type Output struct {
	// Stream is "stdout" or "stderr".
	Stream string
	Text   string
}

// Display is a rich output of a cell (a plot, an HTML table, the value of
// the last expression), or an update of an earlier one.
type Display struct {
	// ID is the display_id, "" when the output has none.
	ID string
	// Update marks update_display_data: the display with ID changed.
	Update bool
	// Result marks the value of the cell's last expression.
	Result bool
	// Text is the text/plain representation.
	Text string
	// Images are the files PNG, JPEG and SVG parts were saved to.
	Images []string
	// Data holds every other MIME part (text/html, application/json, ...).
	Data map[string]any
}

// ClearOutput means the cell cleared its output (clear_output). With Wait,
// the clearing takes effect when the next output arrives.
type ClearOutput struct{ Wait bool }

// Result is the outcome of a cell. Stream yields it last; Execute returns it.
type Result struct {
	// Text is the cell's printed output (stdout and stderr in order) and the
	// text of its displays, after clear_output and display updates were
	// applied, without one trailing newline.
	Text string
	// Images are the image files the cell produced, in order.
	Images []string
	// Displays are the cell's rich outputs as they stand at the end.
	Displays []*Display
	// Truncated is true when the kernel's final status message did not
	// arrive: output may be missing.
	Truncated bool
	// Omitted is how many bytes of text ExecOptions.KeepText left out of
	// Text (Stream delivered them as *Output events); zero when Text is
	// whole.
	Omitted int64
	// Restarted is set when the kernel had died since the last call
	// (killed, crashed, or exit() in a cell) and no call had reported it:
	// this cell ran in a fresh kernel, and the old one's state is gone.
	// Its Error says when and why ("kernel died at 15:04:05: process
	// exited: signal: killed").
	Restarted *kernel.DiedError
}

func (*Output) isEvent()      {}
func (*Display) isEvent()     {}
func (*ClearOutput) isEvent() {}
func (*Result) isEvent()      {}

func fromKernelDisplay(d *kernel.Display) *Display {
	return &Display{ID: d.ID, Update: d.Update, Result: d.Result, Text: d.Text, Images: d.Images, Data: d.Data}
}

func fromKernelEvent(e kernel.Event) Event {
	switch e := e.(type) {
	case *kernel.Stream:
		return &Output{Stream: e.Name, Text: e.Text}
	case *kernel.Display:
		return fromKernelDisplay(e)
	case *kernel.ClearOutput:
		return &ClearOutput{Wait: e.Wait}
	}
	return nil
}

func fromKernelResult(r *kernel.Result) *Result {
	if r == nil {
		return nil
	}
	out := &Result{Text: r.Text, Images: r.Images, Truncated: r.Truncated, Omitted: r.Omitted, Restarted: r.Restarted}
	for _, d := range r.Displays {
		out.Displays = append(out.Displays, fromKernelDisplay(d))
	}
	return out
}

// Errors callers branch on. A Python exception is a *PythonError; a timeout
// is a *TimeoutError, which matches ErrTimeout.
var (
	ErrKernelDied = kernel.ErrKernelDied
	ErrTimeout    = kernel.ErrTimeout
	ErrClosed     = kernel.ErrClosed
)

type (
	// PythonError is an exception raised by a cell: its class name, value
	// and traceback (without ANSI codes).
	PythonError = kernel.PythonError
	// TimeoutError reports a cell that exceeded ExecOptions.Timeout.
	TimeoutError = kernel.TimeoutError
)
