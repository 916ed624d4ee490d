package ipybox

import (
	"errors"

	"github.com/ipybox/ipybox/internal/kernel"
)

// The events of a cell are the kernel package's, so that nothing is copied
// or converted on the way. Stream yields *Output, *Display, *ClearOutput
// and *ApprovalRequest events, then the *Result.
type (
	// Event is one of *Output, *Display, *ClearOutput, *ApprovalRequest
	// or, last, *Result.
	Event = kernel.Event
	// Output is a chunk of text a cell wrote.
	Output = kernel.Output
	// Display is a rich output of a cell, or an update of an earlier one.
	Display = kernel.Display
	// ClearOutput means the cell cleared its output.
	ClearOutput = kernel.ClearOutput
	// Result is the outcome of a cell. Stream yields it last; Execute
	// returns it.
	Result = kernel.Result
)

// Errors callers branch on. A Python exception is a *PythonError; a timeout
// is a *TimeoutError, which matches ErrTimeout.
var (
	ErrKernelDied = kernel.ErrKernelDied
	ErrTimeout    = kernel.ErrTimeout
	// ErrClosed is returned by an Executor's methods after Close, and to a
	// cell that Close ended.
	ErrClosed = errors.New("ipybox: executor closed")
)

// executorErr reports the kernel's ErrClosed as the Executor's: the user
// closed an Executor, not a kernel.
func executorErr(err error) error {
	if errors.Is(err, kernel.ErrClosed) {
		return ErrClosed
	}
	return err
}

type (
	// PythonError is an exception raised by a cell: its class name, value
	// and traceback (without ANSI codes).
	PythonError = kernel.PythonError
	// TimeoutError reports a cell that exceeded ExecOptions.Timeout.
	TimeoutError = kernel.TimeoutError
	// DiedError says when and how a kernel died: Result.Restarted, for a
	// death between calls, and the error of a call the death ended, which
	// matches ErrKernelDied.
	DiedError = kernel.DiedError
)
