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

// TestAcc3InitBinaryInWorkspace (attack round acc3): the user runs
// `./ipybox mcp` in the folder that holds the binary, which is then the
// default workspace (a release unpacked in a project, a `go build -o
// ipybox` in a checkout). The sandbox's init binary is os.Executable(),
// with no check that kernel code cannot write it; the host runs it again
// outside the sandbox (the prep step as root, the init check on a failed
// start). Kernel code renames a wrapper over <ws>/ipybox that logs and
// runs a copy of the original; after a reset, the host ran the wrapper.
func TestAcc3InitBinaryInWorkspace(t *testing.T) {
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	built := testenv.Binary(t)
	ws := t.TempDir()
	bin := filepath.Join(ws, "ipybox")
	in, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, in, 0o755); err != nil {
		t.Fatal(err)
	}
	// Outside every sandbox (whose /tmp is private), writable by the
	// mapped uid that runs bwrap when the server is root.
	mark := filepath.Join(os.TempDir(), "acc3-init-mark-"+filepath.Base(ws))
	t.Cleanup(func() { os.Remove(mark) })
	cmd := exec.Command(bin, "mcp", "--workspace", ws)
	cmd.Dir = ws
	cmd.Stderr = io.Discard
	cs := goClient(t, &mcp.CommandTransport{Command: cmd}, nil)
	wrapper := fmt.Sprintf("#!/bin/sh\necho \"init binary ran as uid $(id -u): $*\" >> %s 2>/dev/null\nexec %s \"$@\"\n", mark, filepath.Join(ws, ".keep-ipybox"))
	got, _ := callText(t, cs, "execute_ipython_cell", map[string]any{"code": fmt.Sprintf(`import os, shutil
shutil.copy('ipybox', '.keep-ipybox')
open('ipybox.new', 'w').write(%q)
os.chmod('ipybox.new', 0o755)
os.rename('ipybox.new', 'ipybox')
print(open('/proc/1/comm').read().strip(), 'replaced')`, wrapper)})
	t.Logf("kernel: %s", got)
	if !strings.Contains(got, "replaced") {
		t.Logf("held: the kernel could not replace the binary")
		return
	}
	out, _ := callText(t, cs, "reset", map[string]any{})
	t.Logf("reset: %.200s", out)
	out, _ = callText(t, cs, "execute_ipython_cell", map[string]any{"code": "print(1)"})
	t.Logf("after: %.200s", out)
	if b, err := os.ReadFile(mark); err == nil {
		t.Errorf("BROKE: the host ran the init binary that kernel code replaced in the workspace: %q", b)
	}
}
