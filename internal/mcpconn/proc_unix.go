//go:build unix

package mcpconn

import (
	"errors"
	"syscall"
	"time"

	"github.com/ipybox/ipybox/internal/procattr"
)

// procAttr puts a stdio server in its own process group, so that stopping
// it reaches its children too, and on Linux kills it if we die (elsewhere
// the end of its stdin tells it).
func procAttr() *syscall.SysProcAttr { return procattr.Group() }

// killGroup ends what is left of process group pgid after its leader has
// exited: SIGTERM, then SIGKILL if the group is still there after grace.
func killGroup(pgid int, grace time.Duration) {
	if pgid <= 0 {
		return
	}
	if err := syscall.Kill(-pgid, syscall.SIGTERM); errors.Is(err, syscall.ESRCH) {
		return
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
}

// groupOf returns the process group that cmd leads, or 0 when it does not
// lead one (a hook may have set its own SysProcAttr).
func groupOf(attr *syscall.SysProcAttr, pid int) int {
	if attr != nil && attr.Setpgid && attr.Pgid == 0 {
		return pid
	}
	return 0
}
