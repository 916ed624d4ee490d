// Package seccomp builds the seccomp filter of every process ipybox starts
// in a sandbox or a container, installs it, and runs the workspace guard:
// the supervisor that decides, for the system calls the filter hands to
// it, whether kernel code may create, change, rename or remove a path.
//
// One function, Program, computes the filter for every launcher: the
// bwrap sandbox's init, the container's init, the fork server and the
// helper sandboxes (pip, virtualenv creation, sandboxed stdio MCP
// servers) all start their programs under it. It
//   - kills the process on a foreign audit architecture, fails x32 system
//     calls, io_uring, the kernel keyrings, AF_VSOCK (and AF_UNIX when
//     asked), memfd_create, System V shared memory and shared anonymous
//     mappings (memory outside the memory limit), and openat2 (its mode
//     is behind a pointer the filter cannot read);
//   - refuses every way to make a file setuid or setgid: chmod, fchmod,
//     fchmodat, fchmodat2, open, openat, creat, mkdir, mkdirat, mknod and
//     mknodat with S_ISUID or S_ISGID in their mode fail with EPERM. An
//     archive's extraction, shutil.copymode and install -m all end in one
//     of these;
//   - with a guard, hands the calls that create, change or remove a name
//     (open and openat for writing, creat, mkdir, mknod, rename, link,
//     symlink, unlink, rmdir, truncate, chmod) to the guard (see Guard).
//
// Linux only; elsewhere Program reports that it has nothing to offer.
package seccomp
