package safefs

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestSizeSparseAndLinks: a sparse file counts as the disk it takes, not
// its length, and a link to a folder outside is not followed.
func TestSizeSparseAndLinks(t *testing.T) {
	t.Parallel()
	dir, outside := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "small"), []byte("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "big"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(4 << 30)
	f.Close()
	n, err := Size(dir, 100)
	if err != nil {
		t.Fatal(err)
	}
	want := int64(5)
	if runtime.GOOS == "windows" {
		want += 4 << 30 // no block count is read there
	}
	if n != want {
		t.Errorf("Size = %d, want %d (the small file; the sparse file takes no disk; the link is not followed)", n, want)
	}
	if n, err := Size(filepath.Join(dir, "missing"), 100); n != 0 || err != nil {
		t.Errorf("a missing folder: %d, %v", n, err)
	}
}

// TestBeneathFollowsNoLinkOut: SizeBeneath, EmptyBeneath and
// RemoveAllBeneath of a folder that kernel code replaced with a link out
// of base neither count, nor empty, nor remove what it points to; skip
// and keep leave their entries be.
func TestBeneathFollowsNoLinkOut(t *testing.T) {
	t.Parallel()
	base, outside := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(outside, "3"), 0o700)
	os.WriteFile(filepath.Join(outside, "3", "f"), make([]byte, 4096), 0o600)
	if err := os.Symlink(outside, filepath.Join(base, "rewind")); err != nil {
		t.Fatal(err)
	}
	if n, err := SizeBeneath(base, "rewind", 100); err == nil || n != 0 {
		t.Errorf("SizeBeneath through a link: %d, %v", n, err)
	}
	EmptyBeneath(base, "rewind")
	RemoveAllBeneath(base, "rewind/3")
	if _, err := os.Stat(filepath.Join(outside, "3", "f")); err != nil {
		t.Fatalf("removed through the link: %v", err)
	}
	if err := RemoveAllBeneath(base, "rewind"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(base, "rewind")); !os.IsNotExist(err) || !exists(filepath.Join(outside, "3", "f")) {
		t.Fatalf("RemoveAllBeneath of the link: %v", err)
	}

	os.MkdirAll(filepath.Join(base, "rewind", "1"), 0o700)
	os.WriteFile(filepath.Join(base, "rewind", "1", "f"), make([]byte, 4096), 0o600)
	os.WriteFile(filepath.Join(base, "snap"), make([]byte, 4096), 0o600)
	all, _ := SizeBeneath(base, ".", 100)
	some, _ := SizeBeneath(base, ".", 100, "rewind")
	if all != 8192 || some != 4096 {
		t.Errorf("SizeBeneath: %d in all, %d skipping rewind; want 8192, 4096", all, some)
	}
	if err := EmptyBeneath(base, ".", "rewind"); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(base, "snap")) || !exists(filepath.Join(base, "rewind", "1", "f")) {
		t.Error("EmptyBeneath did not keep what keep names, or kept the rest")
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }
