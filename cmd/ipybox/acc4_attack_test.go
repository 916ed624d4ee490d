package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/testenv"
)

// TestAcc4InitCopyWorkspaceIsTmp (attack round acc4, on the fix of acc3
// attack 18): the init binary now runs from a private copy in
// $TMPDIR/ipybox-init-<rand>. `cd /tmp && ipybox mcp` (the default
// workspace is the current folder, which is then the temporary folder)
// puts that copy, and the sandbox's private folder, in the workspace.
// The test runs the built binary over stdio, default flags, with TMPDIR
// naming the workspace (a folder like /tmp: mode 1777) and
// XDG_RUNTIME_DIR set, as in a desktop session. Kernel code
// renames a wrapper over the copy; after a reset the host ran it.
func TestAcc4InitCopyWorkspaceIsTmp(t *testing.T) {
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	bin := testenv.Binary(t)
	ws := t.TempDir()
	for _, d := range []string{filepath.Dir(ws), ws} {
		os.Chmod(d, 0o777|os.ModeSticky)
	}
	// Outside every sandbox (whose /tmp is private).
	mark := filepath.Join(os.TempDir(), "acc4-init-mark-"+filepath.Base(filepath.Dir(ws)))
	t.Cleanup(func() { os.Remove(mark) })
	cmd := exec.Command(bin, "mcp")
	cmd.Dir = ws
	// A desktop session's runtime folder (/run/user/<uid>): the kernels'
	// run directories go there, not to TMPDIR.
	xdg, err := os.MkdirTemp("/tmp", "acc4x-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(xdg) })
	cmd.Env = append(os.Environ(), "TMPDIR="+ws, "XDG_RUNTIME_DIR="+xdg)
	cmd.Stderr = io.Discard
	cs := goClient(t, &mcp.CommandTransport{Command: cmd}, nil)
	got, _ := callText(t, cs, "execute_ipython_cell", map[string]any{"code": fmt.Sprintf(`import glob, os, shutil
cps = glob.glob(os.path.join(os.getcwd(), 'ipybox-init-*', 'ipybox-init'))
print(os.getcwd(), cps)
for cp in cps:
    keep = cp + '.keep'
    shutil.copy(cp, keep); os.chmod(keep, 0o755)
    open(cp + '.new', 'w').write("#!/bin/sh\necho \"init copy ran as uid $(id -u): $1\" >> %s 2>/dev/null\nexec " + keep + " \"$@\"\n")
    os.chmod(cp + '.new', 0o755)
    os.rename(cp + '.new', cp)
    print('replaced')`, mark)})
	t.Logf("kernel: %s", got)
	if !strings.Contains(got, "replaced") {
		t.Logf("held: the kernel found or replaced no init copy")
		return
	}
	out, _ := callText(t, cs, "reset", map[string]any{})
	t.Logf("reset: %.200s", out)
	out, _ = callText(t, cs, "execute_ipython_cell", map[string]any{"code": "print(1)"})
	t.Logf("after: %.200s", out)
	if b, err := os.ReadFile(mark); err == nil {
		t.Errorf("BROKE: with the workspace being the temporary folder (cd /tmp && ipybox mcp), kernel code replaced the private init copy and the host ran it: %q", b)
	}
}
