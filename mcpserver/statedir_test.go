package mcpserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStateDirPlace: the state folder may be outside the workspace or in
// .ipybox/sessions; not elsewhere in the workspace (kernels write it, and
// .ipybox/packages and .ipybox/snapshots are bound writable into them),
// and not through a link that leads there.
func TestStateDirPlace(t *testing.T) {
	t.Parallel()
	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.Mkdir(filepath.Join(ws, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(outside, "into-ws")
	if err := os.Symlink(filepath.Join(ws, "sub"), link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir string
		ok  bool
	}{
		{"", true},
		{filepath.Join(outside, "state"), true},
		{filepath.Join(ws, ".ipybox", "sessions"), true},
		{filepath.Join(ws, ".ipybox", "sessions", "team"), true},
		{filepath.Join(ws, "state"), false},
		{filepath.Join(ws, ".ipybox", "packages", "x"), false},
		{filepath.Join(ws, ".ipybox", "snapshots", "x"), false},
		{filepath.Join(ws, ".ipybox"), false},
		{filepath.Join(link, "state"), false},
	} {
		_, err := openStateDir(ws, tc.dir)
		if (err == nil) != tc.ok {
			t.Errorf("state folder %q: %v; want ok=%v", tc.dir, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "in the workspace") {
			t.Errorf("state folder %q refused for another reason: %v", tc.dir, err)
		}
	}
}
