//go:build unix

package mcpserver

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestCopyWritesANewFile attacks download_file's (and upload_file's)
// target: a file that another user owns in a shared folder, or a hard link
// to a file elsewhere. The copy must not write into it: it replaces the
// name with a new file of its own, or refuses.
func TestCopyWritesANewFile(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	src, shared := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(src, "in.txt"), []byte("from the kernel"), 0o644)
	copyIn := func(dst string) (int64, error) {
		return copyFile(dirFS{src}, "in.txt", "relpath in.txt", dirFS{shared}, dst, "local_path "+dst)
	}
	owner := func(p string) uint32 {
		st, err := os.Lstat(filepath.Join(shared, p))
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Uid
	}

	// Another user's file: the result is ours, and theirs is not written.
	theirs := filepath.Join(shared, "theirs.txt")
	os.WriteFile(theirs, []byte("old"), 0o666)
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	keep, _ := os.Open(theirs) // the old file, as its owner still sees it
	defer keep.Close()
	if _, err := copyIn("theirs.txt"); err != nil {
		t.Fatal(err)
	}
	if got := owner("theirs.txt"); got != uint32(os.Getuid()) {
		t.Errorf("theirs.txt belongs to uid %d after the copy; want a new file of uid %d", got, os.Getuid())
	}
	if b, _ := os.ReadFile(theirs); string(b) != "from the kernel" {
		t.Errorf("theirs.txt holds %q", b)
	}
	old := make([]byte, 16)
	n, _ := keep.ReadAt(old, 0)
	if string(old[:n]) != "old" {
		t.Errorf("the other user's file was written: %q", old[:n])
	}

	// A hard link: the other name keeps its bytes.
	other := filepath.Join(shared, "other.txt")
	os.WriteFile(other, []byte("keep me"), 0o644)
	if err := os.Link(other, filepath.Join(shared, "link.txt")); err != nil {
		t.Fatal(err)
	}
	if _, err := copyIn("link.txt"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(other); string(b) != "keep me" {
		t.Errorf("the copy wrote through a hard link: other.txt holds %q", b)
	}

	// Nothing is left beside the target.
	ents, _ := os.ReadDir(shared)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".ipybox-") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}
