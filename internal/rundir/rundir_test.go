package rundir

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv/ci"
)

// TestNewReapsOnlyItsPrefix: New removes the directories with its prefix
// whose owner is gone, and keeps a live owner's, one without an owner
// file, and a dead owner's of another prefix.
func TestNewReapsOnlyItsPrefix(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dead := exec.Command(ci.NeedsTool(t, "true"))
	if err := dead.Run(); err != nil {
		t.Fatalf("true: %v", err)
	}
	mk := func(name, owner string) string {
		d := filepath.Join(root, name)
		os.MkdirAll(d, 0o700)
		if owner != "" {
			os.WriteFile(filepath.Join(d, OwnerFile), []byte(owner), 0o600)
		}
		return d
	}
	gone := strconv.Itoa(dead.Process.Pid)
	stale := mk("ipybox-sandbox-stale", gone)
	live := mk("ipybox-sandbox-live", strconv.Itoa(os.Getpid()))
	noOwner := mk("ipybox-sandbox-old", "")
	other := mk("other-stale", gone)
	dir, err := New(root, "ipybox-sandbox-")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("new dir %s: %v %v", dir, st, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, OwnerFile)); string(b) != strconv.Itoa(os.Getpid()) {
		t.Errorf("owner file %q", b)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dead owner's directory was kept")
	}
	for _, d := range []string{live, noOwner, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
}

// TestReapsAtMostEveryMinute: a second New soon after the first does not
// scan the root again; the next one after reapEvery does.
func TestReapsAtMostEveryMinute(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dead := exec.Command(ci.NeedsTool(t, "true"))
	if err := dead.Run(); err != nil {
		t.Fatalf("true: %v", err)
	}
	if _, err := New(root, "p-"); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(root, "p-stale")
	os.Mkdir(stale, 0o700)
	os.WriteFile(filepath.Join(stale, OwnerFile), []byte(strconv.Itoa(dead.Process.Pid)), 0o600)
	if _, err := New(root, "p-"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("reaped again within reapEvery: %v", err)
	}
	lastReap.Store(root+"\x00p-", time.Now().Add(-reapEvery))
	if _, err := New(root, "p-"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("not reaped after reapEvery: %v", err)
	}
}
