package seccomp

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// bind() names a socket file with a path behind a pointer, and the guard
// cannot carry a bind out for the caller (it would need the caller's
// socket). So socket files are kept out of the roots by Landlock instead:
// a ruleset that handles only "make a socket" and allows it beneath
// Policy.SocketDirs. A socket in the workspace would otherwise complete a
// bare repository's layout (git takes any objects and refs it can enter)
// or lock a repository (.git/index.lock).

// restrictSockets applies that ruleset to the calling thread. It returns
// ErrNoLandlock where the kernel has no Landlock.
func restrictSockets(dirs []string) error {
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 || int(abi) < 1 {
		return ErrNoLandlock
	}
	const handled = unix.LANDLOCK_ACCESS_FS_MAKE_SOCK
	attr := unix.LandlockRulesetAttr{Handled_access_fs: handled}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr.Handled_access_fs), 0)
	if errno != 0 {
		return fmt.Errorf("landlock: create ruleset: %w", errno)
	}
	defer unix.Close(int(fd))
	for _, d := range dirs {
		pfd, err := unix.Open(d, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // not in this view: nothing to allow
		}
		rule := unix.LandlockPathBeneathAttr{Allowed_access: handled, Parent_fd: int32(pfd)}
		_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&rule)), 0, 0, 0)
		unix.Close(pfd)
		if errno != 0 {
			return fmt.Errorf("landlock: allow sockets in %s: %w", d, errno)
		}
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		return fmt.Errorf("landlock: restrict self: %w", errno)
	}
	return nil
}
