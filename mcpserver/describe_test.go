package mcpserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDescribe: each way a copy's path can fail, made for real through
// dirFS, gets its sentence, told by the error's identity, not its text.
func TestDescribe(t *testing.T) {
	base := t.TempDir()
	os.WriteFile(filepath.Join(base, "file"), []byte("x"), 0o644)
	os.Symlink("/etc", filepath.Join(base, "link"))
	d := dirFS{base}
	for _, tc := range []struct {
		rel, want string
	}{
		{"missing/x", "missing/x does not exist"},
		{"file/child", "file/child: a parent of it is a file, not a directory"},
		{"link/passwd", "link/passwd leads through a symbolic link, which is refused"},
		{"../outside", `../outside leads outside its directory through a symbolic link or "..", which is refused`},
	} {
		_, err := d.OpenFile(tc.rel, os.O_RDONLY, 0)
		if err == nil {
			t.Errorf("%s: opened", tc.rel)
			continue
		}
		if got := describe(err, tc.rel).Error(); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %q (from %v), want %q", tc.rel, got, err, tc.want)
		}
	}
}
