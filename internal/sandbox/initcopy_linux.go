package sandbox

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/ipybox/ipybox/internal/hostproc"
	"github.com/ipybox/ipybox/internal/rundir"
)

// The init binary is run on the host (the init check; as root, the prep
// and hold steps) and bound into every sandbox. The file it was started
// from may lie where kernel code writes: `./ipybox mcp` in the folder that
// holds it makes that folder the workspace, and a release unpacked in a
// project or a `go build -o ipybox` in a checkout is there. Kernel code
// could then rename a program of its own over it, which the host would
// run at the next start. So the init binary is never run from where it
// was found: it is copied once per process, from the file this process
// runs (/proc/self/exe, whatever has been renamed over its path since) or
// from Options.InitBinary, into a private folder (0700, this user's, in
// the temporary folder, which no sandbox sees: its /tmp is its own; or,
// when kernel code can write the temporary folder, a workspace that is
// or holds it, in the host processes' private folder: privateRoot), and
// the copy (0555) is what runs and what is bound. A copy that a later
// sandbox's kernels could write is made again elsewhere.
var initCopies = struct {
	mu sync.Mutex
	m  map[string]string // source ("" for this process's binary) -> copy
}{m: map[string]string{}}

// privateInit returns the private copy of the init binary: of this
// process's own binary when self is set, else of src.
func privateInit(src string, self bool, writable []string) (string, error) {
	key := src
	if self {
		key = ""
	}
	initCopies.mu.Lock()
	defer initCopies.mu.Unlock()
	if p, ok := initCopies.m[key]; ok {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() && hostproc.Inside(p, writable) == "" {
			return p, nil
		}
		// Removed under us (a reaper, a user), or where this sandbox's
		// kernels write: copy again.
		delete(initCopies.m, key)
	}
	from := src
	if self {
		from = "/proc/self/exe"
	}
	in, err := os.Open(from)
	if err != nil {
		return "", err
	}
	defer in.Close()
	if fi, err := in.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a file", src)
	}
	root, err := privateRoot(writable)
	if err != nil {
		return "", err
	}
	dir, err := rundir.New(root, "ipybox-init-")
	if err != nil {
		return "", err
	}
	dst := filepath.Join(dir, "ipybox-init")
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o700)
	if err == nil {
		_, err = io.Copy(out, in)
		if err == nil {
			err = unix.Fchmod(int(out.Fd()), 0o555)
		}
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	initCopies.m[key] = dst
	return dst, nil
}
