package procattr

import "syscall"

// Group puts a child in its own process group, killed if this process
// dies.
func Group() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
