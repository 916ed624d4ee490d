package ipybox

import "testing"

// ForkNewApp makes forks and kept boundaries start a new kernel app (the
// way for an ipykernel they cannot rebind) until t ends.
func ForkNewApp(t *testing.T) {
	forkNewApp.Store(true)
	t.Cleanup(func() { forkNewApp.Store(false) })
}

// ForkPreparing calls h as each fork prepares, before its fork cell,
// until t ends.
func ForkPreparing(t *testing.T, h func()) {
	forkPreparing.Store(&h)
	t.Cleanup(func() { forkPreparing.Store(nil) })
}
