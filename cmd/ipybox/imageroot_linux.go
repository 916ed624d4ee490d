package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ipybox/ipybox/internal/hostproc"
)

// dropRoot, in the ipybox image run as root (`docker run --user 0:0`, for
// a workspace that root owns), gives up every capability before anything
// else runs: the server, and the kernels it starts, are then uid 0 with
// no capability, no-new-privileges and SECBIT_NOROOT, like a container
// started with --cap-drop ALL --security-opt no-new-privileges. uid 0
// stays, because only it may write a directory that root owns (there is
// no user namespace or idmapped mount to be had in a container without
// privileges); what it writes lands on the host as root's, as the owner
// of the workspace expects. Capabilities are per thread, and Go runs
// several, so the drop happens on one locked thread, which then execs
// this binary afresh: the new process starts with nothing to drop.
//
// Another user has no capability to drop; it gets no-new-privileges
// (so that no setuid program of the image can make it root), the same
// way.
//
// It returns nil, having done nothing, outside the image (no
// $IPYBOX_IN_IMAGE), and once the drop is done.
func dropRoot(getenv func(string) string) error {
	if getenv(imageEnv) == "" || dropped() {
		return nil
	}
	runtime.LockOSThread() // never unlocked: this thread execs, or the process exits
	if os.Geteuid() != 0 {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("no-new-privileges: %v", err)
		}
		if err := syscall.Exec("/proc/self/exe", os.Args, os.Environ()); err != nil {
			return fmt.Errorf("re-executing ipybox: %v", err)
		}
		return nil
	}
	fail := func(what string, err error) error {
		return fmt.Errorf("the ipybox image runs as root without capabilities, and %s failed: %v; "+
			"run the container as the workspace's owner instead (docker run --user UID:GID, with the owner's ids: stat -c %%u:%%g DIR)", what, err)
	}
	// NOROOT: uid 0 gets no capabilities from an exec; locked, so that
	// nothing turns it back on.
	bits := secbitNoRoot | secbitNoRootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLocked | secbitKeepCapsLocked
	secure := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits), 0, 0, 0) == nil
	for c := 0; c <= lastCap(); c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !secure {
			// Without CAP_SETPCAP (--cap-drop ALL did it already) the
			// bounding set is checked below.
			break
		}
	}
	unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail("no-new-privileges", err)
	}
	var none [2]unix.CapUserData
	if err := unix.Capset(&unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}, &none[0]); err != nil {
		return fail("clearing the capabilities", err)
	}
	if !secure && capMask("CapBnd") != 0 {
		return fail("dropping the bounding set", syscall.EPERM)
	}
	if err := confineImage(); err != nil {
		return fail("Landlock", err)
	}
	if err := syscall.Exec("/proc/self/exe", os.Args, os.Environ()); err != nil {
		return fail("re-executing ipybox", err)
	}
	return nil
}

// confineImage puts this thread (and, through the exec that follows, the
// server and everything it starts) in hostproc.ImageDomain, unscoped: uid
// 0 without capabilities still owns the image's system folders, and could
// otherwise replace /usr/local/bin/ipybox or write /etc/passwd. What the
// server starts runs in a scoped domain of its own besides
// (hostproc.Confine). Where Landlock lacks what those need (ABI 6), it
// does nothing: they refuse to start, and `ipybox doctor` says why.
func confineImage() error { return hostproc.ImageDomain(false) }

// dropped reports whether this process runs with no-new-privileges and,
// as root, without capabilities: dropRoot's work is done.
func dropped() bool {
	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil || nnp != 1 {
		return false
	}
	return os.Geteuid() != 0 || capMask("CapEff") == 0 && capMask("CapPrm") == 0 && (capMask("CapBnd") == 0 || secureNoRoot())
}

// secureNoRoot reports whether SECBIT_NOROOT is set.
func secureNoRoot() bool {
	b, err := unix.PrctlRetInt(unix.PR_GET_SECUREBITS, 0, 0, 0, 0)
	return err == nil && b&secbitNoRoot != 0
}

// The securebits of <linux/securebits.h>.
const (
	secbitNoRoot              = 1 << 0
	secbitNoRootLocked        = 1 << 1
	secbitNoSetuidFixup       = 1 << 2
	secbitNoSetuidFixupLocked = 1 << 3
	secbitKeepCapsLocked      = 1 << 5
)

// capMask returns a capability set of this thread from /proc ("CapEff",
// "CapBnd"…); all bits set when it cannot be read.
func capMask(name string) uint64 {
	b, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		return ^uint64(0)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err == nil {
				return n
			}
		}
	}
	return ^uint64(0)
}

// lastCap is the highest capability the kernel knows.
func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 63
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 63
	}
	return n
}
