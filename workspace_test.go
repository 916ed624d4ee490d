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
	switch {
	case runtime.GOOS == "windows":
		// A read-only folder's mode means nothing to Windows' ACLs.
	case os.Geteuid() == 0:
		// Root writes a 0555 directory: the check runs as another user.
		checkReadOnlyAsOtherUser(t)
	default:
		ro := t.TempDir()
		os.Chmod(ro, 0o555)
		defer os.Chmod(ro, 0o755)
		checkReadOnly(t, ro)
	}
}

// checkReadOnly: a workspace this user cannot write fails with
// ErrWorkspaceNotWritable and its path.
func checkReadOnly(t *testing.T, ro string) {
	t.Helper()
	if err := ipybox.CheckWorkspace(ro); !errors.Is(err, ipybox.ErrWorkspaceNotWritable) || !strings.Contains(err.Error(), ro) {
		t.Errorf("read-only workspace: %v", err)
	}
}

// readOnlyWorkspaceEnv names, in the run of the test binary as another
// user, the workspace that user cannot write.
const readOnlyWorkspaceEnv = "IPYBOX_TEST_READONLY_WORKSPACE"

// TestCheckWorkspaceReadOnlyChild is TestCheckWorkspace's read-only half
// in the run as another user (checkReadOnlyAsOtherUser); elsewhere it
// does nothing.
func TestCheckWorkspaceReadOnlyChild(t *testing.T) {
	ro := os.Getenv(readOnlyWorkspaceEnv)
	if ro == "" {
		return
	}
	checkReadOnly(t, ro)
}
