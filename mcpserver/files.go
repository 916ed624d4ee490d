package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/safefs"
)

// maxPathLen bounds the paths the file tools accept.
const maxPathLen = 4096

// realDir returns the real absolute path of an existing directory.
func realDir(d string) (string, error) {
	abs, err := filepath.Abs(d)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("%q: %w", d, err)
	}
	if st, err := os.Stat(real); err != nil || !st.IsDir() {
		return "", fmt.Errorf("%q is not a directory", d)
	}
	return real, nil
}

// within reports whether p is dir or inside it; both are clean absolute
// paths.
func within(p, dir string) bool {
	if p == dir {
		return true
	}
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// checkRelpath validates a workspace-relative path: relative, no "..", no
// NUL, not empty.
func checkRelpath(rel string) (string, error) {
	switch {
	case rel == "":
		return "", errors.New("relpath is empty; give a path relative to the workspace, such as data/input.csv")
	case len(rel) > maxPathLen:
		return "", fmt.Errorf("relpath is %d bytes long; the limit is %d", len(rel), maxPathLen)
	case strings.IndexByte(rel, 0) >= 0:
		return "", fmt.Errorf("relpath %q contains a NUL byte", rel)
	case filepath.IsAbs(rel):
		return "", fmt.Errorf("relpath %q is absolute; give a path relative to the workspace", rel)
	}
	for _, part := range strings.Split(rel, "/") {
		if part == ".." {
			return "", fmt.Errorf("relpath %q contains \"..\"; it must stay inside the workspace", rel)
		}
	}
	clean := filepath.Clean(rel)
	if clean == "." {
		return "", fmt.Errorf("relpath %q names the workspace itself; give a file path", rel)
	}
	return clean, nil
}

// checkLocalPath validates a host path's syntax: absolute, no NUL.
func checkLocalPath(p string) (string, error) {
	switch {
	case p == "":
		return "", errors.New("local_path is empty; give an absolute path on the host")
	case len(p) > maxPathLen:
		return "", fmt.Errorf("local_path is %d bytes long; the limit is %d", len(p), maxPathLen)
	case strings.IndexByte(p, 0) >= 0:
		return "", fmt.Errorf("local_path %q contains a NUL byte", p)
	case !filepath.IsAbs(p):
		return "", fmt.Errorf("local_path %q is not absolute; give an absolute path on the host", p)
	}
	return filepath.Clean(p), nil
}

// dirFS is one end of a copy: a trusted directory, below which no link is
// followed (kernel code can write the workspace, and plant a link to
// .git/config or .env at the name an agent asks for).
type dirFS struct{ base string }

func (d dirFS) OpenFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	return safefs.OpenFile(d.base, name, flag, perm)
}

func (d dirFS) MkdirAll(name string, perm os.FileMode) error {
	return safefs.MkdirAll(d.base, name, perm)
}

// workspaceRoot resolves a checked relpath to the directory it lies in
// (the workspace, or a bound host directory) and the path inside it.
func (t *tenant) workspaceRoot(rel string) (dirFS, string, error) {
	if err := t.ensure(); err != nil {
		return dirFS{}, "", err
	}
	base, inner := t.dir, rel
	for _, b := range t.s.opts.Binds {
		br := filepath.Clean(b.RelPath)
		if rel == br || strings.HasPrefix(rel, br+"/") {
			host, err := filepath.EvalSymlinks(b.HostPath)
			if err != nil {
				return dirFS{}, "", fmt.Errorf("bound directory %q: %w", b.HostPath, err)
			}
			base, inner = host, strings.TrimPrefix(strings.TrimPrefix(rel, br), "/")
			if inner == "" {
				return dirFS{}, "", fmt.Errorf("relpath %q names a bound directory; give a file path inside it", rel)
			}
			break
		}
	}
	return dirFS{base}, inner, nil
}

// allowedRoot finds the allowed directory that holds the host path p, after
// symbolic links are resolved, and returns it as an os.Root with p's path
// inside it. For a path that does not exist yet (a download target), the
// deepest existing ancestor is resolved and the rest appended.
func (t *tenant) allowedRoot(p string) (dirFS, string, error) {
	existing, rest := p, ""
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			break
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = parent
	}
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return dirFS{}, "", fmt.Errorf("local_path %q: %w", p, err)
	}
	real = filepath.Join(real, rest)
	if t.othersFolder(real) {
		return dirFS{}, "", fmt.Errorf("local_path %s is in another principal's folder (or the workspace's .ipybox); choose a path in yours, %s", p, t.dir)
	}
	allowed := t.allowedDirs()
	for _, dir := range allowed {
		if within(real, dir) {
			inner, _ := filepath.Rel(dir, real)
			if inner == "." {
				return dirFS{}, "", fmt.Errorf("local_path %s is an allowed directory itself; give a file path inside it", p)
			}
			return dirFS{dir}, inner, nil
		}
	}
	shown := p
	if real != p {
		shown = fmt.Sprintf("%s (really %s)", p, real)
	}
	return dirFS{}, "", fmt.Errorf("local_path %s is outside the allowed directories (%s); choose a path inside one of them, or start ipybox mcp with --allowed-dir", shown, strings.Join(allowed, ", "))
}

// copyFile copies src in sr to dst in dr: a regular file, binary-safe, the
// destination's parent directories created, no link followed on either
// side. srcName and dstName name the two ends in errors.
func copyFile(sr dirFS, src, srcName string, dr dirFS, dst, dstName string) (int64, error) {
	in, err := openSource(sr, src, srcName)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	return writeNew(dr, dst, dstName, func(out *os.File) (int64, error) { return io.Copy(out, in) })
}

// openSource opens the regular file src in sr for reading, without
// following a link.
func openSource(sr dirFS, src, srcName string) (*os.File, error) {
	// O_NONBLOCK: opening a FIFO (which kernel code can make in the
	// workspace) must not hang the call; it is refused below.
	in, err := sr.OpenFile(src, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, describe(err, srcName)
	}
	st, err := in.Stat()
	switch {
	case err != nil:
		err = describe(err, srcName)
	case st.IsDir():
		err = fmt.Errorf("%s is a directory; give a file (directories are not copied)", srcName)
	case !st.Mode().IsRegular():
		err = fmt.Errorf("%s is not a regular file", srcName)
	}
	if err != nil {
		in.Close()
		return nil, err
	}
	return in, nil
}

// writeNew writes dst in dr as a new file: write fills a file created
// beside it, under a name nobody can guess, which is renamed over dst once
// whole. An existing dst is never opened for writing: in a shared folder
// it may belong to another user, who would own what ipybox wrote (and a
// hard link would carry the bytes to another name). A dst that another
// user owns in a sticky folder cannot be replaced, and is refused; a
// transfer that fails leaves dst as it was.
func writeNew(dr dirFS, dst, dstName string, write func(*os.File) (int64, error)) (int64, error) {
	if err := destOK(dr, dst, dstName); err != nil {
		return 0, err
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	base := filepath.Base(dst)
	base = base[:min(len(base), 200)] // a name is at most 255 bytes
	part := filepath.Join(filepath.Dir(dst), "."+base+".ipybox-"+hex.EncodeToString(rnd[:]))
	out, err := safefs.CreateExclusive(dr.base, part, 0o644)
	if err != nil {
		return 0, describe(err, dstName)
	}
	n, err := write(out)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		safefs.Remove(dr.base, part)
		return n, fmt.Errorf("copy to %s: %w", dstName, err)
	}
	if err := safefs.Rename(dr.base, part, dst); err != nil {
		safefs.Remove(dr.base, part)
		if errors.Is(err, fs.ErrPermission) {
			return n, fmt.Errorf("%s exists and cannot be replaced (another user owns it in a shared folder, or the folder is not writable); choose another name", dstName)
		}
		return n, describe(err, dstName)
	}
	return n, nil
}

// destOK creates dst's parent directories in dr and refuses a dst that
// exists and is not a regular file.
func destOK(dr dirFS, dst, dstName string) error {
	if dir := filepath.Dir(dst); dir != "." {
		if err := dr.MkdirAll(dir, 0o755); err != nil {
			return describe(err, dstName)
		}
	}
	cur, err := dr.OpenFile(dst, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return describe(err, dstName)
	}
	cst, serr := cur.Stat()
	cur.Close()
	switch {
	case serr != nil:
		return describe(serr, dstName)
	case cst.IsDir():
		return fmt.Errorf("%s is a directory; give the file's path, including its name", dstName)
	case !cst.Mode().IsRegular():
		return fmt.Errorf("%s exists and is not a regular file", dstName)
	}
	if owner, ok := fileOwner(cst); ok && owner != os.Geteuid() {
		// Root is not held by a sticky folder: it would replace another
		// user's file in /tmp as the rename below.
		return fmt.Errorf("%s exists and belongs to another user (uid %d); choose another name", dstName, owner)
	}
	return nil
}

// downloadFrom copies the file rel of a gateway kernel's working directory
// to dst in dr, as a new file (see writeNew).
func downloadFrom(ctx context.Context, ex *ipybox.Executor, rel string, dr dirFS, dst, dstName string) (int64, error) {
	return writeNew(dr, dst, dstName, func(out *os.File) (int64, error) { return ex.DownloadFile(ctx, rel, out) })
}

// describe turns a file error into a sentence that names the path.
func describe(err error, name string) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s does not exist", name)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%s: permission denied", name)
	case errors.Is(err, safefs.ErrSymlink):
		return fmt.Errorf("%s leads through a symbolic link, which is refused (kernel code may have planted it); give the real path", name)
	case errors.Is(err, safefs.ErrEscape):
		return fmt.Errorf("%s leads outside its directory through a symbolic link or \"..\", which is refused", name)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%s: a parent of it is a file, not a directory", name)
	}
	return fmt.Errorf("%s: %w", name, err)
}

// checkBind validates a --bind entry.
func checkBind(b Bind) error {
	if b.HostPath == "" || !filepath.IsAbs(b.HostPath) {
		return fmt.Errorf("bind %q:%q: the host path must be absolute", b.HostPath, b.RelPath)
	}
	if _, err := checkRelpath(b.RelPath); err != nil {
		return fmt.Errorf("bind %q:%q: %w", b.HostPath, b.RelPath, err)
	}
	if st, err := os.Stat(b.HostPath); err != nil || !st.IsDir() {
		return fmt.Errorf("bind %q:%q: the host path is not a directory", b.HostPath, b.RelPath)
	}
	return nil
}

// makeBinds makes each bound host directory visible at its relpath in the
// workspace ws (a tenant's folder), as a symbolic link (a sandbox mounts
// it instead).
func (s *Server) makeBinds(ws string) error {
	for _, b := range s.opts.Binds {
		link := filepath.Join(ws, filepath.Clean(b.RelPath))
		if cur, err := os.Readlink(link); err == nil {
			if cur == b.HostPath {
				continue
			}
			return fmt.Errorf("bind %s:%s: %s already links to %s; remove it or choose another relpath", b.HostPath, b.RelPath, link, cur)
		} else if _, err := os.Lstat(link); err == nil {
			return fmt.Errorf("bind %s:%s: %s already exists; remove it or choose another relpath", b.HostPath, b.RelPath, link)
		}
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return fmt.Errorf("bind %s:%s: %w", b.HostPath, b.RelPath, err)
		}
		if err := os.Symlink(b.HostPath, link); err != nil {
			return fmt.Errorf("bind %s:%s: %w", b.HostPath, b.RelPath, err)
		}
	}
	return nil
}
