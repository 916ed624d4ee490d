//go:build !windows

package container

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// containerUser chooses the kernel's user: this process's own ids, or,
// under root, the workspace owner's (when not root) or MappedID. The
// kernel never runs as root. The chosen user must be able to write the
// workspace.
func containerUser(ws string) (uid, gid int, err error) {
	uid, gid = os.Geteuid(), os.Getegid()
	var st syscall.Stat_t
	if err := syscall.Stat(ws, &st); err != nil {
		return 0, 0, fmt.Errorf("container: workspace: %w", err)
	}
	if uid == 0 {
		uid, gid = int(st.Uid), int(st.Gid)
		if uid == 0 {
			uid, gid = MappedID, MappedID
		}
	}
	writable := int(st.Uid) == uid && st.Mode&0o300 == 0o300 ||
		int(st.Gid) == gid && st.Mode&0o030 == 0o030 ||
		st.Mode&0o003 == 0o003
	if !writable {
		return 0, 0, fmt.Errorf("container: the kernel's user %d:%d cannot write the workspace %s (owner %d:%d, mode %04o); "+
			"run ipybox as the workspace's owner, or give it to that user (chown %d:%d %s)",
			uid, gid, ws, st.Uid, st.Gid, st.Mode&0o7777, uid, gid, ws)
	}
	return uid, gid, nil
}

// processGone reports whether no process pid exists.
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
