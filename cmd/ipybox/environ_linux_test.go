package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv"
)

// TestTokensLeaveProcEnviron: a token taken from the environment (the
// gateway's, or the HTTP server's bearer token) no longer shows in
// /proc/PID/environ of a running `ipybox mcp`: os.Unsetenv alone leaves the
// initial environment block, which root (and, before harden, the same
// user) reads there, as it was.
func TestTokensLeaveProcEnviron(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, env string
		args      []string
	}{
		{"gateway", "JUPYTER_GATEWAY_AUTH_TOKEN", []string{"--gateway-url", "http://127.0.0.1:1"}},
		{"http", "IPYBOX_MCP_AUTH_TOKEN", []string{"--http", "127.0.0.1:0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			const secret = "tok-4d1f7a0c9e2b-secret"
			srv := exec.Command(os.Args[0], append([]string{"mcp", "--workspace", dir, "--no-sandbox"}, tc.args...)...)
			srv.Env = []string{"IPYBOX_TEST_AS_MAIN=1", "HOME=" + dir, "PATH=/usr/bin:/bin", tc.env + "=" + secret, "AFTER=still-here"}
			stdin, _ := srv.StdinPipe()
			stderr := &lockedBuffer{}
			srv.Stderr = stderr
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { stdin.Close(); srv.Process.Kill(); srv.Wait() }()
			for deadline := time.Now().Add(20 * time.Second); !strings.Contains(stderr.String(), "--approval auto"); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("the server did not start:\n%s", stderr)
				}
			}
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", srv.Process.Pid))
			if err != nil {
				testenv.Missing(t, "cannot read another process's environ here: %v", err)
			}
			if strings.Contains(string(b), secret) {
				t.Errorf("/proc/PID/environ still holds the token: %q", b)
			}
			if !strings.Contains(string(b), "\x00AFTER=still-here") {
				t.Errorf("/proc/PID/environ lost the other variables: %q", b)
			}
		})
	}
}
