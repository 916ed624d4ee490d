package hostproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ConfineCommand is the hidden subcommand of ipybox's binary through which,
// in the Docker image, every process that the server starts runs
// (Confine): `ipybox _ipybox-confine PATH ARGV0 ARGS...`.
const ConfineCommand = "_ipybox-confine"

// Confine, in ipybox's Docker image (IPYBOX_IN_IMAGE=1), makes cmd start
// through ipybox's own binary (ConfineCommand), which puts the process in a
// Landlock domain of its own before it execs cmd's program: the image's
// system folders read-only (ImageDomain), and no signal nor abstract
// socket outside the domain (Landlock's scoping, Linux 6.12).
//
// There kernels share the server's uid, run without a sandbox, and can
// write the workspace's .ipybox: the venv whose interpreter starts the
// next kernel and the fork server (its bin/python, a .pth or a
// sitecustomize run before any of the kernel's own code), and the
// registry of servers. What the server starts from there is kernel code,
// and it is confined before its first instruction, as a kernel is: it can
// end, signal or ptrace neither the server nor another session's
// processes. Kernels, the fork server, stdio MCP servers, the pip and venv
// helpers and Python probes all start here (internal/kernel's
// startFiltered, and Prepare). Outside the image it does nothing.
func Confine(cmd *exec.Cmd) error {
	if !inImage || cmd.Path == "" {
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("confine %s: ipybox's own binary: %w", cmd.Path, err)
	}
	if len(cmd.Args) > 1 && cmd.Args[1] == ConfineCommand {
		return nil // already
	}
	argv := cmd.Args
	if len(argv) == 0 {
		argv = []string{cmd.Path}
	}
	cmd.Args = append([]string{self, ConfineCommand, cmd.Path}, argv...)
	cmd.Path = self
	return nil
}

// ConfineMain is ConfineCommand: it puts this process in the image's
// domain for what the server starts (ImageDomain, scoped), then execs
// args[0] with the argument vector args[1:]. Without Landlock's scoping
// it refuses to run as root, where the process would share the server's
// uid and own the image's files; under another uid it runs as the
// server's processes do.
func ConfineMain(args []string) int {
	if len(args) < 2 {
		fmt.Fprintf(os.Stderr, "ipybox %s: want PATH ARGV0 [ARGS...]\n", ConfineCommand)
		return 2
	}
	runtime.LockOSThread() // the domain is this thread's, which execs
	if err := ImageDomain(true); err != nil {
		if os.Geteuid() == 0 || err != errNoScope {
			fmt.Fprintf(os.Stderr, "ipybox: %s runs as uid %d in the ipybox image and must be confined: %v; run the container as the workspace's owner instead (docker run --user UID:GID)\n", args[0], os.Geteuid(), err)
			return 1
		}
	}
	err := syscall.Exec(args[0], args[1:], os.Environ())
	fmt.Fprintf(os.Stderr, "ipybox: exec %s: %v\n", args[0], err)
	return 127
}

// imageSystem are the image's folders that uid 0 owns and that neither the
// server nor anything it starts writes: the programs, libraries and
// configuration whatever runs next in the container uses.
var imageSystem = []string{"usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "boot", "opt", "var", "root"}

// landlockWrite are the Landlock rights that change a file system:
// write and truncate a file, make and remove entries, and link or rename
// across folders.
const landlockWrite = unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR |
	unix.LANDLOCK_ACCESS_FS_REMOVE_FILE | unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
	unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK | unix.LANDLOCK_ACCESS_FS_MAKE_FIFO |
	unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK | unix.LANDLOCK_ACCESS_FS_MAKE_SYM | unix.LANDLOCK_ACCESS_FS_REFER |
	unix.LANDLOCK_ACCESS_FS_TRUNCATE

// Landlock's scopes (ABI 6): abstract unix sockets and signals.
const landlockScopes = 1<<0 | 1<<1

var errNoScope = errors.New("this kernel lacks Landlock's signal scoping (ABI 6, Linux 6.12)")

// landlockRead are the Landlock rights that read a file system: a file's
// content and a folder's entries.
const landlockRead = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR

// ImageDomain puts the calling thread (and what it execs) in a Landlock
// domain in which the image's system folders (/usr, /etc, /bin, /sbin,
// /lib*, /var but /var/tmp, /opt, /boot, /root) are read-only; every
// other top-level folder (the workspace's /app, /tmp, /run, volumes) stays
// writable. With scope (what the server starts), the domain also keeps
// signals and abstract unix sockets inside it, and ImagePrivate, the
// server's own files, is neither readable nor writable: reads are allowed
// by top-level entry, all but that one, so "/" itself cannot be listed.
// Without Landlock ABI 6 it does nothing, and returns errNoScope when
// scope was asked. The caller locks its thread.
func ImageDomain(scope bool) error {
	abi, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 || int(abi) < 6 {
		if scope {
			return errNoScope
		}
		return nil
	}
	attr := unix.LandlockRulesetAttr{Handled_access_fs: landlockWrite}
	if scope {
		attr.Handled_access_fs |= landlockRead
		attr.Scoped = landlockScopes
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if errno != 0 {
		return fmt.Errorf("create a ruleset: %v", errno)
	}
	defer unix.Close(int(fd))
	rules, err := imageRules(scope)
	if err != nil {
		return err
	}
	for _, r := range rules {
		if err := addRule(int(fd), r.path, r.access); err != nil {
			return err
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no-new-privileges: %v", err)
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		return fmt.Errorf("restrict this process: %v", errno)
	}
	return nil
}

type imageRule struct {
	path   string
	access uint64
}

// imageRules lists ImageDomain's rules: writes under every top-level
// folder but the system's (and /var/tmp); with scope, reads under every
// top-level entry but ImagePrivate. A link at the top (/bin -> usr/bin)
// gets no rule: what it points to has its own.
func imageRules(scope bool) ([]imageRule, error) {
	ents, err := os.ReadDir("/")
	if err != nil {
		return nil, err
	}
	rules := []imageRule{{"/var/tmp", landlockWrite}}
	for _, e := range ents {
		p := "/" + e.Name()
		var access uint64
		switch {
		case scope && p == ImagePrivate:
			continue
		case e.IsDir():
			if !slices.Contains(imageSystem, e.Name()) {
				access = landlockWrite
			}
			if scope {
				access |= landlockRead
			}
		case e.Type().IsRegular() && scope: // /.dockerenv
			access = unix.LANDLOCK_ACCESS_FS_READ_FILE
		}
		if access != 0 {
			rules = append(rules, imageRule{p, access})
		}
	}
	return rules, nil
}

// addRule allows access beneath path (not followed if it is a link); a
// path that is gone is skipped.
func addRule(ruleset int, path string, access uint64) error {
	flags := unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC
	d, err := unix.Open(path, flags, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(d)
	var st unix.Stat_t
	if unix.Fstat(d, &st) != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return nil
	}
	rule := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(d)}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&rule)), 0, 0, 0)
	if errno != 0 {
		return fmt.Errorf("allow %#x under %s: %v", access, path, errno)
	}
	return nil
}
