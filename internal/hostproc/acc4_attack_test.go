package hostproc

// acc4: LookPath (the fix of acc3 attack 17) against PATH entries that
// reach the workspace through links. A test that fails with "BROKE:"
// found a way through.

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAcc4LookPathLinkedEntries: PATH entries outside the workspace that
// lead into it (a link to the workspace's bin folder; a link to a file
// the kernel writes; a link into a kernel's run directory name), ahead
// of the real program: LookPath must pass over each.
func TestAcc4LookPathLinkedEntries(t *testing.T) {
	ws := t.TempDir()
	outside := t.TempDir()
	real := filepath.Join(outside, "real")
	os.MkdirAll(real, 0o755)
	os.WriteFile(filepath.Join(real, "acc4tool"), []byte("#!/bin/sh\n"), 0o755)
	wsBin := filepath.Join(ws, "bin")
	os.MkdirAll(wsBin, 0o755)
	os.WriteFile(filepath.Join(wsBin, "acc4tool"), []byte("#!/bin/sh\necho kernel\n"), 0o755)
	// 1: a folder link to <ws>/bin.
	dirLink := filepath.Join(outside, "dirlink")
	os.Symlink(wsBin, dirLink)
	// 2: a folder of its own whose acc4tool links to the kernel's file.
	fileLinks := filepath.Join(outside, "filelinks")
	os.MkdirAll(fileLinks, 0o755)
	os.Symlink(filepath.Join(wsBin, "acc4tool"), filepath.Join(fileLinks, "acc4tool"))
	// 3: a chain of two links, the last relative.
	chain := filepath.Join(outside, "chain")
	os.Symlink("dirlink", chain)
	for _, entry := range []string{dirLink, fileLinks, chain, filepath.Join(outside, "real", "..", "dirlink")} {
		t.Setenv("PATH", entry+string(os.PathListSeparator)+real)
		got, err := LookPath("acc4tool", []string{ws})
		if err != nil {
			t.Errorf("PATH %s: %v", entry, err)
			continue
		}
		if got != filepath.Join(real, "acc4tool") {
			t.Errorf("BROKE: with PATH entry %s (a link into the workspace) first, LookPath found %s, which kernel code writes", entry, got)
		}
	}
}
