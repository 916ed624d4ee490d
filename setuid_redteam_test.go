//go:build linux

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
		{"container", func(t *testing.T, _ string) *ipybox.Executor {
			testenv.NeedsDocker(t)
			ws := containerWorkspace(t)
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

// TestRedteamSetuidThroughDeputy: the filter refuses the setuid and
// setgid bits to the kernel's own calls, not to a process outside it that
// the kernel can ask: the Docker daemon (root, or a member of the docker
// group, can ask it) runs chmod 4755 on a workspace file in a container
// that mounts the workspace. Any other deputy (systemd-run, cron, an ssh
// to localhost, a running tmux server) would do the same. An unsandboxed
// kernel has the user's rights and can ask them (docs/sandbox.md says so);
// a sandboxed kernel cannot reach one: no Docker socket, no network.
func TestRedteamSetuidThroughDeputy(t *testing.T) {
	t.Parallel()
	img := testenv.NeedsDocker(t)
	if os.Geteuid() != 0 {
		t.Skip("the docker socket is root's here")
	}
	ex := startSandboxed(t, &ipybox.Options{WorkDir: t.TempDir()})
	out := run(t, ex, `import os, subprocess
open("f", "w").write("x")
try:
    import socket; socket.socket(socket.AF_UNIX).connect("/var/run/docker.sock"); print("REACHED the docker socket")
except OSError as e:
    print("no docker socket:", e)
r = subprocess.run(["docker", "run", "--rm", "--user", "0", "--entrypoint", "chmod", "-v", os.getcwd() + ":/w", `+pyStr(img)+`, "4755", "/w/f"], capture_output=True, text=True)
print(r.returncode, r.stderr[-300:])`).Text
	st, err := os.Stat(filepath.Join(ex.Workspace(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "REACHED") {
		t.Errorf("a sandboxed kernel reached the Docker daemon: %s", strings.TrimSpace(out))
	}
	if st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		t.Errorf("a sandboxed kernel had the Docker daemon leave a setuid file in the workspace: %v (%s)", st.Mode(), strings.TrimSpace(out))
	}
}

// setuidCode tries every way to a setuid or setgid file in the workspace
// that does not go through a deputy: the chmod family (with the mode's
// high bits set too, which the kernel ignores), open/creat/mknod/mkdir
// with such a mode, O_TMPFILE then linkat, openat2, tar extraction,
// install -m and cp -p of a setuid program.
const setuidCode = `import os, ctypes, io, tarfile, subprocess
libc = ctypes.CDLL(None, use_errno=True)
def t(fn):
    try:
        fn()
    except Exception:
        pass
open("f", "w").write("x")
t(lambda: os.chmod("f", 0o4755))
t(lambda: os.chmod("f", 0o2755 | 0o10000000))
t(lambda: os.fchmod(os.open("f", os.O_RDONLY), 0o4755))
t(lambda: libc.syscall(268, -100, b"f", 0o4755, 0))          # fchmodat
t(lambda: libc.syscall(452, -100, b"f", 0o6755, 0))          # fchmodat2
t(lambda: libc.syscall(452, os.open("f", os.O_PATH), b"", 0o4755, 0x1000))
t(lambda: os.open("o", os.O_CREAT | os.O_WRONLY, 0o4755))
t(lambda: libc.syscall(85, b"c", 0o6755))                    # creat
t(lambda: libc.syscall(259, -100, b"n", 0o100000 | 0o4755, 0))  # mknodat
t(lambda: libc.syscall(133, b"n2", 0o100000 | 0o2755, 0))    # mknod
t(lambda: os.mkdir("d", 0o2755))
def tmpfile():
    fd = os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o4755)
    libc.linkat(fd, b"", -100, b"tmpf", 0x1000)
t(tmpfile)
class OH(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]
t(lambda: libc.syscall(437, -100, b"oa2", ctypes.byref(OH(os.O_CREAT | os.O_WRONLY, 0o4755, 0)), 24))
def tarx():
    b = io.BytesIO(); tf = tarfile.open(fileobj=b, mode="w")
    ti = tarfile.TarInfo("tarred"); ti.size = 1; ti.mode = 0o4755; tf.addfile(ti, io.BytesIO(b"x")); tf.close(); b.seek(0)
    tarfile.open(fileobj=b).extractall(".")
t(tarx)
t(lambda: subprocess.run(["install", "-m", "4755", "/dev/null", "installed"], capture_output=True))
t(lambda: subprocess.run(["cp", "-p", "/usr/bin/su", "su-copy"], capture_output=True))
print(sorted(os.listdir(".")))`

// TestRedteamSetuidModeBits: setuidCode on every backend; it fails if a
// file or folder of the workspace ends with S_ISUID or S_ISGID.
func TestRedteamSetuidModeBits(t *testing.T) {
	t.Parallel()
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
			return startContainer(t, nil, &ipybox.Options{WorkDir: containerWorkspace(t)})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ex := tc.start(t, t.TempDir())
			out := run(t, ex, setuidCode).Text
			filepath.Walk(ex.Workspace(), func(p string, fi os.FileInfo, err error) error {
				if err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
					t.Errorf("%s: %v", p, fi.Mode())
				}
				return nil
			})
			t.Logf("made %s", strings.TrimSpace(out))
		})
	}
}

// TestRedteamSetgidInheritedFolder: in a workspace whose folder is setgid
// (a team's shared folder, chmod g+s), every folder that kernel code makes
// inherits S_ISGID from its parent: the kernel does it, no mode asks for
// it, so no filter sees it. Harmless as far as known (a setgid folder only
// gives new files its group), but it contradicts "no file that kernel code
// makes carries setuid or setgid bits". It fails while the made folder is
// setgid.
func TestRedteamSetgidInheritedFolder(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	if err := os.Chmod(ws, os.ModeSetgid|0o775); err != nil {
		t.Fatal(err)
	}
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws})
	t.Log(run(t, ex, "import os\nos.mkdir('made')\nprint(oct(os.stat('.').st_mode), oct(os.stat('made').st_mode))").Text)
	fi, err := os.Stat(filepath.Join(ws, "made"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSetgid != 0 {
		t.Errorf("a folder that kernel code made is setgid (inherited from the workspace): %v", fi.Mode())
	}
}
