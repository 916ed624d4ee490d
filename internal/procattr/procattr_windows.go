package procattr

import (
	"os"
	"syscall"

	"golang.org/x/sys/windows"
)

// Group gives a child its own console process group. Windows has no
// parent-death signal and no signals to send to a group: SignalGroup ends
// the child itself, and what must die with ipybox runs in a job object
// (internal/lifeline).
func Group() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{CreationFlags: windows.CREATE_NEW_PROCESS_GROUP}
}

// SignalGroup ends the process pid (any signal but 0 kills it here).
func SignalGroup(pid int, sig syscall.Signal) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return os.ErrProcessDone
	}
	defer p.Release()
	if sig == 0 {
		return nil
	}
	return p.Kill()
}
