//go:build unix

package mcpserver

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestMergeFollowsNoLink: merge, which moves a session's folders that
// kernel code writes, neither lists through a link (a folder, or a
// component of its path, swapped for one) nor waits on a FIFO, and merges
// real folders.
func TestMergeFollowsNoLink(t *testing.T) {
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("x"), 0o600)
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, base string) // makes base/from
		moved []string                        // what base/to holds after
		fails bool
	}{
		{"folder", func(t *testing.T, base string) {
			os.MkdirAll(filepath.Join(base, "from", "lib"), 0o755)
			os.WriteFile(filepath.Join(base, "from", "lib", "m.py"), nil, 0o600)
			os.WriteFile(filepath.Join(base, "from", "top.py"), nil, 0o600)
		}, []string{"lib/m.py", "top.py", "lib/kept.py"}, false},
		{"from is a link", func(t *testing.T, base string) {
			os.Symlink(outside, filepath.Join(base, "from"))
		}, []string{"lib/kept.py"}, true},
		{"a folder in from is a link", func(t *testing.T, base string) {
			os.MkdirAll(filepath.Join(base, "from"), 0o755)
			os.Symlink(outside, filepath.Join(base, "from", "lib"))
		}, []string{"lib/kept.py"}, true},
		{"from is a FIFO", func(t *testing.T, base string) {
			if err := syscall.Mkfifo(filepath.Join(base, "from"), 0o600); err != nil {
				t.Skip(err)
			}
		}, []string{"lib/kept.py"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			os.MkdirAll(filepath.Join(base, "to", "lib"), 0o755)
			os.WriteFile(filepath.Join(base, "to", "lib", "kept.py"), nil, 0o600)
			tc.plant(t, base)
			done := make(chan error, 1)
			go func() { done <- merge(base, "from", "to") }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("merge hangs")
			}
			if (err != nil) != tc.fails {
				t.Errorf("merge: %v, want failure %v", err, tc.fails)
			}
			for _, p := range tc.moved {
				if _, err := os.Lstat(filepath.Join(base, "to", p)); err != nil {
					t.Errorf("to/%s: %v", p, err)
				}
			}
			if _, err := os.Lstat(filepath.Join(base, "to", "secret.txt")); err == nil {
				t.Error("a file behind a link was moved in")
			}
			if _, err := os.Stat(filepath.Join(outside, "secret.txt")); err != nil {
				t.Errorf("the file behind the link: %v", err)
			}
		})
	}
}
