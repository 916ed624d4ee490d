// Package cellctl is the plumbing between the ipybox package and
// kernel.Execute for one cell: the functions the Executor runs on the cell's
// goroutine (approval requests, in order with the cell's output) and the
// pausable time budget. It is internal so that the kernel package's public
// API stays what users call.
package cellctl

import (
	"context"
	"time"
)

// Call is a function to run on the goroutine of kernel.Execute while a cell
// runs.
type Call struct {
	// After, when set, holds Run until the iopub message ipybox_sync with
	// this id has arrived (the runtime publishes it behind the output
	// printed before a tool call), or until SyncWait has passed.
	After string
	Run   func()
}

// SyncWait bounds how long a Call waits for its sync marker.
const SyncWait = time.Second

// Hooks are a cell's plumbing. Every field is optional.
type Hooks struct {
	// Calls delivers functions to run while the cell runs, in order with
	// its events.
	Calls <-chan Call
	// Budget, when set, replaces ExecOptions.Timeout with a pausable
	// budget (the Executor pauses it while an approval is pending).
	Budget *Budget
	// TraceParent, when set, is the W3C traceparent of the cell's span:
	// it goes in the execute_request's metadata, where kernel code reads
	// it (ipybox_runtime.traceparent()).
	TraceParent string
}

type hooksKey struct{}

// With returns ctx carrying h for kernel.Execute.
func With(ctx context.Context, h *Hooks) context.Context {
	return context.WithValue(ctx, hooksKey{}, h)
}

// From returns the hooks With attached to ctx, or nil.
func From(ctx context.Context) *Hooks {
	h, _ := ctx.Value(hooksKey{}).(*Hooks)
	return h
}
