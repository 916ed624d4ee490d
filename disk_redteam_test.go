//go:build linux

package ipybox_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ipybox/ipybox"
)

// TestRedteamWorkspaceDiskUnbounded: the host bounds what it writes for a
// kernel (spill files: 32 MiB a cell, 256 MiB a workspace; images: 256 MiB
// a cell), but kernel code writes the host's disk directly through the
// workspace (and the run directory's socket folder), with no limit:
// RLIMIT_FSIZE is unlimited and no quota applies. One fallocate takes 8 GiB
// of the host's disk in an instant; a loop takes all of it, for every
// program of the host. It fails while the 8 GiB are granted.
func TestRedteamWorkspaceDiskUnbounded(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	var fs unix.Statfs_t
	if err := unix.Statfs(ws, &fs); err != nil || fs.Bavail*uint64(fs.Bsize) < 24<<30 {
		t.Skip("needs 24 GiB free")
	}
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws})
	got := run(t, ex, `import os, resource
fd = os.open("big", os.O_CREAT | os.O_WRONLY, 0o644)
try:
    os.posix_fallocate(fd, 0, 8 << 30)
    print("granted", os.fstat(fd).st_blocks * 512 >> 20, "MiB; RLIMIT_FSIZE", resource.getrlimit(resource.RLIMIT_FSIZE))
except OSError as e:
    print("refused", e)
os.close(fd)`).Text
	defer os.Remove(filepath.Join(ws, "big"))
	if strings.HasPrefix(strings.TrimSpace(got), "granted") {
		t.Errorf("kernel code took 8 GiB of the host's disk at once: %s", strings.TrimSpace(got))
	}
}
