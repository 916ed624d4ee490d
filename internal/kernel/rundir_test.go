package kernel

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/ipybox/ipybox/internal/rundir"
)

func TestNewRunDirReapsStale(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("TMPDIR", t.TempDir())
	root, prefix := runRoot()

	// A run directory whose owner has exited, one whose owner lives (us),
	// and one that is not ipybox's.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	mk := func(name, owner string) string {
		d := filepath.Join(root, name)
		os.MkdirAll(d, 0o700)
		if owner != "" {
			os.WriteFile(filepath.Join(d, rundir.OwnerFile), []byte(owner), 0o600)
		}
		return d
	}
	stale := mk(prefix+"stale", strconv.Itoa(dead.Process.Pid))
	live := mk(prefix+"live", strconv.Itoa(os.Getpid()))
	foreign := mk(prefix+"foreign", "")

	dir, err := NewRunDir()
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("new run dir %s: %v %v", dir, st, err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale run dir of a dead owner was kept")
	}
	for _, d := range []string{live, foreign} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
	if len(dir) > 80 {
		t.Errorf("run dir path %q is long for unix sockets", dir)
	}
}
