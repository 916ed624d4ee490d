//go:build !linux

package safefs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

const nonBlock = 0

func isDirBeneath(base, rel string) error {
	return withRoot(base, func(r *os.Root) error {
		if err := checkNoLinks(r, rel); err != nil {
			return err
		}
		fi, err := r.Lstat(rel)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return &fs.PathError{Op: "stat", Path: rel, Err: syscall.ENOTDIR}
		}
		return nil
	})
}

// checkNoLinks refuses a symbolic link among the components of rel.
func checkNoLinks(r *os.Root, rel string) error {
	parts := strings.Split(rel, string(filepath.Separator))
	for i := range parts {
		fi, err := r.Lstat(filepath.Join(parts[:i+1]...))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return ErrSymlink
		}
	}
	return nil
}

func withRoot(base string, f func(r *os.Root) error) error {
	r, err := os.OpenRoot(base)
	if err != nil {
		return err
	}
	defer r.Close()
	return f(r)
}

func openBeneath(base, rel string, flag int, perm fs.FileMode) (*os.File, error) {
	var out *os.File
	err := withRoot(base, func(r *os.Root) error {
		if err := checkNoLinks(r, rel); err != nil {
			return err
		}
		f, err := r.OpenFile(rel, flag, perm)
		out = f
		return err
	})
	return out, err
}

func mkdirBeneath(base, rel string, perm fs.FileMode) error {
	return withRoot(base, func(r *os.Root) error {
		if err := checkNoLinks(r, filepath.Dir(rel)); err != nil {
			return err
		}
		return r.Mkdir(rel, perm)
	})
}

func renameBeneath(base, from, to string) error {
	return withRoot(base, func(r *os.Root) error {
		if err := checkNoLinks(r, filepath.Dir(to)); err != nil {
			return err
		}
		return r.Rename(from, to)
	})
}

func removeBeneath(base, rel string) error {
	return withRoot(base, func(r *os.Root) error { return r.Remove(rel) })
}

// Remove removes the file or empty directory rel beneath base. A link
// among rel's parents is refused; a link as rel itself is removed.
func Remove(base, rel string) error {
	c, err := clean(rel)
	if err != nil || c == "." {
		return &fs.PathError{Op: "remove", Path: filepath.Join(base, rel), Err: ErrEscape}
	}
	return withRoot(base, func(r *os.Root) error {
		if err := checkNoLinks(r, filepath.Dir(c)); err != nil {
			return &fs.PathError{Op: "remove", Path: filepath.Join(base, c), Err: err}
		}
		return r.Remove(c)
	})
}

// dirOpenFlags: openDir (size.go) checks what it opened instead.
const dirOpenFlags = 0
