package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ipybox/ipybox/internal/escape"
	"github.com/ipybox/ipybox/internal/testenv"
)

// openPTY returns the terminal end of a new pseudo-terminal.
func openPTY(t *testing.T) *os.File {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		testenv.Missing(t, "no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestTerminalEnv: exec escapes its streams where they are terminals, and
// only there: a pipe, a file and stdout under --json stay raw.
func TestTerminalEnv(t *testing.T) {
	t.Parallel()
	tty := openPTY(t)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	file, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for _, f := range []*os.File{pr, pw, file} {
		if isTerminal(f) {
			t.Errorf("%s is taken for a terminal", f.Name())
		}
	}
	if !isTerminal(tty) {
		t.Fatalf("%s is not taken for a terminal", tty.Name())
	}
	escaped := func(w any) bool { _, ok := w.(*escape.Writer); return ok }
	for _, tc := range []struct {
		stdout, stderr *os.File
		json           bool
		wantOut        bool
		wantErr        bool
	}{
		{tty, tty, false, true, true},
		{tty, tty, true, false, true},
		{pw, tty, false, false, true},
		{tty, file, false, true, false},
		{pw, file, false, false, false},
	} {
		env := terminalEnv(&cliEnv{stdout: tc.stdout, stderr: tc.stderr}, tc.json)
		if escaped(env.stdout) != tc.wantOut || escaped(env.stderr) != tc.wantErr {
			t.Errorf("stdout %s, stderr %s, --json %v: escaped %v and %v, want %v and %v", tc.stdout.Name(), tc.stderr.Name(), tc.json,
				escaped(env.stdout), escaped(env.stderr), tc.wantOut, tc.wantErr)
		}
	}
}
