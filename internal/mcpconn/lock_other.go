//go:build !unix

package mcpconn

// lockFile does not lock where flock does not exist: concurrent writers
// may lose a refresh, and the next call then signs in again.
func lockFile(path string, exclusive bool) (func(), error) { return func() {}, nil }

const oNoFollow = 0
