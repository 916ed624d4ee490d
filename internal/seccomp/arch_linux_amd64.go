package seccomp

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	hasX32    = true
)

// legacyCalls are the path system calls that amd64 has besides the *at
// ones (arm64 has only those).
var legacyCalls = []call{
	{nr: unix.SYS_OPEN, op: opOpen, dirfd: -1, path: 0, flags: 1, mode: 2},
	{nr: unix.SYS_CREAT, op: opOpen, dirfd: -1, path: 0, flags: -1, fixedFlags: unix.O_CREAT | unix.O_WRONLY | unix.O_TRUNC, mode: 1},
	{nr: unix.SYS_MKDIR, op: opMkdir, dirfd: -1, path: 0, flags: -1, mode: 1},
	{nr: unix.SYS_MKNOD, op: opMknod, dirfd: -1, path: 0, flags: -1, mode: 1, dev: 2},
	{nr: unix.SYS_RMDIR, op: opUnlink, dirfd: -1, path: 0, flags: -1, fixedFlags: unix.AT_REMOVEDIR, mode: -1},
	{nr: unix.SYS_UNLINK, op: opUnlink, dirfd: -1, path: 0, flags: -1, mode: -1},
	{nr: unix.SYS_RENAME, op: opRename, dirfd: -1, path: 0, dirfd2: -1, path2: 1, flags: -1, mode: -1},
	{nr: unix.SYS_LINK, op: opLink, dirfd: -1, path: 0, dirfd2: -1, path2: 1, flags: -1, mode: -1},
	{nr: unix.SYS_SYMLINK, op: opSymlink, target: 0, dirfd: -1, path: 1, flags: -1, mode: -1},
	{nr: unix.SYS_CHMOD, op: opChmod, dirfd: -1, path: 0, flags: -1, mode: 1},
}
