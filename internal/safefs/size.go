package safefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
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
	r, err := os.OpenRoot(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	defer r.Close()
	return sizeRoot(r, dir, maxEntries, nil)
}

// sizeRoot is Size of the folder r (named dir in errors), its top-level
// entries named in skip left out.
func sizeRoot(r *os.Root, dir string, maxEntries int, skip []string) (int64, error) {
	var total int64
	n := 0
	err := fs.WalkDir(r.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if p != "." && slices.Contains(skip, p) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if n++; n > maxEntries {
			return fmt.Errorf("%s: %w (more than %d)", dir, ErrTooManyEntries, maxEntries)
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				total += min(fi.Size(), allocated(fi))
			}
		}
		return nil
	})
	return total, err
}

// Empty removes what dir holds, but not dir itself (a sandbox may have it
// mounted). os.RemoveAll removes a link, not what it points to.
func Empty(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	var errs []error
	for _, e := range ents {
		errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
	}
	return errors.Join(errs...)
}

// SizeBeneath is Size for the folder rel beneath base, without leaving
// base on the way there (a link among rel's parts that leads out of base
// is refused): kernel code can replace a folder it writes with a link
// while the host measures it. Top-level entries of rel named in skip are
// not counted.
func SizeBeneath(base, rel string, maxEntries int, skip ...string) (int64, error) {
	r, err := openRootBeneath(base, rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	defer r.Close()
	return sizeRoot(r, filepath.Join(base, rel), maxEntries, skip)
}

// EmptyBeneath removes what the folder rel beneath base holds, but not
// the folder itself, nor its top-level entries named in keep, without
// leaving base on the way (see SizeBeneath).
func EmptyBeneath(base, rel string, keep ...string) error {
	r, err := openRootBeneath(base, rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	defer r.Close()
	ents, err := fs.ReadDir(r.FS(), ".")
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if !slices.Contains(keep, e.Name()) {
			errs = append(errs, r.RemoveAll(e.Name()))
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

// openRootBeneath opens rel beneath base as a root of its own.
func openRootBeneath(base, rel string) (*os.Root, error) {
	r, err := os.OpenRoot(base)
	if err != nil || rel == "." || rel == "" {
		return r, err
	}
	defer r.Close()
	return r.OpenRoot(rel)
}
