//go:build !windows

package ipybox

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// checkWritable reports whether this process can create files in dir.
// access(2) answers with the real ids, which are ipybox's own (it never
// runs setuid), and for root with its permitted capabilities: root
// without CAP_DAC_OVERRIDE (in a container that dropped it) is told no.
func checkWritable(dir string) error {
	err := unix.Access(dir, unix.W_OK|unix.X_OK)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EROFS):
		return fmt.Errorf("ipybox: %s: %w (a read-only file system)", dir, ErrWorkspaceNotWritable)
	case !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EPERM):
		return fmt.Errorf("ipybox: %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fmt.Errorf("ipybox: %s: %w", dir, err)
	}
	return fmt.Errorf("ipybox: %s: %w (which runs as %d:%d; the directory belongs to %d:%d, mode %04o)",
		dir, ErrWorkspaceNotWritable, os.Getuid(), os.Getgid(), st.Uid, st.Gid, st.Mode&0o7777)
}
