// Package safefs opens files below a directory without following symbolic
// links, for every host-side file operation in a directory that kernel
// code can write (the workspace, the images folder, a virtualenv).
//
// A kernel may plant a link at any name it can write: a saved image, a
// spill file or a generated module would then be written wherever the link
// points, with the host's rights. Every function here resolves the
// relative path beneath base and refuses a symbolic link in any of its
// components (the last one included) with ErrSymlink. base itself is
// trusted: it is chosen by the host, not by kernel code.
//
// On Linux this is openat2 with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
// RESOLVE_NO_MAGICLINKS, which the kernel enforces atomically. Elsewhere
// the components are checked one by one through an os.Root (best effort:
// a race can still swap a component between the check and the open, but
// os.Root keeps the result inside base).
package safefs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrSymlink is returned (wrapped in an *fs.PathError) when a component of
// the path is a symbolic link.
var ErrSymlink = errors.New("a symbolic link is in the way, and is not followed")

// ErrEscape is returned when a relative path leaves its base ("..", an
// absolute path).
var ErrEscape = errors.New("path leaves its base directory")

// clean checks rel and returns it cleaned: relative, inside base.
func clean(rel string) (string, error) {
	if rel == "" || filepath.IsAbs(rel) || strings.IndexByte(rel, 0) >= 0 {
		return "", ErrEscape
	}
	c := filepath.Clean(rel)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", ErrEscape
	}
	return c, nil
}

// OpenFile opens rel beneath base with flag and perm, as os.OpenFile does,
// refusing symbolic links in every component of rel. O_NOFOLLOW is always
// added, so that a link as the last component is refused too, also when
// flag has O_CREATE.
func OpenFile(base, rel string, flag int, perm fs.FileMode) (*os.File, error) {
	c, err := clean(rel)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: filepath.Join(base, rel), Err: err}
	}
	f, err := openBeneath(base, c, flag, perm)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: filepath.Join(base, c), Err: unwrapPath(err)}
	}
	return f, nil
}

// MkdirAll creates rel beneath base, and its missing parents, with perm.
// An existing component must be a directory, not a symbolic link.
func MkdirAll(base, rel string, perm fs.FileMode) error {
	c, err := clean(rel)
	if err != nil {
		return &fs.PathError{Op: "mkdir", Path: filepath.Join(base, rel), Err: err}
	}
	if c == "." {
		return nil
	}
	parts := strings.Split(c, string(filepath.Separator))
	for i := range parts {
		sub := filepath.Join(parts[:i+1]...)
		if err := mkdirBeneath(base, sub, perm); err != nil && !errors.Is(err, fs.ErrExist) {
			return &fs.PathError{Op: "mkdir", Path: filepath.Join(base, sub), Err: unwrapPath(err)}
		}
		if err := isDirBeneath(base, sub); err != nil {
			return &fs.PathError{Op: "mkdir", Path: filepath.Join(base, sub), Err: unwrapPath(err)}
		}
	}
	return nil
}

// CreateExclusive creates a new file rel beneath base (O_CREATE|O_EXCL),
// creating its parent directories first. It never opens an existing file
// and never follows a link.
func CreateExclusive(base, rel string, perm fs.FileMode) (*os.File, error) {
	c, err := clean(rel)
	if err != nil {
		return nil, &fs.PathError{Op: "create", Path: filepath.Join(base, rel), Err: err}
	}
	if dir := filepath.Dir(c); dir != "." {
		if err := MkdirAll(base, dir, 0o755); err != nil {
			return nil, err
		}
	}
	return OpenFile(base, c, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
}

// WriteFile replaces rel beneath base with data: it writes a new temporary
// file beside it and renames that over rel. A link at rel is replaced, not
// followed; a link among rel's parents is refused.
func WriteFile(base, rel string, data []byte, perm fs.FileMode) error {
	c, err := clean(rel)
	if err != nil {
		return &fs.PathError{Op: "write", Path: filepath.Join(base, rel), Err: err}
	}
	dir, name := filepath.Dir(c), filepath.Base(c)
	if dir != "." {
		if err := MkdirAll(base, dir, 0o755); err != nil {
			return err
		}
	}
	var f *os.File
	var tmp string
	for i := 0; ; i++ {
		tmp = filepath.Join(dir, fmt.Sprintf(".%s.tmp-%d-%d", name, os.Getpid(), i))
		f, err = OpenFile(base, tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || i > 100 {
			return err
		}
	}
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = renameBeneath(base, tmp, c)
	}
	if werr != nil {
		removeBeneath(base, tmp)
		return &fs.PathError{Op: "write", Path: filepath.Join(base, c), Err: unwrapPath(werr)}
	}
	return nil
}

// OpenRegular opens the regular file rel beneath base for reading,
// refusing links. It opens with O_NONBLOCK and checks what it opened: a
// FIFO that kernel code put at rel (or swapped in after the caller listed
// the folder) would otherwise hold the open until a writer comes, and a
// device would be read.
func OpenRegular(base, rel string) (*os.File, error) {
	f, err := OpenFile(base, rel, os.O_RDONLY|nonBlock, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = &fs.PathError{Op: "open", Path: f.Name(), Err: fmt.Errorf("not a regular file (%s)", st.Mode().Type())}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ReadFile reads rel beneath base, refusing links, and at most limit bytes
// (limit <= 0 means no limit); a longer file is an error.
func ReadFile(base, rel string, limit int64) ([]byte, error) {
	f, err := OpenFile(base, rel, os.O_RDONLY|nonBlock, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: f.Name(), Err: errors.New("not a regular file")}
	}
	if limit > 0 && st.Size() > limit {
		return nil, &fs.PathError{Op: "read", Path: f.Name(), Err: fmt.Errorf("file is %d bytes; the limit is %d", st.Size(), limit)}
	}
	b := make([]byte, 0, st.Size()+1)
	for {
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			if errors.Is(err, io.EOF) {
				return b, nil
			}
			return nil, err
		}
		if len(b) == cap(b) {
			if limit > 0 && int64(len(b)) > limit {
				return nil, &fs.PathError{Op: "read", Path: f.Name(), Err: fmt.Errorf("file grew past the limit of %d bytes", limit)}
			}
			b = append(b, 0)[:len(b)]
		}
	}
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Rename renames from to to, both beneath base, refusing links among
// their parents (a link as from itself is renamed, not followed; one at to
// is replaced).
func Rename(base, from, to string) error {
	f, err := clean(from)
	if err != nil || f == "." {
		return &fs.PathError{Op: "rename", Path: filepath.Join(base, from), Err: ErrEscape}
	}
	t, err := clean(to)
	if err != nil || t == "." {
		return &fs.PathError{Op: "rename", Path: filepath.Join(base, to), Err: ErrEscape}
	}
	if err := renameBeneath(base, f, t); err != nil {
		return &fs.PathError{Op: "rename", Path: filepath.Join(base, f), Err: unwrapPath(err)}
	}
	return nil
}
