//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/testenv"
)

// TestMCPSandboxForkServer runs a session of `ipybox mcp` (default flags)
// through the binary: its kernel is forked into a sandbox of its own (parent pid 0: its parent, the fork server, is
// outside its pid namespace; a cold-started kernel's is the sandbox's
// init, 1), keeps state, writes the workspace, resets into a fresh forked
// kernel, and leaves no process behind once the server ends.
func TestMCPSandboxForkServer(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	start := func(args ...string) (*mcp.ClientSession, *exec.Cmd) {
		cmd := exec.Command(os.Args[0], append([]string{"mcp", "--workspace", ws, "--pool", "0"}, args...)...)
		cmd.Env = append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1")
		return goClient(t, &mcp.CommandTransport{Command: cmd}, nil), cmd
	}
	probe := "import os\nprint(os.getppid(), open('/proc/1/cmdline').read().count('sandbox-init') > 0, os.path.exists('/proc/self/ns/pid'))"

	// The controls: with --sandbox-fork-server=false or --no-fork-server,
	// the sandboxed kernel starts cold, the init's child.
	for _, off := range []string{"--sandbox-fork-server=false", "--no-fork-server"} {
		cs, _ := start(off)
		if got := runCell(t, cs, probe); got != "1 True True" {
			t.Errorf("%s: cold sandboxed kernel: %q, want its parent the sandbox's init (1 True True)", off, got)
		}
		cs.Close()
	}

	cs, cmd := start()
	if got := runCell(t, cs, probe); got != "0 True True" {
		t.Errorf("forked kernel: %q, want parent pid 0 in a sandbox whose pid 1 is the init (0 True True)", got)
	}
	runCell(t, cs, "x = 41\nopen('forked.txt', 'w').write('from a fork')")
	if got := runCell(t, cs, "print(x + 1)"); got != "42" {
		t.Errorf("state: %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "forked.txt")); err != nil || string(b) != "from a fork" {
		t.Errorf("workspace write: %q, %v", b, err)
	}
	if out, isErr := callText(t, cs, "reset", map[string]any{}); isErr {
		t.Fatalf("reset: %s", out)
	}
	if got := runCell(t, cs, "print('x' in globals())\n"+probe); got != "False\n0 True True" {
		t.Errorf("after reset: %q, want a fresh forked kernel", got)
	}
	var procs []int
	for _, p := range testenv.Descendants(cmd.Process.Pid) {
		procs = append(procs, p.Pid)
	}
	if len(procs) == 0 {
		t.Fatal("the server has no process to check")
	}
	cs.Close()
	checkGone(t, procs)
}
