package ipybox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// fileCapsCode copies the kernel's interpreter into the workspace and gives
// the copy the file capabilities cap_setuid and cap_setgid, effective
// (security.capability, VFS_CAP_REVISION_2). Such a file is setuid root in
// all but name: any local user who runs it can setuid(0).
const fileCapsCode = `import os, shutil, struct, sys
shutil.copy(os.path.realpath(sys.executable), "pycap")
try:
    os.setxattr("pycap", "security.capability", struct.pack("<IIIII", 0x02000001, 0xc0, 0, 0, 0))
    print("set")
except OSError as e:
    print("refused:", e)`

// TestRedteamFileCapabilities: the promise "no file that kernel code makes
// carries setuid or setgid bits" is kept by refusing the mode bits (chmod,
// open, mknod... with S_ISUID or S_ISGID), but a file capability is the
// same power without the bits, and setxattr(security.capability) is not
// refused. An unsandboxed kernel (cold or forked from the zygote, as
// `ipybox mcp --no-sandbox` runs it) of a root ipybox holds CAP_SETFCAP,
// so it leaves a copy of python that every local user can run to become
// root. The bwrap sandbox and the container drop every capability, so
// there the call fails (EPERM): those subtests keep that.
//
// It fails while the xattr lands on a workspace file; it would pass if
// setxattr/fsetxattr/lsetxattr (and setxattrat) of security.capability
// were refused to kernel code, as the mode bits are.
func TestRedteamFileCapabilities(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs a root ipybox (CAP_SETFCAP)")
	}
	py := testenv.NeedsPython(t)
	for _, tc := range []struct {
		name  string
		start func(t *testing.T, ws string) *ipybox.Executor
	}{
		{"unsandboxed", func(t *testing.T, ws string) *ipybox.Executor { return start(t, &ipybox.Options{WorkDir: ws}) }},
		{"zygote", func(t *testing.T, ws string) *ipybox.Executor {
			z, err := ipybox.NewZygote(context.Background(), py, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { z.Close() })
			return start(t, &ipybox.Options{WorkDir: ws, Zygote: z})
		}},
		{"bwrap", func(t *testing.T, ws string) *ipybox.Executor { return startSandboxed(t, &ipybox.Options{WorkDir: ws}) }},
		{"container", func(t *testing.T, ws string) *ipybox.Executor {
			testenv.NeedsDocker(t)
			ws = containerWorkspace(t)
			return startContainer(t, nil, &ipybox.Options{WorkDir: ws})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			ex := tc.start(t, ws)
			ws = ex.Workspace()
			out := strings.TrimSpace(run(t, ex, fileCapsCode).Text)
			f := filepath.Join(ws, "pycap")
			buf := make([]byte, 64)
			n, err := unix.Getxattr(f, "security.capability", buf)
			if err != nil {
				t.Logf("stopped: %s (%v)", out, err)
				return
			}
			msg := fmt.Sprintf("kernel code gave a workspace file file capabilities (security.capability, %d bytes): %s", n, out)
			// Show what it lends: another uid runs it and is root.
			os.Chmod(ws, 0o755)
			os.Chmod(filepath.Dir(ws), 0o755)
			if setpriv, err := exec.LookPath("setpriv"); err == nil {
				got, _ := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", f, "-c",
					"import os; os.setuid(0); print(os.getuid())").CombinedOutput()
				msg += "; run as uid 65534 it setuid(0) and printed uid " + strings.TrimSpace(string(got))
			}
			t.Error(msg)
		})
	}
}
