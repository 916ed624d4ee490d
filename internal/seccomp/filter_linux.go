package seccomp

import (
	"errors"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"
)

// Options says what the filter adds to its fixed rules, which every
// process ipybox starts gets: a foreign architecture is killed, x32 calls
// and io_uring (which would carry out calls the filter never sees) fail,
// openat2 is unavailable, and no mode may carry S_ISUID or S_ISGID.
type Options struct {
	// Confine adds the sandbox's rules: the kernel keyrings (shared with
	// the host user) and AF_VSOCK sockets fail with EPERM, memfd_create
	// and System V shared memory with ENOSYS, and shared anonymous
	// mappings with EPERM (memory held that way escapes RLIMIT_DATA).
	Confine bool
	// DenyUnix makes socket(AF_UNIX, …) fail with EPERM.
	DenyUnix bool
	// Guard hands the path-changing system calls to a guard (see
	// InstallWithGuard and Guard); without it they run, with only the
	// setuid and setgid mode bits refused.
	Guard bool
}

// op is what a guarded system call does to a path.
type op uint8

const (
	opOpen     op = iota + 1 // open a file; create it with O_CREAT
	opMkdir                  // create a folder
	opMknod                  // create a FIFO, socket or regular file
	opUnlink                 // remove a name (a folder with AT_REMOVEDIR)
	opRename                 // move a name
	opLink                   // make a second name of a file
	opSymlink                // create a symbolic link
	opTruncate               // shorten or lengthen a file
	opChmod                  // change a file's mode
	opFchmod                 // change the mode of an open file
)

// call describes a guarded system call: where its arguments are. An index
// of -1 means "not an argument": dirfd then means AT_FDCWD, flags
// fixedFlags, mode none.
type call struct {
	nr            uintptr
	op            op
	dirfd, path   int
	dirfd2, path2 int // rename's and link's destination
	target        int // symlink's contents
	fd            int // fchmod's descriptor
	flags         int
	fixedFlags    uint64
	mode          int
	dev           int
}

// atCalls are the path system calls every architecture has.
var atCalls = []call{
	{nr: unix.SYS_OPENAT, op: opOpen, dirfd: 0, path: 1, flags: 2, mode: 3},
	{nr: unix.SYS_MKDIRAT, op: opMkdir, dirfd: 0, path: 1, flags: -1, mode: 2},
	{nr: unix.SYS_MKNODAT, op: opMknod, dirfd: 0, path: 1, flags: -1, mode: 2, dev: 3},
	{nr: unix.SYS_UNLINKAT, op: opUnlink, dirfd: 0, path: 1, flags: 2, mode: -1},
	{nr: unix.SYS_RENAMEAT, op: opRename, dirfd: 0, path: 1, dirfd2: 2, path2: 3, flags: -1, mode: -1},
	{nr: unix.SYS_RENAMEAT2, op: opRename, dirfd: 0, path: 1, dirfd2: 2, path2: 3, flags: 4, mode: -1},
	{nr: unix.SYS_LINKAT, op: opLink, dirfd: 0, path: 1, dirfd2: 2, path2: 3, flags: 4, mode: -1},
	{nr: unix.SYS_SYMLINKAT, op: opSymlink, target: 0, dirfd: 1, path: 2, flags: -1, mode: -1},
	{nr: unix.SYS_TRUNCATE, op: opTruncate, dirfd: -1, path: 0, flags: -1, mode: -1},
	{nr: unix.SYS_FCHMODAT, op: opChmod, dirfd: 0, path: 1, flags: -1, mode: 2},
	{nr: sysFchmodat2, op: opChmod, dirfd: 0, path: 1, flags: 3, mode: 2},
	{nr: unix.SYS_FCHMOD, op: opFchmod, fd: 0, dirfd: -1, path: -1, flags: -1, mode: 1},
}

// sysFchmodat2 is fchmodat2 (Linux 6.6), the same number everywhere.
const sysFchmodat2 = 452

// calls returns every guarded call of this architecture.
func calls() []call { return slices.Concat(atCalls, legacyCalls) }

func callByNr(nr int32) (call, bool) {
	for _, c := range calls() {
		if c.nr == uintptr(nr) {
			return c, true
		}
	}
	return call{}, false
}

// Offsets in struct seccomp_data.
const (
	offNr      = 0
	offArch    = 4
	offArg0Low = 16 // low 32 bits of args[0] (little-endian)
	x32Bit     = 0x40000000
)

func argLow(i int) uint32 { return uint32(offArg0Low + 8*i) }

// setugid are the mode bits no file made in a sandbox may carry.
const setugid = unix.S_ISUID | unix.S_ISGID

// writeFlags are the open flags that can change or create a file.
const writeFlags = unix.O_WRONLY | unix.O_RDWR | unix.O_CREAT | unix.O_TRUNC

// unavailableCalls fail with ENOSYS, as on a kernel without them, so that
// programs fall back: openat2's mode is behind a pointer the filter
// cannot read (glibc's open and Python's never use it); with Confine,
// memory that memfd_create and System V shared memory (in the sandbox's
// own IPC namespace) hand out is bounded by nothing, while the files in
// /dev/shm and /tmp, where the fallbacks go, are.
var unavailableCalls = []uintptr{unix.SYS_OPENAT2}

var confinedUnavailable = []uintptr{unix.SYS_MEMFD_CREATE, unix.SYS_MEMFD_SECRET, unix.SYS_SHMGET}

// noXattrCalls fail with EOPNOTSUPP, as on a file system without extended
// attributes (shutil.copystat and cp -p carry on): an ACL
// (system.posix_acl_access) changes a file's mode as chmod does, and
// security.capability gives a program file capabilities, which a setuid
// bit's refusal would not stop.
var noXattrCalls = []uintptr{
	unix.SYS_SETXATTR, unix.SYS_LSETXATTR, unix.SYS_FSETXATTR,
	unix.SYS_REMOVEXATTR, unix.SYS_LREMOVEXATTR, unix.SYS_FREMOVEXATTR,
	unix.SYS_SETXATTRAT, unix.SYS_REMOVEXATTRAT,
}

// deniedCalls fail with EPERM: io_uring carries out opens and chmods that
// the filter would never see.
var deniedCalls = []uintptr{unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER}

var confinedDenied = []uintptr{unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY}

// ErrUnsupported is returned by Program on an architecture without a
// filter.
var ErrUnsupported = errors.New("the seccomp filter is not implemented for this CPU architecture")

// Supported reports whether Program works on this architecture.
func Supported() bool { return auditArch != 0 }

// Program returns the filter (see the package doc).
func Program(o Options) ([]unix.SockFilter, error) {
	if auditArch == 0 {
		return nil, ErrUnsupported
	}
	const (
		ld     = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		ret    = unix.BPF_RET | unix.BPF_K
		allow  = unix.SECCOMP_RET_ALLOW
		notify = unix.SECCOMP_RET_USER_NOTIF
	)
	var a bpfAsm
	a.stmt(ld, offArch)
	a.jump(unix.BPF_JEQ, auditArch, "arch_ok", "")
	a.stmt(ret, unix.SECCOMP_RET_KILL_PROCESS)
	a.label("arch_ok")
	a.stmt(ld, offNr)
	if hasX32 {
		a.jump(unix.BPF_JSET, x32Bit, "eperm", "")
	}
	denied, unavailable := deniedCalls, unavailableCalls
	if o.Confine {
		denied = slices.Concat(denied, confinedDenied)
		unavailable = slices.Concat(unavailable, confinedUnavailable)
	}
	for _, nr := range denied {
		a.jump(unix.BPF_JEQ, uint32(nr), "eperm", "")
	}
	for _, nr := range unavailable {
		a.jump(unix.BPF_JEQ, uint32(nr), "enosys", "")
	}
	for _, nr := range noXattrCalls {
		a.jump(unix.BPF_JEQ, uint32(nr), "eopnotsupp", "")
	}
	if o.Confine {
		a.jump(unix.BPF_JEQ, uint32(unix.SYS_MMAP), "mmap", "")
	}
	if o.Confine || o.DenyUnix {
		a.jump(unix.BPF_JEQ, uint32(unix.SYS_SOCKET), "socket", "")
	}
	cs := calls()
	for _, c := range cs {
		a.jump(unix.BPF_JEQ, uint32(c.nr), fmt.Sprintf("sys%d", c.nr), "")
	}
	a.stmt(ret, allow)

	// One block per path call: refuse the setuid and setgid bits, then
	// hand it to the guard (open and openat only when they may write).
	for _, c := range cs {
		a.label(fmt.Sprintf("sys%d", c.nr))
		if c.mode >= 0 && c.op != opUnlink {
			a.stmt(ld, argLow(c.mode))
			a.jump(unix.BPF_JSET, setugid, "eperm", "")
		}
		switch {
		case !o.Guard:
			a.stmt(ret, allow)
		case c.op == opOpen && c.flags >= 0:
			a.stmt(ld, argLow(c.flags))
			a.jump(unix.BPF_JSET, writeFlags, "notify", "")
			a.stmt(ret, allow)
		default:
			a.stmt(ret, notify)
		}
	}
	a.label("mmap")
	a.stmt(ld, argLow(3)) // flags
	a.stmt(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	a.jump(unix.BPF_JEQ, unix.MAP_SHARED|unix.MAP_ANONYMOUS, "eperm", "")
	a.stmt(ret, allow)
	a.label("socket")
	a.stmt(ld, argLow(0))
	if o.Confine {
		a.jump(unix.BPF_JEQ, unix.AF_VSOCK, "eperm", "")
	}
	if o.DenyUnix {
		a.jump(unix.BPF_JEQ, unix.AF_UNIX, "eperm", "")
	}
	a.stmt(ret, allow)
	a.label("notify")
	a.stmt(ret, notify)
	a.label("eopnotsupp")
	a.stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.EOPNOTSUPP))
	a.label("enosys")
	a.stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS))
	a.label("eperm")
	a.stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM))
	return a.assemble()
}
