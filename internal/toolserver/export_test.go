package toolserver

import "time"

// SetShutdownTimeout shortens Close's wait for tests and returns a function
// that restores it.
func SetShutdownTimeout(d time.Duration) (restore func()) {
	old := shutdownTimeout
	shutdownTimeout = d
	return func() { shutdownTimeout = old }
}
