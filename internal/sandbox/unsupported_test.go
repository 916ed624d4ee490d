//go:build !linux && !darwin

package sandbox

import (
	"errors"
	"strings"
	"testing"
)

// TestNoSandboxFailsClosed: where ipybox has no sandbox (Windows), New
// fails with ErrUnavailable and a message that says so and what to do.
// (Compiled by scripts/crossbuild.sh; it runs only on such a system.)
func TestNoSandboxFailsClosed(t *testing.T) {
	_, err := New(nil, &Options{Workspace: t.TempDir()})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no sandbox on") || !strings.Contains(err.Error(), "--sandbox") {
		t.Fatalf("New: %v, want ErrUnavailable saying there is no sandbox here and how to run without one", err)
	}
}
