package safefs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// ErrTooManyEntries is returned by Size for a folder with more entries
// than it was allowed to count.
var ErrTooManyEntries = errors.New("too many files to count")

// Size returns the bytes of the regular files in dir and below, without
// following links (a link is counted as nothing, and not entered). The
// walk is confined to dir (os.Root): a folder that kernel code swaps for
// a link while it runs is not followed out. A file counts as the smaller
// of its length and the disk it takes, so a sparse file (a truncate to
// 4 GiB) counts as nothing. It visits at most maxEntries entries, and
// fails with ErrTooManyEntries past them: kernel code can fill a folder
// it writes with files. A dir that does not exist holds 0 bytes.
func Size(dir string, maxEntries int) (int64, error) {
	return SizeBeneath(dir, ".", maxEntries)
}

// Empty removes what dir holds, but not dir itself (a sandbox may have it
// mounted), following no link: a link is removed, not what it points to.
func Empty(dir string) error { return EmptyBeneath(dir, ".") }

// SizeBeneath is Size for the folder rel beneath base, without leaving
// base on the way there (a link among rel's parts that leads out of base
// is refused, and a link at its end is not followed): kernel code can
// replace a folder it writes with a link, or a FIFO, while the host
// measures it. Top-level entries of rel named in skip are not counted.
func SizeBeneath(base, rel string, maxEntries int, skip ...string) (int64, error) {
	r, err := os.OpenRoot(base)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	defer r.Close()
	var total int64
	n := 0
	var walk func(p string) error
	walk = func(p string) error {
		f, err := openDir(r, p)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // gone meanwhile, or never there: nothing to count
			}
			return err
		}
		defer f.Close()
		for {
			ents, err := f.ReadDir(256)
			for _, e := range ents {
				q := path.Join(p, e.Name())
				if p == rel && slices.Contains(skip, e.Name()) {
					continue
				}
				if n++; n > maxEntries {
					return fmt.Errorf("%s: %w (more than %d)", filepath.Join(base, rel), ErrTooManyEntries, maxEntries)
				}
				switch {
				case e.IsDir():
					if err := walk(q); err != nil {
						return err
					}
				case e.Type().IsRegular():
					if fi, err := r.Lstat(q); err == nil && fi.Mode().IsRegular() {
						total += min(fi.Size(), allocated(fi))
					}
				}
			}
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
		}
	}
	return total, walk(path.Clean(filepath.ToSlash(rel)))
}

// EmptyBeneath removes what the folder rel beneath base holds, but not
// the folder itself, nor its top-level entries named in keep, without
// leaving base on the way (see SizeBeneath).
func EmptyBeneath(base, rel string, keep ...string) error {
	ents, err := ReadDirBeneath(base, rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	r, err := os.OpenRoot(base)
	if err != nil {
		return err
	}
	defer r.Close()
	var errs []error
	for _, e := range ents {
		if !slices.Contains(keep, e.Name()) {
			errs = append(errs, r.RemoveAll(filepath.Join(rel, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// RemoveAllBeneath removes rel beneath base and what it holds, following
// no link out of base on the way (a link as rel itself is removed, not
// what it points to).
func RemoveAllBeneath(base, rel string) error {
	r, err := os.OpenRoot(base)
	if err != nil {
		return err
	}
	defer r.Close()
	return r.RemoveAll(rel)
}

// ReadDirBeneath lists the folder rel beneath base, sorted by name as
// os.ReadDir does, without leaving base on the way (see SizeBeneath), and
// without waiting on a FIFO put there.
func ReadDirBeneath(base, rel string) ([]fs.DirEntry, error) {
	r, err := os.OpenRoot(base)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	f, err := openDir(r, rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, err
}

// IsDirBeneath reports whether rel beneath base is a folder, reached
// without leaving base and without following a link at its end.
func IsDirBeneath(base, rel string) bool {
	r, err := os.OpenRoot(base)
	if err != nil {
		return false
	}
	defer r.Close()
	f, err := openDir(r, rel)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// openDir opens the folder name of r for reading. Anything else is
// refused without waiting on it: os.Root's OpenRoot and Open block on a
// FIFO that kernel code swapped in for a folder.
func openDir(r *os.Root, name string) (*os.File, error) {
	f, err := r.OpenFile(name, os.O_RDONLY|dirOpenFlags, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.IsDir() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: name, Err: errNotDir}
	}
	return f, nil
}

// errNotDir: what openDir found is not a folder.
var errNotDir = errors.New("not a folder")
