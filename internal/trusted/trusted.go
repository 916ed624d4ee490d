// Package trusted checks that a file or folder whose contents ipybox
// trusts (the state folder, the token file, the approval policy and its
// audit log, the OAuth token store) is the user's alone, as ssh checks a
// private key and the folders above it: whoever else could write it, or
// a folder above it, could plant, change or swap what ipybox obeys.
//
//	if warn, err := trusted.Check("--auth-token-file", path, true); err != nil {
//		return err // names the path, its owner or mode, and the fix
//	} else if warn != "" {
//		log.Warn(warn)
//	}
//
// # The rule
//
// The path (links resolved), and every folder above it, must belong to
// the process's effective user or to root, and must not be writable by
// group or others. A folder above it may be writable by others when it has
// the sticky bit (as /tmp has): there, nobody may rename or remove an entry
// of someone else. The path itself may not, sticky or not: others could
// add entries to it. A path that does not exist yet is judged by the
// folders that would hold it. A secret that group or others can read is
// accepted, with a warning. On Windows, which has no such modes, Check
// accepts everything.
package trusted

import (
	"fmt"
	"io/fs"
)

// Error is a path that is not the user's alone.
type Error struct {
	What string      // what the path is ("--state-dir")
	Path string      // the path that was named
	At   string      // the file or folder at fault: Path, or a folder above it
	UID  int         // At's owner
	Mode fs.FileMode // At's permission bits
	// Writable is set when the fault is the mode (group or others can
	// write At), unset when it is the owner.
	Writable bool
	euid     int
}

func (e *Error) Error() string {
	where := e.At
	if e.At != e.Path {
		where = fmt.Sprintf("the folder %s above it", e.At)
	}
	if e.Writable {
		return fmt.Sprintf("%s %s: %s has mode %04o, so group or others can write it and plant, change or swap what ipybox trusts; fix: chmod go-w %s",
			e.What, e.Path, where, uint32(e.Mode.Perm()), e.At)
	}
	return fmt.Sprintf("%s %s: %s belongs to uid %d, not to this user (uid %d) or root, so that user can plant, change or swap what ipybox trusts; fix: chown %d %s, or choose a path of your own",
		e.What, e.Path, where, e.UID, e.euid, e.euid, e.At)
}
