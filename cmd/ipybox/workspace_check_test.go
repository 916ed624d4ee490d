//go:build unix

package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mcpOnce runs `ipybox mcp` (stdio, its standard input left open, as a
// client would) and returns its stderr and exit code once it exits, or
// fails t when it is still running after 20 s: a workspace that every
// kernel start would fail on must end the server at once.
func mcpOnce(t *testing.T, bin string, cred *syscall.Credential, args ...string) (string, int) {
	t.Helper()
	var cmd *exec.Cmd
	var stderr *lockedBuffer
	for try := 0; ; try++ {
		cmd = exec.Command(bin, append([]string{"mcp", "--no-sandbox"}, args...)...)
		cmd.Env = append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1")
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		stdin, _ := cmd.StdinPipe()
		defer stdin.Close()
		stderr = &lockedBuffer{}
		cmd.Stderr = stderr
		err := cmd.Start()
		if err == nil {
			break
		}
		// A copy of the binary just written (binaryForAll) is busy while
		// a process forked meanwhile by a parallel test still holds its
		// write descriptor, until that process execs.
		if !errors.Is(err, syscall.ETXTBSY) || try == 20 {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("ipybox mcp %q is still running after 20 s:\n%s", args, stderr)
	}
	return stderr.String(), cmd.ProcessState.ExitCode()
}

// TestMCPCorruptRegistryFailsOnce: a .ipybox/servers.json that does not
// load ends ipybox mcp at its start with one line that names the file
// and the fix, instead of a warning every 2 s.
func TestMCPCorruptRegistryFailsOnce(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	reg := filepath.Join(ws, ".ipybox", "servers.json")
	os.MkdirAll(filepath.Dir(reg), 0o755)
	os.WriteFile(reg, []byte(`{"everything": `), 0o600)
	stderr, code := mcpOnce(t, os.Args[0], nil, "--workspace", ws)
	want := "ipybox mcp: the registry of MCP servers does not load: loading " + reg + ": unexpected EOF " +
		`(want {"mcpServers": {"name": {...}}}); repair it, or move it aside to start with no servers registered: mv ` + reg + " " + reg + ".bad\n"
	if code != exitFail || stderr != want {
		t.Errorf("exit %d, stderr:\n%s\nwant:\n%s", code, stderr, want)
	}
}

// TestMCPUnwritableWorkspaceFailsOnce: a workspace this user cannot write
// ends ipybox mcp at its start with the owner and the command that fixes
// it.
func TestMCPUnwritableWorkspaceFailsOnce(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run ipybox as one user on another's directory")
	}
	dir, bin := binaryForAll(t, 0o755)
	ws := filepath.Join(dir, "ws")
	os.Mkdir(ws, 0o755)
	os.Chown(ws, 1234, 1234)
	stderr, code := mcpOnce(t, bin, &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{}}, "--workspace", ws)
	want := "ipybox mcp: " + ws + ": not writable by this process (which runs as 1000:1000; the directory belongs to 1234:1234, mode 0755); " +
		"run ipybox as the directory's owner (uid 1234), or give it to this user: chown 1000:1000 " + ws + "; or choose another --workspace\n"
	if code != exitFail || stderr != want {
		t.Errorf("exit %d, stderr:\n%s\nwant:\n%s", code, stderr, want)
	}
	if strings.Contains(stderr, "pool:") {
		t.Error("the pool tried to start kernels")
	}
}

// binaryForAll copies the test binary into a new directory of the given
// mode outside t's (which other users cannot enter), so that another
// user can run it, and returns both; they are removed when t ends.
func binaryForAll(t *testing.T, mode os.FileMode) (dir, bin string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "ipybox-test-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, mode)
	bin = filepath.Join(dir, "ipybox")
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, bin
}
