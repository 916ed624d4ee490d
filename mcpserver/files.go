package mcpserver

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// workspaceRoot resolves a checked relpath to the os.Root it lies in (the
// workspace, or a bound host directory) and the path inside that root.
// Opening through an os.Root refuses symbolic links that lead outside it.
func (s *Server) workspaceRoot(rel string) (*os.Root, string, error) {
	base, inner := s.workspace, rel
	for _, b := range s.opts.Binds {
		br := filepath.Clean(b.RelPath)
		if rel == br || strings.HasPrefix(rel, br+"/") {
			host, err := filepath.EvalSymlinks(b.HostPath)
			if err != nil {
				return nil, "", fmt.Errorf("bound directory %q: %w", b.HostPath, err)
			}
			base, inner = host, strings.TrimPrefix(strings.TrimPrefix(rel, br), "/")
			if inner == "" {
				return nil, "", fmt.Errorf("relpath %q names a bound directory; give a file path inside it", rel)
			}
			break
		}
	}
	r, err := os.OpenRoot(base)
	if err != nil {
		return nil, "", err
	}
	return r, inner, nil
}

// allowedRoot finds the allowed directory that holds the host path p, after
// symbolic links are resolved, and returns it as an os.Root with p's path
// inside it. For a path that does not exist yet (a download target), the
// deepest existing ancestor is resolved and the rest appended.
func (s *Server) allowedRoot(p string) (*os.Root, string, error) {
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
		return nil, "", fmt.Errorf("local_path %q: %w", p, err)
	}
	real = filepath.Join(real, rest)
	for _, dir := range s.allowed {
		if within(real, dir) {
			inner, _ := filepath.Rel(dir, real)
			r, err := os.OpenRoot(dir)
			if err != nil {
				return nil, "", err
			}
			return r, inner, nil
		}
	}
	shown := p
	if real != p {
		shown = fmt.Sprintf("%s (really %s)", p, real)
	}
	return nil, "", fmt.Errorf("local_path %s is outside the allowed directories (%s); choose a path inside one of them, or start ipybox mcp with --allowed-dir", shown, strings.Join(s.allowed, ", "))
}

// copyFile copies src in sr to dst in dr: a regular file, binary-safe, the
// destination's parent directories created. srcName and dstName name the
// two ends in errors.
func copyFile(sr *os.Root, src, srcName string, dr *os.Root, dst, dstName string) (int64, error) {
	// O_NONBLOCK: opening a FIFO (which kernel code can make in the
	// workspace) must not hang the call; it is refused below.
	in, err := sr.OpenFile(src, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, describe(err, srcName)
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return 0, describe(err, srcName)
	}
	if st.IsDir() {
		return 0, fmt.Errorf("%s is a directory; give a file (directories are not copied)", srcName)
	}
	if !st.Mode().IsRegular() {
		return 0, fmt.Errorf("%s is not a regular file", srcName)
	}
	if dir := filepath.Dir(dst); dir != "." {
		if err := dr.MkdirAll(dir, 0o755); err != nil {
			return 0, describe(err, dstName)
		}
	}
	if st, err := dr.Stat(dst); err == nil && st.IsDir() {
		return 0, fmt.Errorf("%s is a directory; give the file's path, including its name", dstName)
	} else if err == nil && !st.Mode().IsRegular() {
		return 0, fmt.Errorf("%s exists and is not a regular file", dstName)
	}
	out, err := dr.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NONBLOCK, 0o644)
	if err != nil {
		return 0, describe(err, dstName)
	}
	n, err := io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("copy to %s: %w", dstName, err)
	}
	return n, nil
}

// describe turns a file error into a sentence that names the path.
func describe(err error, name string) error {
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s does not exist", name)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%s: permission denied", name)
	case errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "escapes"):
		return fmt.Errorf("%s leads outside its directory through a symbolic link or \"..\", which is refused", name)
	case errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "not a directory"):
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
// workspace, as a symbolic link (a sandbox mounts it instead).
func (s *Server) makeBinds() error {
	for _, b := range s.opts.Binds {
		link := filepath.Join(s.workspace, filepath.Clean(b.RelPath))
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
