package seccomp

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ipybox/ipybox/internal/testenv/ci"
)

// TestNoSetuidFile tries every way kernel code has to leave a setuid or
// setgid file, with and without the guard, and then looks at the folder.
func TestNoSetuidFile(t *testing.T) {
	py := python(t)
	attacks := []struct{ name, code string }{
		{"chmod", `import os; open("a","w").close(); os.chmod("a", 0o4755)`},
		{"chmod setgid", `import os; open("a","w").close(); os.chmod("a", 0o2755)`},
		{"fchmod", `import os; fd=os.open("a", os.O_CREAT|os.O_WRONLY, 0o644); os.fchmod(fd, 0o4755)`},
		{"fchmodat dir_fd", `import os; open("a","w").close(); d=os.open(".", os.O_RDONLY); os.chmod("a", 0o6755, dir_fd=d)`},
		{"chmod via /proc/self/fd", `import os; fd=os.open("a", os.O_CREAT|os.O_WRONLY, 0o644); os.chmod("/proc/self/fd/%d" % fd, 0o4755)`},
		{"open mode", `import os; os.close(os.open("a", os.O_CREAT|os.O_WRONLY, 0o4755))`},
		{"openat mode", `import os; d=os.open(".", os.O_RDONLY); os.close(os.open("a", os.O_CREAT|os.O_WRONLY, 0o6755, dir_fd=d))`},
		{"mkdir mode", `import os; os.mkdir("d", 0o2755)`},
		{"mkdirat mode", `import os; d=os.open(".", os.O_RDONLY); os.mkdir("d", 0o4755, dir_fd=d)`},
		{"mknod mode", `import os, stat; os.mknod("n", stat.S_IFREG|0o4755)`},
		{"copymode", `import shutil, os; open("a","w").close(); open("src","w").close(); os.chmod("src", 0o755); ` +
			`import ctypes; shutil.copymode("/usr/bin/su" if os.path.exists("/usr/bin/su") else "src", "a")`},
		{"tar extraction", `import tarfile, io, os
b = io.BytesIO()
with tarfile.open(fileobj=b, mode="w") as t:
    i = tarfile.TarInfo("x"); i.mode = 0o4755; data = b"#!/bin/sh\nid\n"; i.size = len(data); t.addfile(i, io.BytesIO(data))
b.seek(0)
with tarfile.open(fileobj=b) as t:
    t.extractall(".", filter="fully_trusted")`},
		{"gnu tar -p", `import tarfile, io, subprocess
b = io.BytesIO()
with tarfile.open(fileobj=b, mode="w") as t:
    i = tarfile.TarInfo("x"); i.mode = 0o6755; data = b"#!/bin/sh\nid\n"; i.size = len(data); t.addfile(i, io.BytesIO(data))
open("t.tar", "wb").write(b.getvalue())
subprocess.run(["tar", "-xpf", "t.tar"])`},
		{"shell chmod", `import subprocess; subprocess.run("touch a && chmod u+s a; chmod g+s a; install -m 4755 /dev/null b", shell=True)`},
		{"libc chmod", `import ctypes, os; open("a","w").close(); ctypes.CDLL(None).chmod(b"a", 0o4755)`},
		{"libc fchmodat2", `import ctypes, os; open("a","w").close(); l=ctypes.CDLL(None, use_errno=True); l.syscall(452, -100, b"a", 0o4755, 0)`},
		{"libc openat2", `import ctypes, struct; l=ctypes.CDLL(None, use_errno=True); how=struct.pack("QQQ", 0o101, 0o4755, 0); l.syscall(437, -100, b"o2", how, 24)`},
	}
	for _, guard := range []bool{false, true} {
		for _, a := range attacks {
			name := a.name
			if guard {
				name += " (guard)"
			}
			t.Run(name, func(t *testing.T) {
				ws := t.TempDir()
				var pol *Policy
				if guard {
					pol = &Policy{Roots: []string{ws}, Workspace: ws}
				}
				_, stderr, _ := run(t, pol, ws, py, "-c", a.code)
				if bad := setugidFiles(t, ws); len(bad) > 0 {
					t.Fatalf("setuid or setgid files were made: %v\n%s", bad, stderr)
				}
			})
		}
	}
}

// TestSetuidRefusedWithEPERM checks that the refusal is a clear error, not
// a silent success without the bit, and that ordinary modes still work.
func TestSetuidRefusedWithEPERM(t *testing.T) {
	py := python(t)
	ws := t.TempDir()
	code := `import os, errno
open("a","w").close()
os.chmod("a", 0o755)
print(oct(os.stat("a").st_mode & 0o7777))
try:
    os.chmod("a", 0o4755)
except PermissionError as e:
    print("refused", errno.errorcode[e.errno])
os.mkdir("d", 0o1777)
print(oct(os.stat("d").st_mode & 0o7777))
`
	out, stderr, rc := run(t, nil, ws, py, "-c", code)
	if rc != 0 {
		t.Fatalf("exit %d: %s", rc, stderr)
	}
	want := "0o755\nrefused EPERM\n0o1755\n"
	if out != want {
		t.Fatalf("got %q, want %q", out, want)
	}
}

// TestPlantedFileGainsNothing plants a copy of id in the workspace, lets
// the guarded program try to make it setuid, then runs it on the host as
// another user: it must run as that user, not as the file's owner.
func TestPlantedFileGainsNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a file as another user")
	}
	py := python(t)
	idBin := ci.NeedsTool(t, "id")
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Dir(ws)} {
		os.Chmod(p, 0o755)
	}
	code := `import shutil, os, subprocess
shutil.copy(` + "'" + idBin + "'" + `, "planted")
for m in (0o4755, 0o6755, 0o2755):
    try: os.chmod("planted", m)
    except PermissionError: pass
subprocess.run("chmod u+s planted; chmod g+s planted", shell=True)
`
	if _, stderr, rc := run(t, &Policy{Roots: []string{ws}, Workspace: ws}, ws, py, "-c", code); rc != 0 {
		t.Fatalf("exit %d: %s", rc, stderr)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(ws, "planted"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&(syscall.S_ISUID|syscall.S_ISGID) != 0 {
		t.Fatalf("planted file has mode %o", st.Mode)
	}
	cmd := exec.Command(filepath.Join(ws, "planted"), "-u")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("run as nobody: %v", err)
	}
	if got := strings.TrimSpace(string(out)); got != "65534" {
		t.Fatalf("the planted file ran with euid %s, want 65534 (nobody)", got)
	}
}
