//go:build !linux

package toolserver_test

import "testing"

// rssPeak has no resident-set peak to read off Linux: the tests that need
// it say so through testenv.
func rssPeak(*testing.T) (since func() (grew int64), ok bool) { return nil, false }
