//go:build unix && !linux

package procattr

import "syscall"

// Group puts a child in its own process group. There is no
// parent-death signal here: Close, and the kernel's own parent check, end
// it.
func Group() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
