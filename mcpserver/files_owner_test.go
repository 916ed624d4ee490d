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
// to a file elsewhere. The copy must not write into it: it refuses
// another user's file, and replaces a hard link's name with a new file.
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

	// Another user's file: refused, and left as it was (root would replace
	// it even in a sticky folder such as /tmp).
	theirs := filepath.Join(shared, "theirs.txt")
	os.WriteFile(theirs, []byte("old"), 0o666)
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := copyIn("theirs.txt"); err == nil || !strings.Contains(err.Error(), "belongs to another user") {
		t.Errorf("copy over another user's file: %v; want a refusal", err)
	}
	if got := owner("theirs.txt"); got != 65534 {
		t.Errorf("theirs.txt belongs to uid %d after the copy; want it kept (65534)", got)
	}
	if b, _ := os.ReadFile(theirs); string(b) != "old" {
		t.Errorf("theirs.txt holds %q", b)
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
