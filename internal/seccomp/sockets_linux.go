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
	fd, err := SocketRuleset(dirs)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), 0, 0); errno != 0 {
		return fmt.Errorf("landlock: restrict self: %w", errno)
	}
	return nil
}

// SocketRuleset builds the ruleset that restrictSockets applies and
// returns its descriptor, which the caller closes: a process that cannot
// run this package's code (a kernel forked from a pre-imported Python)
// restricts itself with it. It returns ErrNoLandlock where the kernel has
// no Landlock.
func SocketRuleset(dirs []string) (int, error) {
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 || int(abi) < 1 {
		return -1, ErrNoLandlock
	}
	const handled = unix.LANDLOCK_ACCESS_FS_MAKE_SOCK
	attr := unix.LandlockRulesetAttr{Handled_access_fs: handled}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr.Handled_access_fs), 0)
	if errno != 0 {
		return -1, fmt.Errorf("landlock: create ruleset: %w", errno)
	}
	for _, d := range dirs {
		pfd, err := unix.Open(d, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // not in this view: nothing to allow
		}
		rule := unix.LandlockPathBeneathAttr{Allowed_access: handled, Parent_fd: int32(pfd)}
		_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&rule)), 0, 0, 0)
		unix.Close(pfd)
		if errno != 0 {
			unix.Close(int(fd))
			return -1, fmt.Errorf("landlock: allow sockets in %s: %w", d, errno)
		}
	}
	return int(fd), nil
}
