// Package statedir makes a workspace's .ipybox folder, ipybox's state, the
// same way wherever it is first needed (a kernel start in any backend, the
// registry's first save, the virtualenv's lock, the workspace check).
package statedir

import (
	"fmt"
	"path/filepath"

	"github.com/ipybox/ipybox/internal/safefs"
)

// Name is the state folder's name, directly below the workspace.
const Name = ".ipybox"

// gitignore ignores the folder whole, as .pytest_cache's does: git status
// stays clean in a repository that is the workspace.
const gitignore = "# Created by ipybox: its state stays out of git.\n*\n"

// Ensure creates ws/.ipybox when it is missing (without following a link
// below ws), with a .gitignore that ignores it, and returns its path. An
// existing .gitignore is left as it is.
func Ensure(ws string) (string, error) {
	dir := filepath.Join(ws, Name)
	if err := safefs.MkdirAll(ws, Name, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	f, err := safefs.CreateExclusive(ws, filepath.Join(Name, ".gitignore"), 0o644)
	if err == nil {
		_, err = f.WriteString(gitignore)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", fmt.Errorf("write %s: %w", filepath.Join(dir, ".gitignore"), err)
		}
	}
	return dir, nil
}
