//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/ipybox/ipybox/internal/safefs"
)

// The workspace is writable inside the sandbox, and it is also where the
// host's own programs look for files they read and then act on: git runs
// .git/config's core.fsmonitor and .git/hooks, shells source their start-up
// files, editors run tasks from .vscode and .idea, Claude Code reads
// .mcp.json and the hooks in .claude. Kernel code that could write those
// would get its commands run later by the host. So these names are
// write-protected as a whole class, sandbox-runtime's mandatory deny list
// being the floor:
//
//   - at the workspace root, each name is protected whether or not it
//     exists: a missing one gets an empty placeholder, so that it cannot
//     be created inside (the placeholders are removed again when the last
//     sandbox of the workspace in this process closes, if still empty);
//   - below the root, down to protectDepth, the names that exist are
//     protected too.
//
// Being mount points, protected paths cannot be renamed, removed or
// replaced from inside either. .git is protected as a whole (not only its
// hooks and config: .git/commondir or a new .git would get around that),
// so git commands that write fail inside the sandbox.
//
// Secrets are masked, not only write-protected: .env and .env.* (which feed
// ${VAR} substitution in MCP server configs), the .ipybox directory but its
// virtualenv (servers.json), files that a server config names, and, in the
// host root mode, the dot files of the home directory.
var secretGlobs = []string{".env", ".env.*"}

const (
	// protectDepth is how deep below the workspace root existing protected
	// and secret names are looked for.
	protectDepth = 3
	// protectBudget bounds the directory entries that search visits.
	protectBudget = 50_000
)

// skipWalk are directories the search does not enter: big, and not read
// by host tools as configuration.
var skipWalk = []string{"node_modules", ".ipybox", "__pycache__", ".venv", "venv"}

// protection is what protectWorkspace decided for one start.
type protection struct {
	readOnly []string // paths bound read-only onto themselves
	masks    []string // files masked with the empty mask file
	maskDirs []string // directories replaced by empty, unlistable ones
}

// protectWorkspace creates the placeholders that must exist and lists the
// paths to protect and to mask. A symbolic link at a protected or secret
// name at the workspace root cannot be protected (kernel code could point
// it elsewhere, and host tools follow it); it stops the sandbox with an
// error that says what to do.
func (s *Sandbox) protectWorkspace() (*protection, error) {
	ws := s.workspace
	p := &protection{}
	isHome := s.home != "" && ws == s.home

	type name struct {
		name string
		dir  bool
		make bool // create a placeholder when missing
	}
	var names []name
	for _, n := range protectedDirs {
		names = append(names, name{n, true, true})
	}
	for _, n := range protectedFiles {
		names = append(names, name{n, false, true})
	}
	for _, n := range shellStartupFiles {
		names = append(names, name{n, false, isHome})
	}
	for _, n := range names {
		path := filepath.Join(ws, n.name)
		fi, err := os.Lstat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist) && n.make:
			if err := s.placeholder(n.name, n.dir); err != nil {
				return nil, err
			}
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return nil, fmt.Errorf("protect %s: %w", path, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			return nil, fmt.Errorf("%s is a symbolic link: the sandbox cannot write-protect it (code inside could repoint it, and host tools follow it); "+
				"replace it with what it points to, or remove it", path)
		}
		p.readOnly = append(p.readOnly, path)
	}

	// .env at the root always exists, so that it cannot appear unmasked.
	envPath := filepath.Join(ws, ".env")
	if fi, err := os.Lstat(envPath); errors.Is(err, fs.ErrNotExist) {
		if err := s.placeholder(".env", false); err != nil {
			return nil, err
		}
	} else if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("%s is a symbolic link: the sandbox cannot mask it; replace it with the file it points to, or remove it", envPath)
	}

	// Existing protected and secret names, at the root and below.
	budget := protectBudget
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return
		}
		for _, e := range ents {
			if budget--; budget < 0 {
				return
			}
			path := filepath.Join(dir, e.Name())
			isLink := e.Type()&fs.ModeSymlink != 0
			switch {
			case isSecret(e.Name()):
				if isLink {
					s.log.Warn("sandbox: a secret file is a symbolic link and cannot be masked; what it points to stays readable if visible", "path", path)
					continue
				}
				if e.IsDir() {
					p.maskDirs = append(p.maskDirs, path)
				} else {
					p.masks = append(p.masks, path)
				}
				continue
			case dir != ws && (slices.Contains(protectedDirs, e.Name()) || slices.Contains(protectedFiles, e.Name())):
				if isLink {
					s.log.Warn("sandbox: a protected path below the workspace is a symbolic link and cannot be write-protected; "+
						"do not run host tools in that directory", "path", path)
					continue
				}
				p.readOnly = append(p.readOnly, path)
				continue
			}
			if e.IsDir() && !isLink && depth < protectDepth && !slices.Contains(skipWalk, e.Name()) &&
				!slices.Contains(protectedDirs, e.Name()) {
				walk(path, depth+1)
			}
		}
	}
	walk(ws, 1)
	if budget < 0 {
		s.log.Warn("sandbox: the workspace is too large to search whole for protected names; those below the first entries are not protected",
			"entries", protectBudget)
	}

	// Repositories deeper down, from the snapshot (see gitplant.go).
	for _, g := range s.gitProtect() {
		if fi, err := os.Lstat(g); err != nil || fi.Mode()&fs.ModeSymlink != 0 || slices.Contains(p.readOnly, g) {
			continue
		}
		p.readOnly = append(p.readOnly, g)
	}

	// Files and directories a server config names as holding secrets. A
	// name that is a symbolic link is resolved, and its target (in the
	// workspace) masked: a mount on the link would land there anyway.
	if s.secrets != nil {
		for _, f := range s.secrets() {
			t, err := filepath.EvalSymlinks(f)
			if err != nil || !under(t, ws) || t == ws {
				continue
			}
			fi, err := os.Lstat(t)
			switch {
			case err != nil:
			case fi.Mode().IsRegular():
				if !slices.Contains(p.masks, t) {
					p.masks = append(p.masks, t)
				}
			case fi.IsDir():
				if !slices.Contains(p.maskDirs, t) {
					p.maskDirs = append(p.maskDirs, t)
				}
			}
		}
	}
	p.masks = append(p.masks, s.hardLinks(p.masks, p.maskDirs)...)
	return p, nil
}

// regularFiles lists up to max regular files below dir.
func regularFiles(dir string, max int) []string {
	var out []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || len(out) >= max {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			out = append(out, path)
		}
		return nil
	})
	return out
}

// isSecret reports whether a file name is one of secretGlobs.
func isSecret(name string) bool {
	for _, g := range secretGlobs {
		if ok, _ := filepath.Match(g, name); ok {
			return true
		}
	}
	return false
}

// hardLinks finds the other names, in the workspace, of masked files (and
// of the files in masked directories) that have more than one link: a
// link made earlier (perhaps by kernel code, before the file was filled
// with secrets) would show the same content unmasked.
func (s *Sandbox) hardLinks(masks, dirs []string) []string {
	type key struct{ dev, ino uint64 }
	want := map[key]int{} // missing links per inode
	var hidden []string
	for _, d := range dirs {
		hidden = append(hidden, regularFiles(d, protectBudget)...)
	}
	for _, m := range slices.Concat(masks, hidden) {
		var st syscall.Stat_t
		if err := syscall.Lstat(m, &st); err == nil && st.Nlink > 1 {
			want[key{uint64(st.Dev), st.Ino}] = int(st.Nlink) - 1
		}
	}
	if len(want) == 0 {
		return nil
	}
	var out []string
	budget := protectBudget * 4
	filepath.WalkDir(s.workspace, func(path string, d fs.DirEntry, err error) error {
		if err != nil || budget <= 0 {
			return nil
		}
		budget--
		if d.IsDir() && slices.Contains(dirs, path) {
			return filepath.SkipDir // masked whole
		}
		if d.IsDir() || !d.Type().IsRegular() || slices.Contains(masks, path) {
			return nil
		}
		var st syscall.Stat_t
		if syscall.Lstat(path, &st) != nil {
			return nil
		}
		k := key{uint64(st.Dev), st.Ino}
		if want[k] > 0 {
			want[k]--
			out = append(out, path)
		}
		return nil
	})
	for k, n := range want {
		if n > 0 {
			s.log.Warn("sandbox: a masked secret file has hard links that were not found in the workspace", "inode", k.ino, "missing", n)
		}
	}
	return out
}

// homeDotfiles lists the dot files and directories of the home directory,
// which the host root mode masks: ~/.ssh, ~/.aws, ~/.netrc, ~/.config and
// the like hold credentials, and a read-only view would still show them.
// The workspace's own .ipybox, when the workspace is the home, stays.
func (s *Sandbox) homeDotfiles() []string {
	if s.home == "" {
		return nil
	}
	ents, err := os.ReadDir(s.home)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(s.home, e.Name())
		if s.workspace == s.home && e.Name() == ".ipybox" {
			continue
		}
		out = append(out, p)
	}
	return out
}

// placeholder creates an empty file or directory at name in the workspace,
// without following a link, and records it for removal when the last
// sandbox of the workspace closes.
func (s *Sandbox) placeholder(name string, dir bool) error {
	ws := s.workspace
	var err error
	if dir {
		err = safefs.MkdirAll(ws, name, 0o755)
	} else {
		var f *os.File
		if f, err = safefs.CreateExclusive(ws, name, 0o600); err == nil {
			f.Close()
		} else if errors.Is(err, fs.ErrExist) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("create the placeholder %s: %w", filepath.Join(ws, name), err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(ws, name), &st); err == nil {
		placeholders.made(ws, placeholderFile{name: name, dir: dir, dev: uint64(st.Dev), ino: st.Ino})
	}
	return nil
}

// placeholderFile is a placeholder ipybox created.
type placeholderFile struct {
	name     string
	dir      bool
	dev, ino uint64
}

// placeholders counts the open sandboxes of each workspace, in this
// process, and the placeholders made there. Removing a placeholder while
// another sandbox has it mounted would detach that mount and lift the
// protection, so they go only when the last sandbox closes: the last of
// this process, and (see wslock_linux.go) the last of every process.
var placeholders = &placeholderSet{byWS: map[string]*wsPlaceholders{}}

type placeholderSet struct {
	mu   sync.Mutex
	byWS map[string]*wsPlaceholders
}

type wsPlaceholders struct {
	refs int
	made []placeholderFile
	hold *os.File // the shared lock across processes; nil if unavailable
	log  *slog.Logger
}

// acquire counts a sandbox of ws. The first in this process takes the
// shared hold across processes; without it (no cache folder), this
// process's placeholders are left in place at the end, which is safe,
// rather than removed from under another process's sandbox.
func (p *placeholderSet) acquire(ws string, log *slog.Logger) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.byWS[ws]
	if w == nil {
		w = &wsPlaceholders{log: log}
		var err error
		if w.hold, err = holdWorkspace(ws); err != nil {
			log.Warn("sandbox: cannot coordinate the workspace's placeholders with other processes; they stay after the sandbox closes", "workspace", ws, "err", err)
		}
		p.byWS[ws] = w
	}
	w.refs++
}

func (p *placeholderSet) made(ws string, f placeholderFile) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w := p.byWS[ws]; w != nil && !slices.ContainsFunc(w.made, func(g placeholderFile) bool { return g.name == f.name }) {
		w.made = append(w.made, f)
		if w.hold != nil {
			if err := journalAdd(ws, f); err != nil {
				w.log.Warn("sandbox: cannot record a placeholder; it stays if this process is killed", "path", filepath.Join(ws, f.name), "err", err)
			}
		}
	}
}

// release drops a reference; the last one removes the placeholders that
// are still what ipybox made: the same file, still empty.
func (p *placeholderSet) release(ws string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.byWS[ws]
	if w == nil {
		return
	}
	if w.refs--; w.refs > 0 {
		return
	}
	delete(p.byWS, ws)
	if w.hold == nil {
		return // not coordinated: another process may rely on them
	}
	last, journaled, done := releaseWorkspace(ws, w.hold)
	if !last {
		return // another process's sandbox still has them mounted
	}
	defer done()
	for _, f := range append(w.made, journaled...) {
		var st syscall.Stat_t
		if syscall.Lstat(filepath.Join(ws, f.name), &st) != nil || uint64(st.Dev) != f.dev || st.Ino != f.ino {
			continue
		}
		if f.dir {
			safefs.Remove(ws, f.name) // fails, as it should, when not empty
		} else if st.Size == 0 && st.Mode&syscall.S_IFMT == syscall.S_IFREG {
			safefs.Remove(ws, f.name)
		}
	}
}
