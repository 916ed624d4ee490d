package seccomp

import (
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// GuardSupported reports whether this kernel can run the guard: seccomp's
// user notification, and handing a file to the caller as the answer to
// its call (SECCOMP_ADDFD_FLAG_SEND, Linux 5.14). The error says what is
// missing.
func GuardSupported() error {
	if !Supported() {
		return ErrUnsupported
	}
	action := uint32(unix.SECCOMP_RET_USER_NOTIF)
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action))); e != 0 {
		return fmt.Errorf("the kernel has no seccomp user notification (%v); the workspace guard needs Linux 5.14 or newer", e)
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return err
	}
	if major, minor, ok := kernelVersion(unix.ByteSliceToString(u.Release[:])); ok && (major < 5 || major == 5 && minor < 14) {
		return fmt.Errorf("the running kernel, Linux %d.%d, lacks SECCOMP_ADDFD_FLAG_SEND; the workspace guard needs Linux 5.14 or newer", major, minor)
	}
	return nil
}

func kernelVersion(release string) (major, minor int, ok bool) {
	digits := func(s string) string {
		end := 0
		for end < len(s) && s[end] >= '0' && s[end] <= '9' {
			end++
		}
		return s[:end]
	}
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(digits(parts[0]))
	minor, err2 := strconv.Atoi(digits(parts[1]))
	return major, minor, err1 == nil && err2 == nil
}
