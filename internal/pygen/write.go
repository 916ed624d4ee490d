package pygen

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Write generates the modules of server's tools and puts them in
// root/<server>, where root is a workspace's mcptools folder. It creates
// root and an empty root/__init__.py when they are missing, so that
// "import mcptools.<server>.<tool>" works.
//
// Only root/<server> is replaced, and it is replaced whole: the new files
// are written to a temporary folder beside it, which then takes its
// place, so no stale module survives. Nothing outside root is touched:
// the server name is checked before any I/O, root itself must not be a
// symbolic link, and every operation goes through an os.Root.
func Write(root, server string, tools []Tool) ([]Module, error) {
	if err := ValidServerName(server); err != nil {
		return nil, err
	}
	files, mods, err := Generate(server, tools)
	if err != nil {
		return nil, err
	}
	r, err := openFolder(root)
	if err != nil {
		return nil, err
	}
	defer r.Close()

	if _, err := r.Lstat("__init__.py"); errors.Is(err, fs.ErrNotExist) {
		if err := r.WriteFile("__init__.py", nil, 0o644); err != nil {
			return nil, fmt.Errorf("write tool modules: %w", err)
		}
	}
	removeLeftovers(r, server)

	tmp := "." + server + ".tmp-" + randomSuffix()
	if err := r.Mkdir(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("write tool modules: %w", err)
	}
	for _, f := range files {
		name, ok := strings.CutPrefix(f.Path, server+"/")
		if !ok || name != path.Base(name) {
			r.RemoveAll(tmp)
			return nil, fmt.Errorf("internal error: unexpected generated path %q", f.Path)
		}
		if err := r.WriteFile(tmp+"/"+name, f.Data, 0o644); err != nil {
			r.RemoveAll(tmp)
			return nil, fmt.Errorf("write tool modules: %w", err)
		}
	}

	// Swap: the old folder (or whatever has its name) steps aside, the new
	// one takes the name, the old one goes. Between the two renames the
	// server's package is briefly absent, never half written.
	var old string
	if _, err := r.Lstat(server); err == nil {
		old = "." + server + ".old-" + randomSuffix()
		if err := r.Rename(server, old); err != nil {
			r.RemoveAll(tmp)
			return nil, fmt.Errorf("write tool modules: %w", err)
		}
	}
	if err := r.Rename(tmp, server); err != nil {
		if old != "" {
			r.Rename(old, server) // put the previous modules back
		}
		r.RemoveAll(tmp)
		return nil, fmt.Errorf("write tool modules: %w", err)
	}
	if old != "" {
		if err := r.RemoveAll(old); err != nil {
			return mods, fmt.Errorf("remove the previous modules: %w", err)
		}
	}
	return mods, nil
}

// openFolder opens root, creating it if missing, from its parent without
// following a link out of the parent: the workspace is writable by kernel
// code, which can swap the folder for a link to anywhere between a check
// and an open (renameat2 RENAME_EXCHANGE). Once open, every operation is
// relative to the folder itself, wherever it is moved.
func openFolder(root string) (*os.Root, error) {
	dir := filepath.Dir(root)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	parent, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("write tool modules: %w", err)
	}
	defer parent.Close()
	name := filepath.Base(root)
	if err := parent.Mkdir(name, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("create %s: %w", root, err)
	}
	if fi, err := parent.Lstat(name); err != nil {
		return nil, fmt.Errorf("write tool modules: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory (a symbolic link is refused too); pass the workspace's mcptools folder", root)
	}
	// The check above gives the usual error; this open is the guard. A link
	// that appears in between is followed only within the parent.
	r, err := parent.OpenRoot(name)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", root, err)
	}
	return r, nil
}

// removeLeftovers removes the temporary folders of an earlier Write of
// server that did not finish.
func removeLeftovers(r *os.Root, server string) {
	entries, err := fs.ReadDir(r.FS(), ".")
	if err != nil {
		return
	}
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, "."+server+".tmp-") || strings.HasPrefix(n, "."+server+".old-") {
			r.RemoveAll(n)
		}
	}
}

func randomSuffix() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}
