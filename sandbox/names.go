package sandbox

import "slices"

// The names that host programs read and then act on (see protect.go): the
// sandbox write-protects them, and ipybox does not write them on anyone's
// behalf either.
var (
	protectedDirs  = []string{".git", ".claude", ".vscode", ".idea"}
	protectedFiles = []string{".gitconfig", ".gitmodules", ".mcp.json", ".ripgreprc"}
)

// shellStartupFiles are protected when they exist in the workspace, and
// get placeholders too when the workspace is the home directory, where a
// shell would read them.
var shellStartupFiles = []string{
	".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
	".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout",
}

// HostConfigName reports whether a file or directory name is one that
// host programs read and then act on (.git, .claude, .vscode, .mcp.json,
// shell start-up files...): a file written there, or below, may have the
// host run a command.
func HostConfigName(name string) bool {
	return slices.Contains(protectedDirs, name) || slices.Contains(protectedFiles, name) ||
		slices.Contains(shellStartupFiles, name)
}
