//go:build !unix

package flock

import "os"

// try takes no lock where flock does not exist.
func try(*os.File, bool) (held bool, err error) { return false, nil }
