// Package sandboxhook lets the container backend use two parts of the
// sandbox without a public API for them: the egress proxy, and the
// protection of the workspace's host-read files. Package sandbox sets the
// functions when it is linked in (the root package always links it), on
// Linux.
package sandboxhook

import (
	"log/slog"
	"net"
)

// ServeEgress serves the egress proxy on ln with sandbox-runtime's rules
// (allowedDomains and deniedDomains patterns) until stop is called; stop
// also ends open tunnels. Nil where package sandbox is not linked.
var ServeEgress func(ln net.Listener, allowed, denied []string, log *slog.Logger) (stop func() error, err error)

// Protection is what a container must do to the workspace at one start,
// as absolute host paths: bind ReadOnly paths read-only onto themselves,
// hide Masks behind an empty file and MaskDirs behind an empty directory.
type Protection struct {
	ReadOnly, Masks, MaskDirs []string
}

// Guard decides, at each start of a process that can write ws, what to
// protect (see package sandbox: .git, .claude, .vscode, .mcp.json and the
// rest are write-protected, .env and the files secrets() names masked;
// placeholders keep missing ones from being created inside). Close
// undoes the placeholders and quarantines repositories made inside whose
// config could run commands.
type Guard interface {
	Protect() (*Protection, error)
	Close() error
}

// NewGuard returns the Guard of workspace ws; secrets may be nil. Nil
// where package sandbox is not linked.
var NewGuard func(ws string, secrets func() []string, log *slog.Logger) (Guard, error)
