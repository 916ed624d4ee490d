// Package wsguard computes, at each start of a process that may write a
// workspace, how that workspace is protected from it: the one place that
// the bwrap sandbox, the container and the helper sandboxes (pip, the
// virtualenv's creation, sandboxed stdio MCP servers) take their
// protection from.
//
//   - Write protection comes from internal/hostpaths' list, enforced at
//     any depth by the guard (internal/seccomp). Protect adds what the
//     host's own git configuration names inside the workspace (a global
//     core.hooksPath, the config of a repository that holds the
//     workspace), and lists the protected paths that exist at the root, to
//     be mounted read-only as well (belt and braces: a mount on a path that
//     exists leaves nothing behind in the workspace).
//   - Masks hide secrets: .env and .env.* (which feed ${VAR} substitution),
//     the files and folders MCP server configs name as holding secrets, and
//     every other name of those files (hard links).
package wsguard

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ipybox/ipybox/internal/hostpaths"
)

// Input is what Protect needs to know.
type Input struct {
	// Workspace is the absolute, clean workspace.
	Workspace string
	// Home is the user's home ("" when unknown).
	Home string
	// Secrets lists files and folders that server configs name as holding
	// secrets (absolute). Nil: none.
	Secrets func() []string
	// Log receives warnings. Nil discards them.
	Log *slog.Logger
}

// Protection is what one start must do.
type Protection struct {
	// ReadOnly are protected paths that exist at the workspace root, to
	// be mounted read-only onto themselves.
	ReadOnly []string
	// Masks are files to hide behind an empty one; MaskDirs folders to
	// replace with an empty, unlistable one.
	Masks, MaskDirs []string
	// Protected are more paths that may not change, nor the folders
	// above them: what the host's git configuration names inside the
	// workspace, and the files and folders that server configs name
	// (masked, and read by host servers).
	Protected []string
	// GitRelative are paths relative to every repository's working tree
	// that may not change (a global core.hooksPath given relative).
	GitRelative []string
}

// Fingerprint identifies what a Protection hides and protects: a process
// started under one Fingerprint must not serve a session whose current
// Protection has another (a pool kernel started before a server with a
// secret file was registered).
func (p *Protection) Fingerprint() string {
	parts := []string{}
	for _, l := range [][]string{p.ReadOnly, p.Masks, p.MaskDirs, p.Protected, p.GitRelative} {
		c := slices.Clone(l)
		slices.Sort(c)
		parts = append(parts, strings.Join(c, "\x00"))
	}
	return strings.Join(parts, "\x01")
}

const (
	// secretDepth is how deep below the workspace root .env files are
	// looked for, and secretBudget how many entries that search visits.
	secretDepth  = 4
	secretBudget = 50_000
)

// Protect computes the protection of a workspace for one start. A link at
// a protected name or a secret's name at the root is an error: the mount
// would land where the link points, and host programs follow it.
func Protect(in Input) (*Protection, error) {
	log := in.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ws := filepath.Clean(in.Workspace)
	p := &Protection{}
	ents, err := os.ReadDir(ws)
	if err != nil {
		return nil, fmt.Errorf("read the workspace %s: %w", ws, err)
	}
	for _, e := range ents {
		entry, ok := hostpaths.MatchName(e.Name(), true)
		if !ok {
			continue
		}
		path := filepath.Join(ws, e.Name())
		if e.Type()&fs.ModeSymlink != 0 {
			return nil, fmt.Errorf("%s is a symbolic link: the sandbox cannot protect it (code inside could write where it points, and %s follows it); "+
				"replace it with what it points to, or remove it", path, entry.Who)
		}
		if entry.Secret {
			if e.IsDir() {
				p.MaskDirs = append(p.MaskDirs, path)
			} else {
				p.Masks = append(p.Masks, path)
			}
			continue
		}
		if e.Name() == ".ipybox" {
			continue // the launcher hides it whole and binds what it shares
		}
		p.ReadOnly = append(p.ReadOnly, path)
	}
	m, md := secretsBelow(ws, log)
	p.Masks = appendNew(p.Masks, m...)
	p.MaskDirs = appendNew(p.MaskDirs, md...)
	var named []string
	if in.Secrets != nil {
		for _, f := range in.Secrets() {
			// A link is resolved: a mount on it would land on its target.
			t, err := filepath.EvalSymlinks(f)
			if err != nil || !under(t, ws) || t == ws {
				continue
			}
			switch fi, err := os.Lstat(t); {
			case err != nil:
			case fi.Mode().IsRegular():
				p.Masks = appendNew(p.Masks, t)
				named = append(named, t)
			case fi.IsDir():
				p.MaskDirs = appendNew(p.MaskDirs, t)
				named = append(named, t)
			}
		}
	}
	links, err := hardLinks(ws, p.Masks, p.MaskDirs, log)
	if err != nil {
		return nil, err
	}
	p.Masks = appendNew(p.Masks, links...)
	p.Protected, p.GitRelative = hostGit(ws, in.Home)
	// A mask hides a file, but the folders above it stay the kernel's: it
	// moved one away and made the path anew, and the host server read the
	// kernel's file where its config names its key or its config. The
	// guard keeps the path, and every folder above it, as it is.
	p.Protected = appendNew(p.Protected, named...)
	return p, nil
}

// secretsBelow finds .env and .env.* below the root, breadth first, to
// secretDepth levels and secretBudget entries.
func secretsBelow(ws string, log *slog.Logger) (masks, dirs []string) {
	budget := secretBudget
	level := []string{ws}
	for depth := 1; depth <= secretDepth && len(level) > 0; depth++ {
		var next []string
		for _, dir := range level {
			ents, err := os.ReadDir(dir)
			if err != nil {
				continue
			}
			for _, e := range ents {
				if budget--; budget < 0 {
					log.Warn("sandbox: the workspace is too large to search whole for .env files; those further down stay readable",
						"entries", secretBudget)
					return masks, dirs
				}
				path := filepath.Join(dir, e.Name())
				isLink := e.Type()&fs.ModeSymlink != 0
				if depth > 1 && hostpaths.IsSecret(e.Name(), false) {
					if isLink {
						log.Warn("sandbox: a secret file is a symbolic link and cannot be masked; what it points to stays readable if visible", "path", path)
					} else if e.IsDir() {
						dirs = append(dirs, path)
					} else {
						masks = append(masks, path)
					}
					continue
				}
				if e.IsDir() && !isLink && !(depth == 1 && e.Name() == ".ipybox") {
					next = append(next, path)
				}
			}
		}
		level = next
	}
	return masks, dirs
}

// hostGit returns what the host's git configuration names inside the
// workspace: the global and system configs, and the configs of the
// repositories that hold the workspace (a parent folder's .git). Relative
// core.hooksPath values of the global configs apply to every repository.
// The guard finds the repositories inside the workspace itself, at each
// call.
func hostGit(ws, home string) (protected, relative []string) {
	var configs []string
	if v := os.Getenv("GIT_CONFIG_GLOBAL"); v != "" {
		configs = append(configs, v)
	} else if home != "" {
		configs = append(configs, filepath.Join(home, ".gitconfig"))
		xdg := os.Getenv("XDG_CONFIG_HOME")
		if xdg == "" {
			xdg = filepath.Join(home, ".config")
		}
		configs = append(configs, filepath.Join(xdg, "git", "config"))
	}
	if os.Getenv("GIT_CONFIG_NOSYSTEM") == "" {
		configs = append(configs, "/etc/gitconfig")
	}
	add := func(named []hostpaths.Named) {
		for _, n := range named {
			if under(n.Path, ws) && n.Path != ws {
				protected = appendNew(protected, n.Path)
			}
		}
	}
	for _, c := range configs {
		b, err := readConfig(c)
		if err != nil {
			continue
		}
		// Relative paths in a global config are relative to the working
		// tree of whichever repository git runs in: resolve them against
		// a marker and keep the relative part.
		const marker = "/\x00worktree"
		named, _ := hostpaths.ConfigPaths(b, filepath.Dir(c), marker, home)
		for _, n := range named {
			if rel, ok := strings.CutPrefix(n.Path, marker+"/"); ok {
				relative = appendNew(relative, rel)
				continue
			}
			add([]hostpaths.Named{n})
		}
	}
	// Repositories that hold the workspace: their configs may name paths
	// inside it (core.hooksPath = sub/hooks).
	for d := filepath.Dir(ws); ; d = filepath.Dir(d) {
		gitdir := filepath.Join(d, ".git")
		if b, err := os.ReadFile(gitdir); err == nil { // a .git file
			if g := hostpaths.GitDirPointer(b, d); g != "" {
				gitdir = g
			}
		}
		if b, err := readConfig(filepath.Join(gitdir, "config")); err == nil {
			named, _ := hostpaths.ConfigPaths(b, gitdir, d, home)
			add(named)
		}
		if d == "/" || d == "." {
			break
		}
	}
	return protected, relative
}

func readConfig(p string) ([]byte, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > 1<<20 {
		return nil, errors.New("not a small regular file")
	}
	return os.ReadFile(p)
}

func appendNew(list []string, items ...string) []string {
	for _, it := range items {
		if !slices.Contains(list, it) {
			list = append(list, it)
		}
	}
	return list
}

// under reports whether p is dir or inside it (both clean and absolute).
func under(p, dir string) bool {
	if dir == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}
