//go:build unix

package procattr

import (
	"errors"
	"os"
	"syscall"
)

// SignalGroup sends sig to the process group that pid leads (a child
// started with Group). A group that no longer exists is os.ErrProcessDone.
func SignalGroup(pid int, sig syscall.Signal) error {
	err := syscall.Kill(-pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}
