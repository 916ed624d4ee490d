package safefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
	var total int64
	n := 0
	err = fs.WalkDir(r.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
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
