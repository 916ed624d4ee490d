package sandbox

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// unprivilegedEnv marks the re-executed run of TestUnprivileged.
const unprivilegedEnv = "IPYBOX_SANDBOX_TEST_UNPRIVILEGED"

// TestUnprivileged runs the attack tests again as an unprivileged user, when
// the suite runs as root (as in CI): the sandbox takes another path there
// (bwrap as the user, binds by path, --ro-bind-fd for protected paths), and
// it must hold as well.
func TestUnprivileged(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	if !runsAsRoot() || os.Getenv(unprivilegedEnv) != "" {
		t.Skip("runs as root only, once")
	}
	const uid = 65534
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy the user can run, and a home it owns outside /tmp (which the
	// host root mode replaces).
	bin := filepath.Join(t.TempDir(), "sandbox.test")
	copyFile(t, self, bin)
	for d := filepath.Dir(bin); d != "/tmp" && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	home, err := os.MkdirTemp("/", "ipybox-test-home-") // not below a path the attack tests expect hidden
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	os.Chown(home, uid, uid)
	os.Chmod(home, 0o755)
	cmd := exec.Command(bin, "-test.count=1", "-test.v",
		"-test.run", "^(TestAttack|TestLimits|TestSignalInterrupts|TestPlaceholders|TestHostRootMode|TestKernelInSandbox|TestCommandStdio)")
	cmd.Dir = home
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin", unprivilegedEnv + "=1", "CI=" + os.Getenv("CI")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains("\n"+string(out), "\nPASS\n") {
		t.Fatalf("the attack tests as uid %d: %v\n%s", uid, err, out)
	}
	for _, name := range []string{"TestAttackHostGlobalKnobs", "TestAttackHostMetadata", "TestAttackSecretReads",
		"TestAttackWrites", "TestAttackProcAndEnv", "TestLimits", "TestKernelInSandbox"} {
		if !strings.Contains(string(out), "--- PASS: "+name+" ") {
			t.Errorf("%s did not pass as uid %d:\n%s", name, uid, out)
		}
	}
}

func copyFile(t *testing.T, src, dst string) {
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
