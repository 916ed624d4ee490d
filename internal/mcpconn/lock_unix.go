//go:build unix

package mcpconn

import (
	"context"
	"os"
	"syscall"
	"time"

	"github.com/ipybox/ipybox/internal/flock"
)

// lockFile takes an advisory lock on path (created if missing): exclusive
// to write, shared to read. The returned function releases it.
func lockFile(path string, exclusive bool) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|oNoFollow, 0o600)
	if err != nil {
		if !exclusive && os.IsNotExist(err) {
			// Reading from a folder that does not exist yet: nothing to lock.
			return func() {}, nil
		}
		return nil, err
	}
	// Bounded: any process of the user can hold the lock, and a connect
	// must not hang behind it.
	if err := flock.Lock(context.Background(), f, exclusive, lockWait); err != nil { // bound: lockWait
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil // closing releases the lock
}

// lockWait bounds the wait for the token file's lock; a writer holds it
// for one small file write.
const lockWait = time.Second

// oNoFollow makes opening the token file fail on a symbolic link.
const oNoFollow = syscall.O_NOFOLLOW
