//go:build unix

package mcpconn

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
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
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	// Bounded: any process of the user can hold the lock, and a connect
	// must not hang behind it.
	deadline := time.Now().Add(lockWait)
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("%s is locked by another process for more than %v", path, lockWait)
			}
			return nil, err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return func() { f.Close() }, nil // closing releases the lock
}

// lockWait bounds the wait for the token file's lock; a writer holds it
// for one small file write.
const lockWait = time.Second

// oNoFollow makes opening the token file fail on a symbolic link.
const oNoFollow = syscall.O_NOFOLLOW
