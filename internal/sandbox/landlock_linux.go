package sandbox

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// landlockABIResolveUnix is the first Landlock ABI that controls connecting
// to path unix sockets (LANDLOCK_ACCESS_FS_RESOLVE_UNIX).
const landlockABIResolveUnix = 9

// landlockABI returns the Landlock ABI version of the running kernel, or 0
// when Landlock is unavailable.
func landlockABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

const (
	llRead = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	llV1   = llRead | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_FILE | unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK | unix.LANDLOCK_ACCESS_FS_MAKE_FIFO |
		unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK | unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	// llFile are the rights that apply to a file (not a directory).
	llFile = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
)

// applyLandlock restricts the calling thread as c asks, as far as the
// running kernel allows: Landlock is a best-effort layer on top of the
// mount namespace, so what the kernel lacks is skipped, not an error.
func applyLandlock(c *initConfig) error {
	fd, err := landlockRuleset(c)
	if err != nil || fd < 0 {
		return err
	}
	defer unix.Close(fd)
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), 0, 0); errno != 0 {
		return fmt.Errorf("restrict self: %w", errno)
	}
	return nil
}

// landlockRuleset builds the ruleset that applyLandlock applies, and
// returns its descriptor (-1 when c asks for nothing the kernel offers).
// A forked kernel (fork_linux.go) gets the same descriptor and restricts
// itself with it.
func landlockRuleset(c *initConfig) (int, error) {
	abi := landlockABI()
	if abi < 1 || !c.Landlock && !c.RestrictUnixConnect && !c.ScopeAbstract {
		return -1, nil
	}
	var handled uint64
	if c.Landlock {
		handled = llV1
		if abi >= 2 {
			handled |= unix.LANDLOCK_ACCESS_FS_REFER
		}
		if abi >= 3 {
			handled |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
		}
		if abi >= 5 {
			handled |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
		}
	}
	resolveUnix := c.RestrictUnixConnect && abi >= landlockABIResolveUnix
	if resolveUnix {
		handled |= unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX
	}
	var scoped uint64
	if c.ScopeAbstract && abi >= 6 {
		scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
	}
	if c.Landlock && abi >= 6 {
		// The program may signal what it started, but not the init
		// (outside its Landlock domain): the init relays the host's
		// signals and must not be disturbed.
		scoped |= unix.LANDLOCK_SCOPE_SIGNAL
	}
	if handled == 0 && scoped == 0 {
		return -1, nil
	}
	attr := unix.LandlockRulesetAttr{Handled_access_fs: handled, Scoped: scoped}
	size := unsafe.Sizeof(attr.Handled_access_fs)
	switch {
	case abi >= 6:
		size = unsafe.Offsetof(attr.Scoped) + unsafe.Sizeof(attr.Scoped)
	case abi >= 4:
		size = unsafe.Offsetof(attr.Handled_access_net) + unsafe.Sizeof(attr.Handled_access_net)
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return -1, fmt.Errorf("create ruleset: %w", errno)
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(int(fd))
		}
	}()
	add := func(path string, access uint64) error {
		access &= handled
		if access == 0 {
			return nil
		}
		pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil // not in this view: nothing to allow
		}
		defer unix.Close(pfd)
		var st unix.Stat_t
		if err := unix.Fstat(pfd, &st); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			access &= llFile
		}
		rule := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(pfd)}
		_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, unix.LANDLOCK_RULE_PATH_BENEATH,
			uintptr(unsafe.Pointer(&rule)), 0, 0, 0)
		if errno != 0 {
			return fmt.Errorf("add rule for %s: %w", path, errno)
		}
		return nil
	}
	if c.Landlock {
		for _, p := range c.ReadOnly {
			if err := add(p, llRead); err != nil {
				return -1, err
			}
		}
		for _, p := range c.Writable {
			if err := add(p, handled&^unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX); err != nil {
				return -1, err
			}
		}
	}
	if resolveUnix {
		for _, p := range c.UnixConnect {
			if err := add(p, unix.LANDLOCK_ACCESS_FS_RESOLVE_UNIX); err != nil {
				return -1, err
			}
		}
	}
	ok = true
	return int(fd), nil
}
