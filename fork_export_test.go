package ipybox

import "testing"

// ForkNewApp makes forks and kept boundaries start a new kernel app (the
// way for an ipykernel they cannot rebind) until t ends.
func ForkNewApp(t *testing.T) {
	forkNewApp.Store(true)
	t.Cleanup(func() { forkNewApp.Store(false) })
}
