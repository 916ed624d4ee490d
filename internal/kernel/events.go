package kernel

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Event is something a running cell produced: *Output, *Display or
// *ClearOutput while it runs. The ipybox package's Stream also yields its
// *ApprovalRequest and, last, the *Result, which are Events too.
type Event interface{ isEvent() }

// EventBase makes a type an Event when embedded. It exists so that the ipybox
// package can yield its ApprovalRequest among these events; nothing else
// needs it.
type EventBase struct{}

func (EventBase) isEvent() {}

// Output is a chunk of text the cell wrote.
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

// ClearOutput means the cell cleared its output (clear_output). With Wait,
// the clearing takes effect when the next output arrives.
type ClearOutput struct{ Wait bool }

func (*Output) isEvent()      {}
func (*Display) isEvent()     {}
func (*ClearOutput) isEvent() {}
func (*Result) isEvent()      {}

// Result is the outcome of a finished cell. Execute returns it; the ipybox
// package's Stream yields it last.
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
	// status message did not within the grace period: output may be missing.
	Truncated bool
	// Omitted is how many bytes of text KeepText left out of Text (they
	// were streamed as *Output events); zero when Text is whole.
	Omitted int64
	// OmittedDisplays is how many displays KeepText left out of Displays:
	// past KeepText bytes of display messages, the later displays are
	// streamed as *Display events but not kept. Their text is in Text's
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

// Sentinel errors callers branch on.
var (
	// ErrKernelDied means the kernel process exited or stopped answering
	// its heartbeat. The next call starts a fresh kernel.
	ErrKernelDied = errors.New("kernel died")
	// ErrTimeout means a cell exceeded its time budget and was interrupted.
	ErrTimeout = errors.New("execution timed out")
	// ErrClosed is returned by calls on a closed kernel.
	ErrClosed = errors.New("kernel closed (Close was called)")
)

// PythonError is an exception raised by a cell.
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

// TimeoutError reports a cell that exceeded its budget. It matches
// ErrTimeout with errors.Is.
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

// DiedError reports a kernel that died during a call. It matches
// ErrKernelDied with errors.Is.
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

var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07`)

// stripANSI removes terminal escape sequences.
func stripANSI(s string) string {
	if !strings.Contains(s, "\x1b") {
		return s
	}
	return ansi.ReplaceAllString(s, "")
}
