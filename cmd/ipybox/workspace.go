package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ensureWorkspace creates the --workspace directory when it does not exist
// (its parents too), and says so on stderr; an existing non-directory is an
// error.
func ensureWorkspace(env *cliEnv, cmd, dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return fmt.Errorf("--workspace %s is not a directory; choose a directory", dir)
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("--workspace: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--workspace: create %s: %w", dir, err)
	}
	fmt.Fprintf(env.stderr, "%s: created the workspace %s\n", cmd, dir)
	return nil
}
