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
