package kernel

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/ipybox/ipybox/internal/rundir"
)

// runRoot returns the parent of run directories: $XDG_RUNTIME_DIR/ipybox
// when that is set and short, else /tmp. Paths stay short because unix
// socket paths are limited to 107 bytes.
func runRoot() (root, prefix string) {
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" && len(x) < 40 {
		if st, err := os.Stat(x); err == nil && st.IsDir() {
			return filepath.Join(x, "ipybox"), ""
		}
	}
	return os.TempDir(), "ipybox-"
}

// NewRunDir creates a fresh, private (0700) run directory and reaps stale
// ones left by processes that no longer exist.
func NewRunDir() (string, error) {
	root, prefix := runRoot()
	dir, err := rundir.New(root, prefix)
	if err != nil {
		return "", fmt.Errorf("run directory: %w", err)
	}
	return dir, nil
}
