package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/testenv"
)

// mcpStdio starts ipybox mcp over stdio with args and env additions.
func mcpStdio(t *testing.T, env []string, args ...string) (*mcp.ClientSession, *lockedBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"mcp", "--workspace", t.TempDir()}, args...)...)
	cmd.Env = append(append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1"), env...)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	return goClient(t, &mcp.CommandTransport{Command: cmd}, nil), stderr
}

// probeCell tells from inside whether the kernel is sandboxed, and what
// network it has.
const probeCell = `import os, socket
print(socket.gethostname() == "ipybox", os.environ.get("HTTPS_PROXY", "none"))`

// TestMCPSandboxedByDefault: ipybox mcp sandboxes its kernels unless told
// not to, with public network through the egress proxy; --sandbox keeps
// sandbox-runtime's semantics (no network).
func TestMCPSandboxedByDefault(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "True http://127.0.0.1:3128"},
		{[]string{"--sandbox"}, "True none"},
		{[]string{"--no-sandbox"}, "False none"},
	} {
		cs, stderr := mcpStdio(t, nil, tc.args...)
		if got := runCell(t, cs, probeCell); got != tc.want {
			t.Errorf("%q: %q, want %q\n%s", tc.args, got, tc.want, stderr)
		}
	}
}

// TestMCPNoSandboxHere: where the sandbox cannot run, the default gives way
// to an unsandboxed kernel with one warning, and an explicit --sandbox
// fails.
func TestMCPNoSandboxHere(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	// A PATH with Python but no bwrap.
	bin := t.TempDir()
	if err := os.Symlink(py, filepath.Join(bin, "python3")); err != nil {
		t.Fatal(err)
	}
	path := "PATH=" + bin
	cs, stderr := mcpStdio(t, []string{path})
	if got := runCell(t, cs, probeCell); got != "False none" {
		t.Errorf("default without bwrap: %q, want an unsandboxed kernel", got)
	}
	if n := strings.Count(stderr.String(), "kernels run UNSANDBOXED"); n != 1 {
		t.Errorf("want one warning, got %d:\n%s", n, stderr)
	}
	cmd := exec.Command(os.Args[0], "mcp", "--workspace", t.TempDir(), "--sandbox")
	cmd.Env = append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1", path)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--sandbox: sandbox unavailable") {
		t.Errorf("--sandbox without bwrap: %v\n%s", err, out)
	}
	// The plugin's arguments ask for the sandbox with --allowed-domain
	// alone: the error names that flag, not a --sandbox never passed.
	cmd = exec.Command(os.Args[0], "mcp", "--workspace", t.TempDir(), "--approval", "elicit", "--allowed-domain", "*")
	cmd.Env = append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1", path)
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--allowed-domain (which implies --sandbox): sandbox unavailable") {
		t.Errorf("--allowed-domain without bwrap: %v\n%s", err, out)
	}
}
