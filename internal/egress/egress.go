// Package egress lets the container backend serve the sandbox's egress
// proxy without a public API for it: package sandbox sets Serve when it
// is linked in (the root package always links it).
package egress

import (
	"log/slog"
	"net"
)

// Serve serves the egress proxy on ln with sandbox-runtime's rules
// (allowedDomains and deniedDomains patterns) until stop is called; stop
// also ends open tunnels. It is nil when package sandbox is not linked.
var Serve func(ln net.Listener, allowed, denied []string, log *slog.Logger) (stop func() error, err error)
