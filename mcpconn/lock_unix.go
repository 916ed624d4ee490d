//go:build unix

package mcpconn

import (
	"os"
	"syscall"
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
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil // closing releases the lock
}

// oNoFollow makes opening the token file fail on a symbolic link.
const oNoFollow = syscall.O_NOFOLLOW
