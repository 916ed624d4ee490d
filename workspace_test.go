package ipybox_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
)

// TestCheckWorkspace: a fresh workspace passes (and gets its .ipybox); a
// corrupt registry and, for a user other than root, a read-only
// directory fail with the path and the fix.
func TestCheckWorkspace(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	if err := ipybox.CheckWorkspace(ws); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(ws, ".ipybox")); err != nil || !fi.IsDir() {
		t.Fatalf(".ipybox: %v", err)
	}
	reg := filepath.Join(ws, ".ipybox", "servers.json")
	os.WriteFile(reg, []byte(`{"mcpServers": {"x": {"command": 1}}}`), 0o600)
	err := ipybox.CheckWorkspace(ws)
	if err == nil || !strings.Contains(err.Error(), "the registry of MCP servers does not load: loading "+reg+": ") || !strings.Contains(err.Error(), "mv "+reg+" "+reg+".bad") {
		t.Errorf("corrupt registry: %v", err)
	}
	if runtime.GOOS == "windows" || os.Geteuid() == 0 {
		return // root writes a 0555 directory
	}
	ro := t.TempDir()
	os.Chmod(ro, 0o555)
	defer os.Chmod(ro, 0o755)
	if err := ipybox.CheckWorkspace(ro); !errors.Is(err, ipybox.ErrWorkspaceNotWritable) || !strings.Contains(err.Error(), ro) {
		t.Errorf("read-only workspace: %v", err)
	}
}
