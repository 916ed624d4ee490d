//go:build !windows

package container

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// chooseUser chooses the kernel's user: this process's own ids; under
// root, the workspace owner's, or, for a workspace that root owns,
// MappedID, which writes it through an idmapped mount (idmap_linux.go),
// its files landing on disk as root's. The kernel never runs as root. The
// chosen user must be able to write the workspace; otherwise the error
// gives the command that fixes it.
func (l *Launcher) chooseUser() error {
	ws := l.cfg.Workspace
	var st syscall.Stat_t
	if err := syscall.Stat(ws, &st); err != nil {
		return fmt.Errorf("container: workspace: %w", err)
	}
	uid, gid := os.Geteuid(), os.Getegid()
	ownerUID, ownerGID := int(st.Uid), int(st.Gid)
	switch {
	case uid != 0:
		// Docker binds the workspace with the flags of the mount it lies
		// on; only root can give it nosuid,nodev. The kernel, as this
		// user, still makes no set-id file (the guard) and no device (no
		// capabilities).
	case ownerUID != 0:
		uid, gid = ownerUID, ownerGID
		l.wsSource = l.nosuid(ws)
	default:
		at, err := idmapMount(ws, ownerUID, ownerGID, MappedID, MappedID)
		if err != nil {
			return fmt.Errorf("container: the workspace %s belongs to root, and a kernel never runs as root; "+
				"its user %d would write it through an idmapped mount, but %v; give the workspace to another user (chown USER:GROUP %s), "+
				"or run ipybox as that user", ws, MappedID, err, ws)
		}
		l.idmaps = append(l.idmaps, at)
		l.wsSource = at
		// On the mount, the owner is the kernel's user.
		uid, gid, ownerUID, ownerGID = MappedID, MappedID, MappedID, MappedID
	}
	writable := ownerUID == uid && st.Mode&0o300 == 0o300 ||
		ownerGID == gid && st.Mode&0o030 == 0o030 ||
		st.Mode&0o003 == 0o003
	if !writable {
		return fmt.Errorf("container: the kernel's user %d:%d cannot write the workspace %s (owner %d:%d, mode %04o); "+
			"run ipybox as the workspace's owner, or give it to that user (chown %d:%d %s)",
			uid, gid, ws, st.Uid, st.Gid, st.Mode&0o7777, uid, gid, ws)
	}
	l.uid, l.gid = uid, gid
	return nil
}

// idmapBinds, under root, gives the kernel's user the binds that root
// owns through idmapped mounts, as chooseUser does the workspace, and
// the others through nosuid,nodev clones. A bind that cannot be idmapped
// is bound as it is (and may be read-only to the kernel).
func (l *Launcher) idmapBinds() {
	if os.Geteuid() != 0 || l.uid == 0 {
		return
	}
	for i, b := range l.cfg.Binds {
		if err := os.MkdirAll(b.HostPath, 0o755); err != nil {
			continue // Start says so
		}
		var st syscall.Stat_t
		if syscall.Stat(b.HostPath, &st) != nil {
			continue
		}
		if st.Uid != 0 {
			if at := l.nosuid(b.HostPath); at != b.HostPath {
				if l.bindSources == nil {
					l.bindSources = map[int]string{}
				}
				l.bindSources[i] = at
			}
			continue
		}
		at, err := idmapMount(b.HostPath, 0, int(st.Gid), l.uid, l.gid)
		if err != nil {
			l.log.Warn("a container bind that root owns is bound as it is; the kernel may not write it", "bind", b.HostPath, "err", err)
			continue
		}
		l.idmaps = append(l.idmaps, at)
		if l.bindSources == nil {
			l.bindSources = map[int]string{}
		}
		l.bindSources[i] = at
	}
}

// nosuid returns a clone of dir without setuid or devices (see
// plainMount), to bind in dir's stead, or dir itself where one cannot be
// made (a warning says why).
func (l *Launcher) nosuid(dir string) string {
	at, err := plainMount(dir)
	if err != nil {
		l.log.Warn("a container bind is mounted without nosuid,nodev; the kernel's guard still refuses set-id files", "dir", dir, "err", err)
		return dir
	}
	l.idmaps = append(l.idmaps, at)
	return at
}

// processGone reports whether no process pid exists.
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
