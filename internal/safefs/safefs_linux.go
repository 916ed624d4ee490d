package safefs

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	nonBlock = unix.O_NONBLOCK
)

const resolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

func openBase(base string) (int, error) {
	fd, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: base, Err: err}
	}
	return fd, nil
}

func openBeneath(base, rel string, flag int, perm fs.FileMode) (*os.File, error) {
	dfd, err := openBase(base)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	how := &unix.OpenHow{
		Flags:   uint64(flag | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Mode:    uint64(syscallMode(perm)),
		Resolve: resolve,
	}
	if flag&os.O_CREATE == 0 {
		how.Mode = 0
	}
	for {
		fd, err := unix.Openat2(dfd, rel, how)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, mapErr(err)
		}
		return os.NewFile(uintptr(fd), filepath.Join(base, rel)), nil
	}
}

// mapErr turns the errors of a refused resolution into ErrSymlink.
// openat2 answers ELOOP for a link under RESOLVE_NO_SYMLINKS, and
// O_NOFOLLOW answers ELOOP for a link as the last component.
func mapErr(err error) error {
	switch err {
	case unix.ELOOP:
		return ErrSymlink
	case unix.EXDEV:
		return ErrEscape
	}
	return err
}

func mkdirBeneath(base, rel string, perm fs.FileMode) error {
	dir, name := filepath.Split(rel)
	pfd, err := parentFD(base, dir)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := unix.Mkdirat(pfd, name, syscallMode(perm)); err != nil {
		if err == unix.EEXIST {
			return fs.ErrExist
		}
		return err
	}
	return nil
}

// parentFD opens dir (relative, "" for base) beneath base as an O_PATH
// directory descriptor, refusing links.
func parentFD(base, dir string) (int, error) {
	dfd, err := openBase(base)
	if err != nil {
		return -1, err
	}
	dir = filepath.Clean(dir)
	if dir == "." || dir == "" {
		return dfd, nil
	}
	defer unix.Close(dfd)
	return pathFD(dfd, dir, true)
}

// pathFD opens rel beneath dfd as an O_PATH descriptor without following
// a link, and checks its type: a link is ErrSymlink (O_DIRECTORY would
// turn that into ENOTDIR, hiding the cause), and when dir is set, anything
// but a directory is ENOTDIR.
func pathFD(dfd int, rel string, dir bool) (int, error) {
	fd, err := unix.Openat2(dfd, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolve})
	if err != nil {
		return -1, mapErr(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		unix.Close(fd)
		return -1, ErrSymlink
	case dir && st.Mode&unix.S_IFMT != unix.S_IFDIR:
		unix.Close(fd)
		return -1, unix.ENOTDIR
	}
	return fd, nil
}

// isDirBeneath opens rel beneath base and reports an error unless it is a
// directory (a link is ErrSymlink).
func isDirBeneath(base, rel string) error {
	dfd, err := openBase(base)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	fd, err := pathFD(dfd, rel, true)
	if err != nil {
		return err
	}
	unix.Close(fd)
	return nil
}

func renameBeneath(base, from, to string) error {
	ffd, err := parentFD(base, filepath.Dir(from))
	if err != nil {
		return err
	}
	defer unix.Close(ffd)
	tfd, err := parentFD(base, filepath.Dir(to))
	if err != nil {
		return err
	}
	defer unix.Close(tfd)
	return unix.Renameat(ffd, filepath.Base(from), tfd, filepath.Base(to))
}

func removeBeneath(base, rel string) error {
	pfd, err := parentFD(base, filepath.Dir(rel))
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	return unix.Unlinkat(pfd, filepath.Base(rel), 0)
}

// Remove removes the file or empty directory rel beneath base. A link
// among rel's parents is refused; a link as rel itself is removed (the
// link, not its target).
func Remove(base, rel string) error {
	c, err := clean(rel)
	if err != nil || c == "." {
		return &fs.PathError{Op: "remove", Path: filepath.Join(base, rel), Err: ErrEscape}
	}
	pfd, err := parentFD(base, filepath.Dir(c))
	if err != nil {
		return &fs.PathError{Op: "remove", Path: filepath.Join(base, c), Err: err}
	}
	defer unix.Close(pfd)
	err = unix.Unlinkat(pfd, filepath.Base(c), 0)
	if err == unix.EISDIR {
		err = unix.Unlinkat(pfd, filepath.Base(c), unix.AT_REMOVEDIR)
	}
	if err != nil {
		return &fs.PathError{Op: "remove", Path: filepath.Join(base, c), Err: err}
	}
	return nil
}

func syscallMode(m fs.FileMode) uint32 {
	o := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		o |= syscall.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		o |= syscall.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		o |= syscall.S_ISVTX
	}
	return o
}

// dirOpenFlags open a folder only, and never wait on what else is there
// (openDir in size.go).
const dirOpenFlags = unix.O_DIRECTORY | unix.O_NONBLOCK
