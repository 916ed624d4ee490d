//go:build unix

package safefs

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestBeneathNeverWaitsOnFIFO: kernel code can put a FIFO where the host
// expects a folder it measures, lists or empties (os.Root's Open and
// OpenRoot would block on it until a writer came); each refuses at once,
// also for a FIFO deeper in the tree, and counts or removes the rest.
func TestBeneathNeverWaitsOnFIFO(t *testing.T) {
	base := t.TempDir()
	os.MkdirAll(filepath.Join(base, "snap", "sub"), 0o755)
	os.WriteFile(filepath.Join(base, "snap", "sub", "f"), make([]byte, 4096), 0o600)
	for _, p := range []string{"fifo", "snap/fifo"} {
		if err := mkfifo(filepath.Join(base, p)); err != nil {
			t.Skip(err)
		}
	}
	for _, tc := range []struct {
		name string
		fn   func() error
	}{
		{"SizeBeneath of a FIFO", func() error { _, err := SizeBeneath(base, "fifo", 100); return err }},
		{"ReadDirBeneath of a FIFO", func() error { _, err := ReadDirBeneath(base, "fifo"); return err }},
		{"EmptyBeneath of a FIFO", func() error { return EmptyBeneath(base, "fifo") }},
		{"IsDirBeneath of a FIFO", func() error {
			if IsDirBeneath(base, "fifo") {
				t.Error("a FIFO is a folder")
			}
			return os.ErrInvalid
		}},
	} {
		done := make(chan error, 1)
		go func() { done <- tc.fn() }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("%s: no error", tc.name)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: waits on the FIFO", tc.name)
		}
	}
	// A FIFO inside the folder measured is a file of no size.
	n, err := SizeBeneath(base, "snap", 100)
	if err != nil || n != 4096 {
		t.Errorf("SizeBeneath with a FIFO inside: %d, %v; want 4096", n, err)
	}
	if err := EmptyBeneath(base, "snap"); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(base, "snap")); len(ents) != 0 {
		t.Errorf("left after EmptyBeneath: %v", ents)
	}
}
