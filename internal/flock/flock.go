// Package flock takes advisory locks on open files, bounded in time: any
// process of the user can hold such a lock, and no caller may hang behind
// it. Where flock does not exist (Windows), Lock takes no lock.
package flock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// ErrHeld is what Lock's error wraps when another holder kept the lock
// past the wait.
var ErrHeld = errors.New("locked by another process")

// poll is the pause between two tries of a lock that is held.
const poll = 10 * time.Millisecond

// Lock takes an advisory lock on f, exclusive or shared, waiting at most
// wait (or until ctx ends) while another holds it. Closing f releases it.
func Lock(ctx context.Context, f *os.File, exclusive bool, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		held, err := try(f, exclusive)
		if err != nil {
			return err
		}
		if !held {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is %w for more than %v", f.Name(), ErrHeld, wait)
		}
		select {
		case <-time.After(poll):
		case <-ctx.Done():
			return fmt.Errorf("waiting for the lock on %s: %w", f.Name(), ctx.Err())
		}
	}
}
