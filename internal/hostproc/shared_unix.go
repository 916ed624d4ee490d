//go:build !windows

package hostproc

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// SharedAbove returns the first folder, p itself or one above it (as
// written, and with its links resolved), that another user can put
// entries in: one that group or others can write, sticky or not (in /tmp
// anyone can make /tmp/node_modules, which npx's upward search from a
// folder below finds), or that belongs to another user than this one or
// root. "" when there is none. Only the existing part of p is judged: the
// rest would be made by this user.
func SharedAbove(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	exists := abs
	for {
		if _, err := os.Stat(exists); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return exists
		}
		up := filepath.Dir(exists)
		if up == exists {
			return ""
		}
		exists = up
	}
	real, err := filepath.EvalSymlinks(exists)
	if err != nil {
		return exists
	}
	euid := uint32(os.Geteuid())
	for _, start := range []string{real, exists} {
		for at := start; ; at = filepath.Dir(at) {
			fi, err := os.Stat(at)
			if err != nil {
				return at
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != euid && st.Uid != 0 {
				return at
			}
			if fi.Mode().Perm()&0o022 != 0 {
				return at
			}
			if filepath.Dir(at) == at {
				break
			}
		}
	}
	return ""
}
