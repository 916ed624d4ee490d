package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/testenv"
)

// TestWorkspaceCreated: a missing --workspace is created (with its
// parents) and the cell runs in it; a file in its place is an error.
func TestWorkspaceCreated(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	ws := filepath.Join(t.TempDir(), "a", "ws")
	out, errOut, code := runBinary(t, "", "exec", "--workspace", ws, "-c", "import os; print(os.getcwd())")
	if code != 0 || strings.TrimSpace(out) != ws || !strings.Contains(errOut, "created the workspace "+ws) {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o644)
	_, errOut, code = runBinary(t, "", "exec", "--workspace", file, "-c", "pass")
	if code != exitUsage || !strings.Contains(errOut, "is not a directory") {
		t.Errorf("a file as the workspace: exit %d, %q", code, errOut)
	}
}

// TestMCPBadPythonFailsAtStart: `ipybox mcp --python` with an interpreter
// that cannot run kernels fails at once, naming it, instead of retrying in
// the background.
func TestMCPBadPythonFailsAtStart(t *testing.T) {
	t.Parallel()
	for _, py := range []string{"/nonexistent/python3", "/usr/bin/false"} {
		_, errOut, code := runBinary(t, "", "mcp", "--workspace", t.TempDir(), "--python", py)
		if code != exitUsage || !strings.Contains(errOut, py) {
			t.Errorf("--python %s: exit %d, stderr %q; want a usage error that names it", py, code, errOut)
		}
	}
}
