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

// Waiting returns how many requests wait to be admitted.
func (s *Server) Waiting() int64 { return s.waiting.Load() }

// SetTotalHeldBytes replaces the process's budget of held bodies with one
// of n bytes, and returns a function that restores it. Only while no
// request is served.
func SetTotalHeldBytes(n int64) (restore func()) {
	total.Lock()
	defer total.Unlock()
	old := total.b
	total.b = newBudget(n)
	return func() {
		total.Lock()
		defer total.Unlock()
		total.b = old
	}
}

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
