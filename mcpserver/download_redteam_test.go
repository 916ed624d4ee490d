//go:build unix

package mcpserver

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestRedteamDownloadReplacesInStickyFolder: download_file writes a new
// file and renames it over local_path, so it never writes into another
// user's file. But in a sticky folder (/tmp, the default allowed folder
// besides the workspace) the sticky bit is what keeps one user from
// replacing another's names; a root ipybox is not held by it. Kernel code
// chooses the bytes, the agent the path (/tmp/<bob's file>), and bob's
// name then holds a root-owned file of the kernel's content, which bob
// can neither change nor remove. The test fails while the name changes
// owner; it would pass if a root ipybox refused a target that another
// user owns (or whose folder is sticky and owned by someone else).
func TestRedteamDownloadReplacesInStickyFolder(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs a root ipybox")
	}
	t.Parallel()
	ws := t.TempDir()
	shared := t.TempDir()
	os.Chmod(shared, 0o1777) // like /tmp
	theirs := filepath.Join(shared, "bob-notes.txt")
	os.WriteFile(theirs, []byte("bob's"), 0o644)
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, &Options{Workspace: ws, AllowedDirs: []string{ws, shared}})
	cs := connect(t, srv, nil)
	run(t, cs, "open('out.txt', 'w').write('from the kernel')")
	res := call(t, cs, "download_file", map[string]any{"relpath": "out.txt", "local_path": theirs})
	st, err := os.Lstat(theirs)
	if err != nil {
		t.Fatal(err)
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; uid != 65534 {
		b, _ := os.ReadFile(theirs)
		t.Errorf("download_file replaced another user's name in a sticky folder: it is now uid %d's, holding %q (result %q)", uid, b, text(res))
	}
}
