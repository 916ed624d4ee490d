package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// globBudget bounds the directory entries one "**" pattern may visit, so
// that a pattern like "~/**/.env" cannot stall a start.
const globBudget = 100_000

// expandPath makes a configured path absolute: "~" and "~/x" are relative
// to home, other relative paths to workspace.
func expandPath(p, workspace, home string) (string, error) {
	switch {
	case p == "~" || strings.HasPrefix(p, "~/"):
		if home == "" {
			return "", fmt.Errorf("path %q: the home directory is unknown; use an absolute path", p)
		}
		p = filepath.Join(home, strings.TrimPrefix(p[1:], "/"))
	case strings.HasPrefix(p, "~"):
		return "", fmt.Errorf("path %q: ~user is not supported; use an absolute path", p)
	case !filepath.IsAbs(p):
		p = filepath.Join(workspace, p)
	}
	return filepath.Clean(p), nil
}

func hasMeta(s string) bool { return strings.ContainsAny(s, `*?[`) }

// expandGlob returns the paths an absolute pattern stands for. A pattern
// without glob characters stands for itself, whether or not it exists; a
// glob stands for the existing paths it matches (sorted). "**" as a whole
// path element matches any number of directories, without following
// symbolic links.
func expandGlob(pattern string) ([]string, error) {
	if !hasMeta(pattern) {
		return []string{pattern}, nil
	}
	segs := strings.Split(strings.TrimPrefix(pattern, "/"), "/")
	for _, s := range segs {
		if _, err := filepath.Match(s, ""); err != nil {
			return nil, fmt.Errorf("glob %q: %w", pattern, err)
		}
	}
	if !slices.Contains(segs, "**") {
		m, err := filepath.Glob(pattern)
		if err != nil {
			return nil, fmt.Errorf("glob %q: %w", pattern, err)
		}
		return m, nil
	}
	budget := globBudget
	seen := map[string]bool{}
	var walk func(dir string, i int) error
	walk = func(dir string, i int) error {
		if i == len(segs) {
			seen[dir] = true
			return nil
		}
		seg := segs[i]
		if !hasMeta(seg) {
			p := filepath.Join(dir, seg)
			if _, err := os.Lstat(p); err == nil {
				return walk(p, i+1)
			}
			return nil
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil // unreadable or not a directory: no matches here
		}
		if seg == "**" {
			if err := walk(dir, i+1); err != nil {
				return err
			}
		}
		for _, e := range entries {
			if budget--; budget < 0 {
				return fmt.Errorf("glob %q visits more than %d entries; narrow the pattern", pattern, globBudget)
			}
			p := filepath.Join(dir, e.Name())
			if seg == "**" {
				if e.IsDir() { // DirEntry.IsDir is false for a symbolic link
					if err := walk(p, i); err != nil {
						return err
					}
				} else if i == len(segs)-1 {
					seen[p] = true // a trailing "**" matches files too
				}
				continue
			}
			if ok, _ := filepath.Match(seg, e.Name()); ok {
				if err := walk(p, i+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk("/", 0); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out, nil
}

// expandAll expands a list of configured paths (tilde, relative, globs).
// Paths that do not exist are dropped unless keepMissing.
func expandAll(list []string, workspace, home string, keepMissing bool) ([]string, error) {
	var out []string
	for _, p := range list {
		abs, err := expandPath(p, workspace, home)
		if err != nil {
			return nil, err
		}
		m, err := expandGlob(abs)
		if err != nil {
			return nil, err
		}
		for _, x := range m {
			if !keepMissing {
				if _, err := os.Lstat(x); errors.Is(err, os.ErrNotExist) {
					continue
				}
			}
			if !slices.Contains(out, x) {
				out = append(out, x)
			}
		}
	}
	return out, nil
}

// under reports whether p is dir or inside it (both clean and absolute).
func under(p, dir string) bool {
	if dir == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// underAny reports whether p is at or below one of dirs.
func underAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if under(p, d) {
			return true
		}
	}
	return false
}
