// Package rundir makes private working directories that record their
// owner's pid, so that a later start reaps those whose owner died without
// cleaning up (a SIGKILL): the kernels' run directories and the
// sandboxes' host-only folders.
package rundir

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ipybox/ipybox/internal/safefs"
)

// OwnerFile names the file in a directory New made that records the pid
// of the process that made it.
const OwnerFile = "owner.pid"

// New reaps the stale directories of root whose names start with prefix
// (their owner is gone), then creates a fresh private (0700) one there,
// named prefix and random hex, with its owner's pid in OwnerFile.
func New(root, prefix string) (string, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", root, err)
	}
	if reapDue(root, prefix) {
		ReapStale(root, prefix)
	}
	b := make([]byte, 5)
	rand.Read(b)
	dir := filepath.Join(root, prefix+hex.EncodeToString(b))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, OwnerFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	return dir, nil
}

// reapEvery spaces New's reaps of one root and prefix: a busy process
// makes a directory at each kernel start, and a scan of a shared /tmp at
// each one would be work done again for nothing new.
const reapEvery = time.Minute

var lastReap sync.Map // root + "\x00" + prefix -> time.Time

// reapDue reports whether New should reap root's prefix now, and records
// that it does.
func reapDue(root, prefix string) bool {
	key := root + "\x00" + prefix
	now := time.Now()
	if last, ok := lastReap.Load(key); ok && now.Sub(last.(time.Time)) < reapEvery {
		return false
	}
	lastReap.Store(key, now)
	return true
}

// ReapStale removes the directories of root, named with prefix ("": any),
// that this user owns and whose OwnerFile names a process that is gone.
// Others' directories, links, and directories without an owner file (not
// made by New, or still being made) are left alone.
func ReapStale(root, prefix string) {
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
		b, err := safefs.ReadFile(dir, OwnerFile, 64)
		if err != nil {
			continue
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
