package mcpserver

import (
	"fmt"
	"strings"
)

// A session's snapshot and its package folder are written by its kernel:
// restoring the snapshot unpickles what that kernel chose, and the
// package folder is put on the next kernel's path. So both are used only
// by a kernel as confined as the one that wrote them (docs/design.md,
// invariant 15). The record of a session names the confinement of the
// kernels that wrote its folders:
//
//	none                 unsandboxed, on this host
//	sandbox/<digest>     in the bwrap sandbox, with these settings
//	container/<digest>   in a Docker container, with this configuration
//
// (the digest is of the settings as ipybox uses them). The order is
// none < sandbox, container. Two confined settings are not ordered: a
// wider allowWrite, another allowed domain or another image can give
// the restored kernel what the writer had not, so a change of settings
// counts as a change of confinement. A session whose record names
// another confinement than this server's kernels, or none (an older
// ipybox wrote it), starts fresh: its snapshot is not restored, its
// package folder is removed, and its first result says why.

// confinementText says a confinement in words, for the note.
func confinementText(c string) string {
	kind, _, _ := strings.Cut(c, "/")
	switch kind {
	case "none":
		return "unsandboxed"
	case "sandbox":
		return "in the sandbox"
	case "container":
		return "in a container"
	}
	return "under an unrecorded confinement (an older ipybox saved it)"
}

// mayRestore reports whether what a kernel confined as from wrote may be
// used by a kernel confined as to.
func mayRestore(from, to string) bool {
	if from == "" {
		return false // not recorded: it may have been confined
	}
	return from == to || from == "none"
}

// confine drops x's saved state when the kernels that wrote it were
// confined otherwise than this server's (see above), and returns the
// note that says so ("" when it is kept). The old folders are removed
// (without following links); x's confinement becomes this server's.
// Called with x.startMu held, before x's folders are adopted.
func (x *session) confine() string {
	cur := x.s.factory.confinement()
	x.mu.Lock()
	from, pkg, snap, asleep := x.conf, x.pkg, x.snap, x.asleep
	x.conf = cur
	held := pkg != "" || snap != "" || asleep != nil
	if !held || mayRestore(from, cur) {
		x.mu.Unlock()
		return ""
	}
	x.pkg, x.snap, x.asleep = "", "", nil
	x.mu.Unlock()
	x.t.removeFolders(pkg, snap)
	x.s.log.Warn("a session saved under another confinement starts fresh", "session", x.id, "saved", from, "now", cur)
	return fmt.Sprintf("[ipybox: this session was saved by a kernel %s, and this server runs kernels %s; "+
		"a snapshot is restored only under the confinement that wrote it, or a stronger one, so its state was dropped: its snapshot was not restored and "+
		"its package folder is not on the path; this cell runs in a fresh kernel]", confinementText(from), confinementText(cur)+settingsNote(from, cur))
}

// settingsNote adds "with other settings" when both are of one kind.
func settingsNote(from, to string) string {
	a, _, _ := strings.Cut(from, "/")
	b, _, _ := strings.Cut(to, "/")
	if a == b && from != to {
		return " with other settings"
	}
	return ""
}
