package container

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// When ipybox runs as root and the workspace belongs to root, the kernel
// must still not be root (uid 0 in a container without a user namespace
// is host root, capabilities or not), yet it must write the workspace,
// and its files must land on disk as root's. The bubblewrap sandbox meets
// the same need with idmapped mounts (sandbox/prep_linux.go); so does the
// container: ipybox clones the directory as an idmapped mount on which
// root's files show as MappedID's, attaches it at a host path that the
// Docker daemon can see, and binds that path into the container, where
// the kernel runs as MappedID. A bind of an idmapped mount keeps its
// idmapping. The mount point is outside the run directory, so that
// nothing that removes the run directory recursively can reach through it
// into the workspace; Close detaches it, and a start reaps those of a
// killed ipybox.

// idmapRoot is where the idmapped mounts are attached: a root-only
// directory on /run (cleared at boot), or in the temporary directory.
func idmapRoot() string {
	if fi, err := os.Lstat("/run"); err == nil && fi.IsDir() {
		return "/run/ipybox-idmap"
	}
	return filepath.Join(os.TempDir(), "ipybox-idmap")
}

// idmapSeq numbers the mounts of this process.
var idmapSeq atomic.Int64

// idmapMount clones dir as an idmapped mount on which the ids from (its
// owner's) appear as to, and attaches it under idmapRoot. It returns the
// mount point, which detachIdmap removes.
func idmapMount(dir string, fromUID, fromGID, toUID, toGID int) (string, error) {
	if err := sameMountNamespace(); err != nil {
		return "", err
	}
	ns, err := idmapUserns(fromUID, fromGID, toUID, toGID)
	if err != nil {
		return "", err
	}
	defer ns.Close()
	return cloneMount(dir, int(ns.Fd()))
}

// plainMount clones dir as a mount without setuid or devices (nosuid,
// nodev: Docker binds a folder with the flags of the mount it lies on,
// and has no option to add them), and attaches it under idmapRoot, as
// idmapMount does.
func plainMount(dir string) (string, error) {
	if err := sameMountNamespace(); err != nil {
		return "", err
	}
	return cloneMount(dir, -1)
}

// cloneMount clones dir, nosuid and nodev, idmapped through the user
// namespace userns when it is not -1, and attaches the clone under
// idmapRoot.
func cloneMount(dir string, userns int) (string, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return "", fmt.Errorf("clone %s: %w", dir, err)
	}
	defer unix.Close(fd)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if userns >= 0 {
		attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
		attr.Userns_fd = uint64(userns)
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		if userns >= 0 {
			return "", fmt.Errorf("idmap %s: %w (its file system may not support idmapped mounts)", dir, err)
		}
		return "", fmt.Errorf("nosuid,nodev on a clone of %s: %w", dir, err)
	}
	root := idmapRoot()
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", err
	}
	if fi, err := os.Lstat(root); err != nil || !fi.IsDir() || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		return "", fmt.Errorf("%s is not a directory of root's", root)
	}
	at := filepath.Join(root, fmt.Sprintf("%d-%s-%d", os.Getpid(), startTime(os.Getpid()), idmapSeq.Add(1)))
	if err := os.Mkdir(at, 0o700); err != nil {
		return "", err
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, at, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		os.Remove(at)
		return "", fmt.Errorf("attach the clone of %s: %w", dir, err)
	}
	return at, nil
}

// detachIdmap detaches an idmapped mount and removes its mount point. It
// never removes anything recursively: a mount point that is still
// mounted stays, rather than be emptied through into the workspace.
func detachIdmap(at string) error {
	err := unix.Unmount(at, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) { // EINVAL: not mounted
		return fmt.Errorf("detach %s: %w", at, err)
	}
	if err := os.Remove(at); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// reapIdmaps detaches the idmapped mounts of ipybox processes of this
// host that are gone (a SIGKILLed ipybox leaves its mounts behind).
func reapIdmaps() int {
	ents, err := os.ReadDir(idmapRoot())
	if err != nil {
		return 0
	}
	host, _ := os.Hostname()
	n := 0
	for _, e := range ents {
		parts := strings.SplitN(e.Name(), "-", 3)
		if len(parts) != 3 || !Orphaned(host+"/"+parts[0]+"/"+parts[1], host) {
			continue
		}
		if detachIdmap(filepath.Join(idmapRoot(), e.Name())) == nil {
			n++
		}
	}
	return n
}

// sameMountNamespace checks that this process sees the mounts of init's
// mount namespace, where the Docker daemon runs: a mount attached in a
// namespace of its own (a service with PrivateTmp, say) would not reach
// the daemon, which would bind the empty mount point instead (root's, mode
// 0700: the kernel could not use it, so the failure would show at once).
// Where init's namespace cannot be read, the check passes.
func sameMountNamespace() error {
	self, err1 := os.Stat("/proc/self/ns/mnt")
	initNS, err2 := os.Stat("/proc/1/ns/mnt")
	if err1 != nil || err2 != nil {
		return nil
	}
	if !os.SameFile(self, initNS) {
		return errors.New("ipybox runs in a mount namespace of its own, and a mount it makes would not reach the Docker daemon")
	}
	return nil
}

// idmapUserns returns a user namespace whose mapping makes the ids from
// (on disk) appear as to, for MOUNT_ATTR_IDMAP. A user namespace needs a
// process: this binary is started in a new one, under ptrace, so that it
// stops at its exec, before it runs a single instruction; the namespace
// is opened, and the process killed.
func idmapUserns(fromUID, fromGID, toUID, toGID int) (*os.File, error) {
	// PTRACE_TRACEME makes this thread the tracer: keep to it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: fromUID, HostID: toUID, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: fromGID, HostID: toGID, Size: 1}},
		Ptrace:      true,
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("user namespace for an idmapped mount: %w", err)
	}
	f, err := os.Open("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/user")
	cmd.Process.Kill()
	cmd.Wait() // bound: killed above, stopped at its exec; it has no pipes
	if err != nil {
		return nil, fmt.Errorf("user namespace for an idmapped mount: %w", err)
	}
	return f, nil
}
