//go:build unix

package rundir

import (
	"os"
	"syscall"
)

// ownDir reports whether path is a directory (not a link) that this user
// owns.
func ownDir(path string) bool {
	var st syscall.Stat_t
	return syscall.Lstat(path, &st) == nil && int(st.Uid) == os.Getuid() && st.Mode&syscall.S_IFMT == syscall.S_IFDIR
}

// processGone reports whether no process has the given pid.
func processGone(pid int) bool { return syscall.Kill(pid, 0) == syscall.ESRCH }
