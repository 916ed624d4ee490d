// Package sandboxhook lets the container backend use the sandbox's egress
// proxy without a public API for it. Package sandbox sets the
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
