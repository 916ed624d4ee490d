package seccomp

import (
	"errors"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Install applies prog to the calling thread, which must have no_new_privs
// set. Without TSYNC it covers only this thread, which then starts or
// execs the program; a Go caller locks the goroutine to its thread first
// and never unlocks it.
func Install(prog []unix.SockFilter) error {
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	return unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0)
}

// InstallListener applies prog (built with Options.Guard) to the calling
// thread, as Install does, and returns the guard's listener: the
// descriptor on which the calls that prog hands to the guard arrive (see
// Guard). The caller passes it to the guard and closes its copy.
//
// Where the kernel has it (Linux 5.19), a call the guard has received
// waits for its answer without being interrupted by a signal other than a
// fatal one: otherwise a signal would restart a call that the guard may
// already have carried out (a file made, then "exists" on the retry).
func InstallListener(prog []unix.SockFilter) (int, error) {
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	install := func(flags uintptr) (int, error) {
		fd, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
		if errno != 0 {
			return -1, errno
		}
		return int(fd), nil
	}
	fd, err := install(unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV)
	if errors.Is(err, unix.EINVAL) {
		fd, err = install(unix.SECCOMP_FILTER_FLAG_NEW_LISTENER)
	}
	if err != nil {
		return -1, err
	}
	unix.CloseOnExec(fd)
	return fd, nil
}
