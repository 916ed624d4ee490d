//go:build linux

package ipybox_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// checkReadOnlyAsOtherUser runs TestCheckWorkspace's read-only half as
// uid 65534 (nobody), for a suite that runs as root (as CI does): a copy
// of the test binary that user can run is run as that user on a root's
// folder of mode 0555.
func checkReadOnlyAsOtherUser(t *testing.T) {
	t.Helper()
	const uid = 65534
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	base, err := os.MkdirTemp("", "ipybox-readonly-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "ipybox.test")
	copyExecutable(t, self, bin)
	ro := filepath.Join(base, "ws")
	if err := os.Mkdir(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.count=1", "-test.v", "-test.run", "^TestCheckWorkspaceReadOnlyChild$")
	cmd.Dir = base
	cmd.Env = []string{"HOME=" + base, "PATH=/usr/bin:/bin", readOnlyWorkspaceEnv + "=" + ro}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput() // bound: the child runs one short test and exits
	if err != nil || !strings.Contains(string(out), "--- PASS: TestCheckWorkspaceReadOnlyChild ") {
		t.Fatalf("the read-only check as uid %d: %v\n%s", uid, err, out)
	}
}

func copyExecutable(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
