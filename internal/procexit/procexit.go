// Package procexit turns a blocking wait for an exit (a process's, a
// container's, a remote kernel's) into one that runs once, from the start,
// and that any number of callers wait for, each bounded by its own
// context.
package procexit

import (
	"context"
	"sync"
)

// Exit is the outcome of one wait.
type Exit struct {
	done chan struct{}
	err  error
}

// Reported returns an Exit that report completes: for an exit that
// another party reports (a fork server, of the kernels it forked). The
// first report counts; later ones do nothing.
func Reported() (*Exit, func(error)) {
	e := &Exit{done: make(chan struct{})}
	var once sync.Once
	return e, func(err error) {
		once.Do(func() {
			e.err = err
			close(e.done)
		})
	}
}

// Go runs wait in a goroutine of its own and returns its outcome to be.
// wait should return when the thing it waits for is gone; the goroutine
// lives until then.
func Go(wait func() error) *Exit {
	e := &Exit{done: make(chan struct{})}
	go func() {
		e.err = wait()
		close(e.done)
	}()
	return e
}

// Wait returns wait's error once it has returned, or ctx's error if ctx
// ends first; the wait goes on, and a later Wait can still see its end.
func (e *Exit) Wait(ctx context.Context) error {
	select {
	case <-e.done:
		return e.err
	default:
	}
	select {
	case <-e.done:
		return e.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed once wait has returned.
func (e *Exit) Done() <-chan struct{} { return e.done }
