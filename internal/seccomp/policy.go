package seccomp

// Policy is what a Guard protects. Paths are as the guarded program sees
// them.
type Policy struct {
	// Roots are the folders the program may write that host programs see
	// too: the workspace, allowWrite folders, a container's binds. Below
	// each, hostpaths' list holds. Elsewhere (a private /tmp) the guard
	// lets every change through.
	Roots []string `json:"roots"`
	// Workspace is the root where hostpaths' Root entries (ipybox's
	// state, the home directory's files) apply. It is one of Roots.
	Workspace string `json:"workspace"`
	// Protected are more absolute paths that may not change, nor the
	// folders above them (below a root): what the host's own git
	// configuration names (a global core.hooksPath), and the files that
	// MCP server configs name.
	Protected []string `json:"protected,omitempty"`
	// Open are folders below a root where the list does not hold: the
	// shared virtualenv, for the approved install_package helper only.
	Open []string `json:"open,omitempty"`
	// GitRelative are paths relative to every repository's working tree
	// that may not change: a global core.hooksPath given as a relative
	// path applies to each repository.
	GitRelative []string `json:"git_relative,omitempty"`
	// SocketDirs are the folders where the program may make socket files
	// (bind): its private /tmp, its run directory. Nowhere else, by
	// Landlock: see restrictSockets.
	SocketDirs []string `json:"socket_dirs,omitempty"`
	// Home is the user's home, for "~" in git configs. Empty: unknown.
	Home string `json:"home,omitempty"`
}
