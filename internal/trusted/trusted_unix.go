//go:build !windows

package trusted

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Check checks path, which what names in messages, by the rule of the
// package doc. For a secret, it returns a warning when group or others can
// read it.
func Check(what, path string, secret bool) (warning string, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", what, path, err)
	}
	euid := os.Geteuid()
	// The existing part of the path, and its real location.
	exists := abs
	for {
		if _, err := os.Stat(exists); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%s %s: %w", what, path, err)
		}
		up := filepath.Dir(exists)
		if up == exists {
			break
		}
		exists = up
	}
	real, err := filepath.EvalSymlinks(exists)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", what, path, err)
	}
	bad := func(at string, self bool) (*Error, error) {
		fi, err := os.Stat(at)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", what, path, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil, nil
		}
		e := &Error{What: what, Path: path, At: at, UID: int(st.Uid), Mode: fi.Mode(), euid: euid}
		if int(st.Uid) != euid && st.Uid != 0 {
			return e, nil
		}
		if fi.Mode().Perm()&0o022 != 0 && (self || fi.Mode()&fs.ModeSticky == 0) {
			e.Writable = true
			return e, nil
		}
		return nil, nil
	}
	// The real path and the folders above it; then the folders above the
	// path as written, which hold its links.
	self := exists == abs
	for _, start := range []string{real, filepath.Dir(exists)} {
		for at := start; ; at = filepath.Dir(at) {
			e, err := bad(at, self && at == real)
			if err != nil {
				return "", err
			}
			if e != nil {
				return "", e
			}
			if filepath.Dir(at) == at {
				break
			}
		}
	}
	if secret && self {
		if fi, err := os.Stat(real); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o044 != 0 {
			return fmt.Sprintf("%s %s has mode %04o: group or others can read it; fix: chmod go-r %s", what, path, uint32(fi.Mode().Perm()), real), nil
		}
	}
	return "", nil
}
