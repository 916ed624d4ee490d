//go:build !linux

package ipybox_test

import "testing"

// checkReadOnlyAsOtherUser: the run as another user is made on Linux,
// where CI runs as root.
func checkReadOnlyAsOtherUser(t *testing.T) {
	t.Log("as root, the read-only check runs as another user on Linux only")
}
