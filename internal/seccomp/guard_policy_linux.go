package seccomp

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ipybox/ipybox/internal/hostpaths"
)

// check returns EACCES when the call may not change r; creating says the
// call makes r's last name.
func (g *Guard) check(c *caller, r *resolved, creating bool) unix.Errno {
	full, err := r.path()
	if err != nil {
		g.log(fmt.Sprintf("guard: refused a change to a path it cannot read back: %v", err))
		if errno := errnoOf(err); errno == unix.ENAMETOOLONG {
			return errno
		}
		return unix.EACCES
	}
	if full == "" {
		// No path: a descriptor of a pipe or socket, or a removed folder,
		// where nothing can be made.
		return 0
	}
	if why := g.Refusal(full); why != "" {
		g.log(fmt.Sprintf("guard: refused a change to %s: %s", strconv.Quote(full), why))
		return unix.EACCES
	}
	return 0
}

// Refusal says why kernel code may not change the path full (absolute,
// clean, as the guarded program sees it), or "" when it may.
func (g *Guard) Refusal(full string) string {
	root := ""
	for _, r := range g.pol.Roots {
		if under(full, r) && len(r) > len(root) {
			root = r
		}
	}
	if root == "" {
		return ""
	}
	for _, o := range g.pol.Open {
		if under(full, o) {
			// The shared state that this process may write (the
			// virtualenv, for pip): the list holds below it all the same,
			// but for the bytecode caches that pip writes there (which
			// only kernels read; the host never runs the virtualenv).
			rel := strings.TrimPrefix(strings.TrimPrefix(full, o), "/")
			if e, ok := hostpaths.Match(rel); ok && e.Pattern != "__pycache__" {
				return e.Pattern + " is read or run by the host: " + e.Who
			}
			return ""
		}
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(full, root), "/")
	if rel == "" {
		return ""
	}
	if e, ok := hostpaths.Match(rel); ok {
		return e.Pattern + " is read or run by the host: " + e.Who
	}
	for _, p := range g.pol.Protected {
		if under(full, p) {
			return "the host's git configuration or a server's config names " + p
		}
		if under(p, full) {
			// Moved away, the folder would take the path with it, and
			// the path could be made anew.
			return "it holds " + p + ", which the host's git configuration or a server's config names"
		}
	}
	// The repositories that hold full, and what their configs name.
	for d := filepath.Dir(full); ; d = filepath.Dir(d) {
		if why := g.gitRefusal(d, full); why != "" {
			return why
		}
		if d == root || !under(d, root) {
			break
		}
	}
	return ""
}

// gitRefusal says why full may not change because of a repository at d
// (its working tree or, bare, its folder), or "".
func (g *Guard) gitRefusal(d, full string) string {
	info := g.gitAt(d)
	if info.bare {
		return d + " is a git repository's folder"
	}
	for _, n := range info.named {
		if under(full, n.Path) {
			return fmt.Sprintf("the git repository at %s names it (%s)", d, n.Key)
		}
	}
	if info.repo {
		for _, rel := range g.pol.GitRelative {
			if p := filepath.Join(d, rel); under(full, p) {
				return fmt.Sprintf("the global git configuration names %s for every repository", rel)
			}
		}
	}
	return ""
}

// gitInfo is what the guard knows of a folder as a git repository.
type gitInfo struct {
	repo  bool              // d/.git exists (a working tree)
	bare  bool              // d is laid out as a git folder
	named []hostpaths.Named // git folders elsewhere, and what configs name
}

type gitKey struct {
	dir                 string
	dev, ino            uint64
	mtime, ctime, csize int64
}

// maxGitCache bounds the parsed configs the guard keeps.
const maxGitCache = 256

// gitAt looks at d: a .git there (folder, or file that points at one), or
// d itself laid out as a bare repository. Parsed configs are kept while
// their file is unchanged.
func (g *Guard) gitAt(d string) gitInfo {
	var info gitInfo
	var st unix.Stat_t
	dotgit := filepath.Join(d, ".git")
	gitdir := ""
	switch err := unix.Lstat(dotgit, &st); {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		info.repo, gitdir = true, dotgit
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG:
		info.repo = true
		if b, err := readSmall(dotgit, 4096); err == nil {
			if p := hostpaths.GitDirPointer(b, d); p != "" {
				gitdir = p
				info.named = append(info.named, hostpaths.Named{Path: p, Key: "the gitdir that .git points at"})
			}
		}
	default:
		has := func(n string) bool { return unix.Lstat(filepath.Join(d, n), &st) == nil }
		if !has("HEAD") || !hostpaths.BareLayout(has) {
			return info
		}
		info.bare, gitdir = true, d
	}
	var cst unix.Stat_t
	cfg := filepath.Join(gitdir, "config")
	if unix.Stat(cfg, &cst) != nil {
		return info
	}
	key := gitKey{dir: d, dev: cst.Dev, ino: cst.Ino, mtime: cst.Mtim.Nano(), ctime: cst.Ctim.Nano(), csize: cst.Size}
	g.gitMu.Lock()
	cached, ok := g.gitLRU[key]
	g.gitMu.Unlock()
	if ok {
		info.named = append(info.named, cached.named...)
		return info
	}
	worktree := d
	if info.bare {
		worktree = ""
	}
	var named []hostpaths.Named
	if cd := commonDir(gitdir); cd != "" {
		named = append(named, hostpaths.Named{Path: cd, Key: "commondir"})
		named = append(named, g.configNamed(filepath.Join(cd, "config"), worktree, 0)...)
	}
	named = append(named, g.configNamed(cfg, worktree, 0)...)
	named = append(named, g.configNamed(filepath.Join(gitdir, "config.worktree"), worktree, 0)...)
	g.gitMu.Lock()
	if len(g.gitLRU) >= maxGitCache {
		clear(g.gitLRU)
	}
	g.gitLRU[key] = gitInfo{named: named}
	g.gitMu.Unlock()
	info.named = append(info.named, named...)
	return info
}

// configNamed reads a git config file and what it names, following its
// includes as git does (to a depth of 10). A config it cannot read whole
// names its repository's whole working tree when it mentions hooks, an
// include or fsmonitor: git would read those lines.
func (g *Guard) configNamed(cfg, worktree string, depth int) []hostpaths.Named {
	if depth > 10 {
		return nil
	}
	b, err := readSmall(cfg, 1<<20)
	if err != nil {
		return nil
	}
	named, complete := hostpaths.ConfigPaths(b, filepath.Dir(cfg), worktree, g.pol.Home)
	if !complete {
		low := strings.ToLower(string(b))
		if worktree != "" && (strings.Contains(low, "hookspath") || strings.Contains(low, "include") || strings.Contains(low, "fsmonitor")) {
			named = append(named, hostpaths.Named{Path: worktree, Key: "a config line ipybox cannot read"})
		}
	}
	var out []hostpaths.Named
	for _, n := range named {
		out = append(out, n)
		if strings.HasPrefix(n.Key, "include") {
			out = append(out, g.configNamed(n.Path, worktree, depth+1)...)
		}
	}
	return out
}

// commonDir returns the folder a git folder's commondir file names, or "".
func commonDir(gitdir string) string {
	b, err := readSmall(filepath.Join(gitdir, "commondir"), 4096)
	if err != nil {
		return ""
	}
	p := strings.TrimSpace(string(b))
	if p == "" {
		return ""
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(gitdir, p)
	}
	return filepath.Clean(p)
}

// readSmall reads at most limit bytes of a file, without blocking on a
// FIFO.
func readSmall(p string, limit int64) ([]byte, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, unix.EINVAL
	}
	return io.ReadAll(io.LimitReader(f, limit))
}

// create runs do, which makes r's last name. A name that completes a bare
// repository's layout in a folder below a root (HEAD beside objects/,
// refs/ or commondir) is refused: in-process under a lock, and, against
// another sandbox of the same workspace doing the other half at the same
// time, by looking again afterwards and taking back what was made.
func (g *Guard) create(r *resolved, do func() error, undo ...func()) error {
	if r.obj >= 0 || r.dot || !bareName(r.name) {
		return do()
	}
	full, err := r.path()
	if err != nil {
		return err
	}
	inRoot := false
	for _, root := range g.pol.Roots {
		inRoot = inRoot || full != "" && under(full, root)
	}
	if !inRoot {
		return do()
	}
	g.bareMu.Lock()
	defer g.bareMu.Unlock()
	var st unix.Stat_t
	existed := unix.Fstatat(r.dir, r.name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
	has := func(n string) bool {
		return strings.EqualFold(n, r.name) || unix.Fstatat(r.dir, n, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
	}
	if !existed && hostpaths.BareLayout(has) {
		g.log(fmt.Sprintf("guard: refused %s: it would make a git repository's folder", strconv.Quote(full)))
		return unix.EACCES
	}
	if err := do(); err != nil {
		return err
	}
	if existed || !hostpaths.BareLayout(func(n string) bool { return unix.Fstatat(r.dir, n, &st, unix.AT_SYMLINK_NOFOLLOW) == nil }) {
		return nil
	}
	// Another process completed the layout meanwhile: take ours back.
	g.log(fmt.Sprintf("guard: refused %s: it would make a git repository's folder", strconv.Quote(full)))
	if len(undo) > 0 {
		undo[0]()
		return unix.EACCES
	}
	flags := 0
	if unix.Fstatat(r.dir, r.name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		flags = unix.AT_REMOVEDIR
	}
	unix.Unlinkat(r.dir, r.name, flags)
	return unix.EACCES
}

func bareName(name string) bool {
	for _, n := range []string{"HEAD", "objects", "refs", "commondir"} {
		if strings.EqualFold(name, n) {
			return true
		}
	}
	return false
}

// under reports whether p is dir or inside it (both clean and absolute).
func under(p, dir string) bool {
	if dir == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// inRoot reports whether r is below one of the roots.
func (g *Guard) inRoot(r *resolved) bool {
	full, err := r.path()
	if err != nil || full == "" {
		return false
	}
	for _, root := range g.pol.Roots {
		if under(full, root) {
			return true
		}
	}
	return false
}
