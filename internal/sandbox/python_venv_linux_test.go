package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv"
)

// TestSystemPythonTellsVenvs checks that a virtual environment made from
// the system's interpreter is not taken for it: its bin/python is a link
// to /usr/bin/python3, but its packages (the prefix the sandbox must bind)
// are beside the link. Taken for the system's, its prefix was never bound
// and the kernel could not start in the sandbox ("interpreter ... is not
// visible"); PyPI's kernel stack lives in such a virtualenv
// (scripts/pyvenv.sh).
func TestSystemPythonTellsVenvs(t *testing.T) {
	t.Parallel()
	sys := "/usr/bin/python3"
	if _, err := os.Stat(sys); err != nil {
		testenv.Missing(t, "no %s on this system", sys)
	}
	if !systemPython(sys) {
		t.Errorf("systemPython(%s) = false, want true", sys)
	}
	venv := t.TempDir()
	bin := filepath.Join(venv, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"python", "python3"} {
		if err := os.Symlink(sys, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(venv, "pyvenv.cfg"), []byte("home = /usr/bin\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"python", "python3"} {
		if p := filepath.Join(bin, name); systemPython(p) {
			t.Errorf("systemPython(%s) = true for a virtualenv's link to %s; want false (its prefix must be bound)", p, sys)
		}
	}
	// A link to the system's interpreter outside any virtualenv is the
	// system's.
	plain := filepath.Join(t.TempDir(), "python3")
	if err := os.Symlink(sys, plain); err != nil {
		t.Fatal(err)
	}
	if !systemPython(plain) {
		t.Errorf("systemPython(%s) = false for a plain link to %s, want true", plain, sys)
	}
}

// TestIsPythonName: Command asks only interpreters named like Python for
// their prefixes (asking runs the program on the host with -I -c ...).
func TestIsPythonName(t *testing.T) {
	t.Parallel()
	for p, want := range map[string]bool{
		"/v/bin/python": true, "/v/bin/python3": true, "/usr/bin/python3.11": true,
		"/usr/bin/npx": false, "/usr/bin/node": false, "/v/bin/python-config": false, "/v/bin/pythonx": false, "/v/bin/uvx": false,
	} {
		if got := isPythonName(p); got != want {
			t.Errorf("isPythonName(%s) = %v, want %v", p, got, want)
		}
	}
}

// TestCommandBindsVenvPrefix: Command, like a kernel's start, shows a
// venv interpreter's prefix (PyPI's kernel stack, outside /usr and the
// workspace): ipybox mcp runs the virtualenv and pip helpers with it.
// Before, Command refused it: "command ... is not visible in the sandbox".
func TestCommandBindsVenvPrefix(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	py, want := testenv.PyPIPython(t)
	x := newSbx(t, nil, nil)
	cmd, err := x.Command(context.Background(), py, []string{"-I", "-c", "import ipykernel; print(ipykernel.__version__)"}, []string{"PATH=/usr/bin"}, "")
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != want {
		t.Errorf("%s in the sandbox: %q, %v: %s; want ipykernel %s", py, out, err, errb.String(), want)
	}
}

// TestCommandNeverAsksReplaceablePython: Command asks a Python-named
// program for its prefixes on the host, and its path may be a client's
// choice (a registered stdio server): a program another user could have
// put or changed there (its folder or itself writable by group or others,
// or owned by another user) is never run on the host. Each variant leaves
// a mark when it runs; the control, a private copy, does.
func TestCommandNeverAsksReplaceablePython(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	x := newSbx(t, nil, nil)
	marks := t.TempDir()
	// Not under /tmp: another test of this process may have made /tmp
	// writable to its kernels (allowWrite), and no interpreter there is
	// asked then (the process-wide record of kernel-writable folders).
	base, err := os.MkdirTemp("/var/tmp", "ipybox-asks-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	plant := func(name string, dirMode, fileMode os.FileMode, uid int) string {
		dir := filepath.Join(base, name, "bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		py := filepath.Join(dir, "python3")
		script := "#!/bin/sh\ntouch '" + filepath.Join(marks, name) + "'\nfor i in 1 2 3 4 5; do echo /opt/" + name + "; done\n"
		if err := os.WriteFile(py, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(py, fileMode)
		os.Chmod(dir, dirMode)
		if uid >= 0 {
			if err := os.Lchown(py, uid, uid); err != nil {
				t.Fatal(err)
			}
		}
		return py
	}
	variants := []string{
		plant("group-writable-dir", 0o775, 0o755, -1),
		plant("other-writable-dir", 0o757, 0o755, -1),
		plant("writable-file", 0o755, 0o777, -1),
	}
	if os.Getuid() == 0 {
		variants = append(variants, plant("other-owner", 0o755, 0o755, 65534))
	} else {
		t.Log("not root: the other-owner variant needs chown")
	}
	asked := func(py string) bool {
		x.pyMu.Lock()
		defer x.pyMu.Unlock()
		_, ok := x.Sandbox.py[py]
		return ok
	}
	for _, py := range variants {
		x.Command(context.Background(), py, []string{"-c", "pass"}, []string{"PATH=/usr/bin"}, "")
		if asked(py) {
			t.Errorf("asked: %s", py)
		}
	}
	control := plant("control", 0o755, 0o755, -1)
	x.Command(context.Background(), control, []string{"-c", "pass"}, []string{"PATH=/usr/bin"}, "")
	if !asked(control) {
		t.Errorf("the control was not asked: the test cannot fail")
	}
	// Asking runs it confined (runConfined): it wrote nothing, not even
	// its mark.
	if ents := mustEntries(t, marks); len(ents) != 0 {
		t.Errorf("an interpreter that was asked wrote on the host: %v", ents)
	}
}

func mustEntries(t *testing.T, dir string) []os.DirEntry {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ents
}

// TestRunConfined: what asks an interpreter that kernel code may have
// written (runConfined) writes nothing on the host and reaches no socket:
// not a file in a folder this user owns, not a unix socket file (the
// Docker daemon's is one, reachable through a read-only mount), not a
// host port on loopback.
func TestRunConfined(t *testing.T) {
	t.Parallel()
	x := newSbx(t, nil, nil)
	py := testenv.NeedsPython(t)
	// Not under /tmp, which the confined program sees as a fresh tmpfs.
	dir, err := os.MkdirTemp("/var/tmp", "ipybox-confined-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	reached := make(chan string, 2)
	for _, l := range []net.Listener{ul, tl} {
		go func() {
			if c, err := l.Accept(); err == nil {
				c.Close()
				reached <- l.Addr().String()
			}
		}()
	}
	code := fmt.Sprintf(`import socket
r = []
try:
    open(%q, "w"); r.append("wrote")
except OSError as e:
    r.append("write-refused")
try:
    s = socket.socket(socket.AF_UNIX); s.connect(%q); r.append("unix-connected")
except OSError as e:
    r.append("unix-refused")
try:
    s = socket.create_connection(("127.0.0.1", %d), timeout=2); r.append("tcp-connected")
except OSError as e:
    r.append("tcp-refused")
print(" ".join(r))`, filepath.Join(dir, "written"), sock, tl.Addr().(*net.TCPAddr).Port)
	out, err := x.runConfined(context.Background(), []string{"PATH=/usr/bin:/bin"}, py, "-I", "-c", code)
	if err != nil {
		t.Fatalf("runConfined: %v (%s)", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "write-refused unix-refused tcp-refused" {
		t.Errorf("the confined program: %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "written")); err == nil {
		t.Error("the confined program wrote on the host")
	}
	select {
	case a := <-reached:
		t.Errorf("the confined program reached %s", a)
	case <-time.After(100 * time.Millisecond):
	}
}
