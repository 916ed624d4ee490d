package toolserver

import (
	"net"
	"time"
)

// SetShutdownTimeout shortens Close's wait for tests and returns a function
// that restores it.
func SetShutdownTimeout(d time.Duration) (restore func()) {
	old := shutdownTimeout
	shutdownTimeout = d
	return func() { shutdownTimeout = old }
}

// SetKernelsHaveUnixSockets makes ListenLocal choose as it would on a
// system with (true) or without (false, Windows) AF_UNIX for kernels, and
// returns a function that restores it.
func SetKernelsHaveUnixSockets(v bool) (restore func()) {
	old := kernelsHaveUnixSockets
	kernelsHaveUnixSockets = v
	return func() { kernelsHaveUnixSockets = old }
}

// Waiting returns how many requests wait to be admitted, or for the
// budgets that kernels share.
func (s *Server) Waiting() int64 { return s.waiting.Load() + s.sharing.Load() }

// SetTotalHeldBytes replaces the process's budget of held bodies with one
// of n bytes, and each principal's share with share bytes (0: n), and
// returns a function that restores them. Only while no request is served,
// for Servers made after.
func SetTotalHeldBytes(n int64, share ...int64) (restore func()) {
	total.Lock()
	defer total.Unlock()
	oldB, oldShare, oldP := total.b, total.share, total.principals
	total.b, total.share, total.principals = newBytesBudget(n), n, map[string]*budget{}
	if len(share) > 0 && share[0] > 0 {
		total.share = share[0]
	}
	return func() {
		total.Lock()
		defer total.Unlock()
		total.b, total.share, total.principals = oldB, oldShare, oldP
	}
}

// SetProgressTimeout shortens the wait for a body's progress and returns
// a function that restores it.
func SetProgressTimeout(d time.Duration) (restore func()) {
	old := progressTimeout
	progressTimeout = d
	return func() { progressTimeout = old }
}

// PrincipalHeld returns the bytes principal's Servers hold of the
// process's budget.
func PrincipalHeld(principal string) int64 { return principalBodies(principal).held() }

// Held returns the requests and bytes the server holds, and the bytes the
// process holds.
func (s *Server) Held() (calls, bytes, total int64) {
	return s.calls.held(), s.bytes.held(), totalBodies().held()
}

// ServeListener serves l in the background, as ListenUnix and ListenTCP do
// with the listeners they open: for tests on an in-memory network.
func (s *Server) ServeListener(l net.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.serve(l)
}
