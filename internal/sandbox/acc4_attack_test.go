//go:build linux

package sandbox

// acc4: attacks on the fixes of acc3 attacks 1-7, 17, 18 (the confined
// interpreter probe, runConfined; the checks around an interpreter's
// answer; the empty pre-confinement environment). Real bwrap, no mocks.
// A test that fails with "BROKE:" found a way through.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// acc4Dir makes a host folder that no sandbox of the process writes
// (not under /tmp, which the confined program sees as a tmpfs of its own).
func acc4Dir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "ipybox-acc4-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestAcc4ConfinedFIFO: the confined program sees the host's tree
// read-only, but a read-only mount does not stop a write into a named
// pipe: whatever host process reads a FIFO the ipybox user can open
// for writing is reachable from the probe (as root: systemd's
// /run/initctl, where an init_request switches the runlevel, i.e. powers
// the host off). The test's own FIFO stands for it.
func TestAcc4ConfinedFIFO(t *testing.T) {
	x := newSbx(t, nil, nil)
	dir := acc4Dir(t)
	fifo := filepath.Join(dir, "ctl")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The host daemon: a reader that is always there.
	rd, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	code := fmt.Sprintf(`import os
try:
    fd = os.open(%q, os.O_WRONLY | os.O_NONBLOCK); os.write(fd, b"RUNLEVEL0"); print("wrote")
except OSError as e:
    print("refused", e.errno)
`, fifo)
	out, err := x.runConfined(context.Background(), []string{"PATH=/usr/bin:/bin"}, "/usr/bin/python3", "-I", "-c", code)
	t.Logf("confined program: %q err=%v", out, err)
	buf := make([]byte, 64)
	n, _ := rd.Read(buf)
	if n > 0 {
		t.Errorf("BROKE: the confined interpreter probe wrote %q into a host FIFO (%s) that a host process reads; a read-only bind of / does not stop writes into pipes (as root: /run/initctl)", buf[:n], fifo)
	}
}

// TestAcc4ConfinedSyscalls: from the confined probe, the host's
// processes (kill, ptrace of the test process), the keyrings, io_uring,
// AF_VSOCK (the hypervisor), and AF_NETLINK audit/uevent.
func TestAcc4ConfinedSyscalls(t *testing.T) {
	x := newSbx(t, nil, nil)
	code := fmt.Sprintf(`import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
r = []
def sc(name, *a):
    v = libc.syscall(*a)
    r.append("%%s=%%d/%%d" %% (name, v, ctypes.get_errno() if v < 0 else 0))
try:
    os.kill(%d, 0); r.append("kill=ok")
except OSError as e:
    r.append("kill=%%d" %% e.errno)
sc("ptrace", 101, 16, %d, 0, 0)
sc("keyctl", 250, 0, -4, 0)
sc("add_key", 248, b"user", b"x", b"y", 1, -4)
sc("io_uring_setup", 425, 1, ctypes.create_string_buffer(120))
for fam, name in ((40, "vsock"), (16, "netlink")):
    try:
        s = socket.socket(fam, socket.SOCK_DGRAM if fam == 16 else socket.SOCK_STREAM, 9 if fam == 16 else 0); r.append(name + "=ok")
        if fam == 40:
            try:
                s.settimeout(1); s.connect((2, 22)); r.append("vsock-connect=ok")
            except OSError as e:
                r.append("vsock-connect=%%s" %% e.errno)
    except OSError as e:
        r.append("%%s=%%d" %% (name, e.errno))
print(" ".join(r))
`, os.Getpid(), os.Getpid())
	out, err := x.runConfined(context.Background(), []string{"PATH=/usr/bin:/bin"}, "/usr/bin/python3", "-I", "-c", code)
	if err != nil {
		t.Fatalf("runConfined: %v (%s)", err, out)
	}
	got := strings.TrimSpace(string(out))
	t.Logf("confined program: %s", got)
	for _, f := range strings.Fields(got) {
		name, v, _ := strings.Cut(f, "=")
		switch {
		case name == "kill" && v == "ok", name == "vsock" && v == "ok", name == "vsock-connect" && v == "ok":
			t.Errorf("BROKE: the confined probe: %s", f)
		case (name == "ptrace" || name == "keyctl" || name == "add_key" || name == "io_uring_setup") && !strings.HasPrefix(v, "-1/"):
			t.Errorf("BROKE: the confined probe: %s succeeded", f)
		}
	}
}

// TestAcc4ConfinedLeftover: a probe that leaves a process behind (a
// child in a session of its own, with the probe's stdout held open) or
// that never exits (SIGTERM ignored). runConfined must return at its
// deadline, and nothing of the probe may outlive it.
func TestAcc4ConfinedLeftover(t *testing.T) {
	x := newSbx(t, nil, nil)
	mark := "61." + randHex(4)
	code := fmt.Sprintf(`import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", %q])
    os._exit(0)
print("\n".join(["/usr/bin/python3", "/usr", "/usr", "/usr", "/usr"]))
sys.stdout.flush()
if len(sys.argv) > 1:
    time.sleep(3600)
`, mark)
	for _, hang := range []bool{false, true} {
		args := []string{"-I", "-c", code}
		if hang {
			args = append(args, "hang")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		t0 := time.Now()
		out, err := x.runConfined(ctx, []string{"PATH=/usr/bin:/bin"}, append([]string{"/usr/bin/python3"}, args...)...)
		cancel()
		d := time.Since(t0)
		t.Logf("hang=%v: %d bytes, err=%v, %v", hang, len(out), err, d)
		if d > 8*time.Second {
			t.Errorf("BROKE: runConfined returned only after %v (deadline 3s)", d)
		}
		time.Sleep(300 * time.Millisecond)
		if pid := findCmdline(mark); pid != 0 {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("BROKE: a process of the confined probe (pid %d, sleep %s) outlived it (hang=%v)", pid, mark, hang)
		}
	}
}

func findCmdline(mark string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(string(b), mark) {
			return pid
		}
	}
	return 0
}

// TestAcc4AnswerBindsHomeDotFolder: the probe's answer is kernel code's
// when the interpreter is (pythonFor's own comment). The answer's checks
// refuse /, a prefix that contains the home folder, one in a writable
// folder, and one without lib/python3*. A prefix INSIDE the home folder
// that has lib/python3* passes: ~/.local (pip --user makes
// ~/.local/lib/python3.X) also holds ~/.local/share (keyrings, browser
// and tool data). The lying interpreter lies outside every folder this
// process's kernels write (a program of another ipybox process's
// workspace, or any the client names).
func TestAcc4AnswerBindsHomeDotFolder(t *testing.T) {
	x := newSbx(t, nil, nil)
	root := acc4Dir(t)
	home := filepath.Join(root, "home")
	x.home = home
	for _, d := range []string{".local/lib/python3.11/site-packages", ".local/share/keyrings", "liar/bin"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(home, ".local/share/keyrings/login.keyring")
	if err := os.WriteFile(secret, []byte("KEYRING-SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	liar := filepath.Join(root, "liar", "bin", "python3")
	os.MkdirAll(filepath.Dir(liar), 0o755)
	script := fmt.Sprintf("#!/bin/sh\nprintf '%%s\\n' /usr/bin/python3 %s %s %s %s\n", filepath.Join(home, ".local"), filepath.Join(home, ".local"), "/usr", "/usr")
	if err := os.WriteFile(liar, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	prefixes, exe := x.pythonFor(context.Background(), liar, "")
	t.Logf("prefixes=%v executable=%q", prefixes, exe)
	cmd, err := x.Command(context.Background(), liar, []string{"-I", "-c", fmt.Sprintf("print(open(%q).read())", secret)}, []string{"PATH=/usr/bin:/bin"}, "")
	if err != nil {
		t.Logf("Command: %v", err)
		return
	}
	out, err := cmd.CombinedOutput()
	t.Logf("sandboxed program: %q err=%v", out, err)
	if strings.Contains(string(out), "KEYRING-SECRET") {
		t.Errorf("BROKE: a lying interpreter's answer (prefix %s/.local, which holds lib/python3.11) bound the home's .local into the sandbox; the program read %s", home, secret)
	}
}

// TestAcc4InitCopyInWorkspaceTmp: the private copy of the init binary
// goes to $TMPDIR/ipybox-init-<rand>. Nothing checks that $TMPDIR lies
// outside the folders kernel code writes (TMPDIR=<project>/tmp, or
// `cd /tmp && ipybox mcp`: the workspace is the temporary folder). Kernel
// code then renames its own program over the copy, and the host runs it
// at the next start (as root: the prep step).
func TestAcc4InitCopyInWorkspaceTmp(t *testing.T) {
	needSandbox(t)
	t.Run("tmpdir-below-workspace", func(t *testing.T) { acc4InitCopy(t, "tmp") })
	t.Run("workspace-is-tmpdir", func(t *testing.T) { acc4InitCopy(t, "") })
}

func acc4InitCopy(t *testing.T, below string) {
	ws := t.TempDir()
	tmp := filepath.Join(ws, below)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	// Like /tmp: others traverse it (the mapped uid of the staging step).
	for _, d := range []string{filepath.Dir(ws), ws, tmp} {
		os.Chmod(d, 0o777|os.ModeSticky)
	}
	t.Setenv("TMPDIR", tmp)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Options.InitBinary (a source other than this process's own) makes a
	// copy of its own now, under the TMPDIR above.
	src := filepath.Join(acc4Dir(t), "ipybox")
	b, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, b, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := New(nil, &Options{Workspace: ws, InitBinary: src})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer s.Close()
	cp := s.initBinary
	t.Logf("init copy: %s (workspace %s)", cp, ws)
	if !under(cp, ws) {
		t.Logf("held: the copy is outside the workspace")
		return
	}
	markDir := acc4Dir(t)
	os.Chmod(markDir, 0o777)
	mark := filepath.Join(markDir, "ran")
	code := fmt.Sprintf(`import os, shutil
cp = %q
keep = os.path.join(os.path.dirname(os.path.dirname(cp)), "keep-init")
shutil.copyfile(cp, keep); os.chmod(keep, 0o755)
w = cp + ".new"
open(w, "w").write("#!/bin/sh\nid -u >> %s\nexec " + keep + " \"$@\"\n")
os.chmod(w, 0o755)
os.rename(w, cp)
print("replaced")
`, cp, mark)
	cmd, err := s.Command(context.Background(), "/usr/bin/python3", []string{"-I", "-c", code}, []string{"PATH=/usr/bin:/bin"}, "")
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	t.Logf("kernel code: %q err=%v", out, err)
	cmd, err = s.Command(context.Background(), "/usr/bin/python3", []string{"-I", "-c", "print('second')"}, []string{"PATH=/usr/bin:/bin"}, "")
	if err == nil {
		out, err = cmd.CombinedOutput()
		t.Logf("next start: %q err=%v", out, err)
	} else {
		t.Logf("next start: %v", err)
	}
	if m, err := os.ReadFile(mark); err == nil {
		t.Errorf("BROKE: with TMPDIR in the workspace, the private init copy %s lies where kernel code writes; kernel code renamed its program over it and the host ran it (uid %s)", cp, strings.TrimSpace(string(m)))
	} else if strings.Contains(string(out), "replaced") {
		t.Errorf("BROKE: with TMPDIR in the workspace, kernel code replaced the private init copy %s (it did not run on this start: %v)", cp, err)
	}
}

// TestAcc4LinkToForeignVenv: alice's kernel makes a link in her own
// folder, <root>/alice/link -> <root>/bob/.ipybox/venv (bob's venv, which
// his install_package fills), and her client registers a sandboxed server
// whose command is <root>/alice/link/bin/python3. The path lies in
// alice's own folder, so the foreign check passes; the venv is
// Dir(Dir(path)), bound read-only "over the writable folder": bwrap
// follows the link. acc3 attack 6 (bob's venv bound into alice's server)
// through a link.
func TestAcc4LinkToForeignVenv(t *testing.T) {
	py := "/usr/bin/python3"
	root := t.TempDir()
	os.Chmod(root, 0o755)
	alice, bob := filepath.Join(root, "alice"), filepath.Join(root, "bob")
	for _, d := range []string{alice, bob} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	venv := filepath.Join(bob, ".ipybox", "venv")
	if out, err := exec.Command(py, "-m", "venv", "--without-pip", venv).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v %s", err, out)
	}
	site, _ := filepath.Glob(filepath.Join(venv, "lib", "python3*", "site-packages"))
	if len(site) != 1 {
		t.Fatal("no site-packages")
	}
	os.WriteFile(filepath.Join(site[0], "bobsecret.py"), []byte("TOKEN = 'BOB-PACKAGE-SECRET'\n"), 0o644)
	os.WriteFile(filepath.Join(site[0], "bob.pth"), []byte("import sys; sys.stderr.write('BOB-PTH-RAN\\n')\n"), 0o644)
	x := newSbx(t, nil, &Options{Workspace: alice, KernelWritable: []string{root}})
	// Kernel code, in alice's folder: a link (it could write any name).
	if err := os.Symlink(venv, filepath.Join(alice, "link")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(alice, "link", "bin", "python3")
	prefixes, exe := x.pythonFor(context.Background(), path, "")
	t.Logf("pythonFor: prefixes=%v executable=%q", prefixes, exe)
	cmd, err := x.Command(context.Background(), path, []string{"-c", "import bobsecret; print(bobsecret.TOKEN)"}, []string{"PATH=/usr/bin:/bin"}, "")
	if err != nil {
		t.Logf("held: Command: %v", err)
		return
	}
	out, err := cmd.CombinedOutput()
	t.Logf("alice's server: %q err=%v", out, err)
	if strings.Contains(string(out), "BOB-PACKAGE-SECRET") || strings.Contains(string(out), "BOB-PTH-RAN") {
		t.Errorf("BROKE: through a link in her own folder, alice's sandboxed server runs bob's venv (his .pth ran: %v) and reads his packages: %q", strings.Contains(string(out), "BOB-PTH-RAN"), out)
	}
}
