package toolserver

import "time"

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
