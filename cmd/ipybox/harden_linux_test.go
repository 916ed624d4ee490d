package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHardenHidesEnviron: the server is not dumpable, so code of the same
// (unprivileged) user, such as an unsandboxed kernel, cannot read its
// environment, where a token from $IPYBOX_MCP_AUTH_TOKEN lives.
func TestHardenHidesEnviron(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run both sides as an unprivileged user")
	}
	const uid = 65534
	dir, bin := binaryForAll(t, 0o777)
	cred := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	srv := exec.Command(bin, "mcp", "--workspace", dir, "--no-sandbox")
	srv.Env = []string{"IPYBOX_TEST_AS_MAIN=1", "HOME=" + dir, "PATH=/usr/bin:/bin", "IPYBOX_MCP_AUTH_TOKEN=env-secret-0123456789"}
	srv.SysProcAttr = cred
	stdin, _ := srv.StdinPipe()
	stderr := &lockedBuffer{}
	srv.Stderr = stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); srv.Process.Kill(); srv.Wait() }()
	environ := fmt.Sprintf("/proc/%d/environ", srv.Process.Pid)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(stderr.String(), "--approval auto") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // until it has started (and hardened)
	}
	read := exec.Command("/bin/cat", environ)
	read.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	out, err := read.CombinedOutput()
	if err == nil || strings.Contains(string(out), "env-secret") {
		t.Fatalf("the same user read the server's environment: %v %q", err, out)
	}
	if !strings.Contains(string(out), "Permission denied") {
		t.Errorf("want a permission error, got %q", out)
	}
}
