package kernel

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ipybox/ipybox/internal/safefs"
)

// ownerFile names the file in a run directory that records the pid of the
// process that created it, so that a later start can reap directories
// whose owner died without cleaning up.
const ownerFile = "owner.pid"

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
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", fmt.Errorf("create run root: %w", err)
	}
	reapStale(root, prefix)
	b := make([]byte, 5)
	rand.Read(b)
	dir := filepath.Join(root, prefix+hex.EncodeToString(b))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("create run directory: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

func reapStale(root, prefix string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || (prefix != "" && !strings.HasPrefix(e.Name(), prefix)) {
			continue
		}
		dir := filepath.Join(root, e.Name())
		// Only ours: in a shared /tmp, another user's directory (or a link)
		// of that name is none of our business.
		if !ownDir(dir) {
			continue
		}
		b, err := safefs.ReadFile(dir, ownerFile, 64)
		if err != nil {
			continue // not ours, or still being created
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if processGone(pid) {
			os.RemoveAll(dir)
		}
	}
}
