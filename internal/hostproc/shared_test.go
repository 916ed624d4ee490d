//go:build !windows

package hostproc

import (
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
)

// ownTempDir is a temporary folder below which no other user can put
// entries (t.TempDir is in /tmp, which anyone can): in the user's runtime
// or cache folder, or the password file's home.
func ownTempDir(t *testing.T) string {
	t.Helper()
	var bases []string
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
		bases = append(bases, x)
	}
	if c, err := os.UserCacheDir(); err == nil {
		bases = append(bases, c)
	}
	if u, err := user.Current(); err == nil {
		bases = append(bases, filepath.Join(u.HomeDir, ".cache"))
	}
	for _, b := range bases {
		if SharedAbove(b) != "" || os.MkdirAll(b, 0o700) != nil {
			continue
		}
		d, err := os.MkdirTemp(b, "hostproc-test-")
		if err != nil {
			continue
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	t.Fatalf("no folder of this user's own outside shared ones among %q", bases)
	return ""
}

// TestSharedAbove: break D of issue 34's fresh round. A folder that
// another user can put entries in, at or above a path (sticky /tmp too,
// group-writable, another user's), through a link as well.
func TestSharedAbove(t *testing.T) {
	own := ownTempDir(t)
	if at := SharedAbove(own); at != "" {
		t.Fatalf("%s: shared at %s", own, at)
	}
	sticky := t.TempDir()
	os.Chmod(sticky, 0o1777)
	group := filepath.Join(own, "g")
	os.Mkdir(group, 0o770)
	os.Chmod(group, 0o770)
	os.Symlink(sticky, filepath.Join(own, "tolink"))
	for _, p := range []string{"/tmp", sticky, filepath.Join(sticky, "a", "b"), group, filepath.Join(group, "x"), filepath.Join(own, "tolink", "y"), os.TempDir() + "/ipybox-x"} {
		if SharedAbove(p) == "" {
			t.Errorf("%s: not seen as below a shared folder", p)
		}
	}
}

// TestDirNotBelowShared: the private folder of host processes is never
// below a folder another user can put entries in, whether HOME (and so
// the cache folder) or TMPDIR is one, and a HOME there is replaced by the
// private home for the processes (npx's cache). A missing
// $XDG_RUNTIME_DIR whose parent is safe is made 0700 (the Docker image).
func TestDirNotBelowShared(t *testing.T) {
	shared := t.TempDir()
	os.Chmod(shared, 0o1777)
	own := ownTempDir(t)
	rt := filepath.Join(own, "run")
	t.Setenv("XDG_RUNTIME_DIR", rt)
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", shared)
	t.Setenv("TMPDIR", shared)
	if roots := dirRoots(); len(roots) > 0 {
		if root := roots[0]; SharedAbove(root) == "" && !strings.HasPrefix(root, rt) {
			t.Errorf("the first safe root is %s, not the runtime folder %s", root, rt)
		}
	}
	if st, err := os.Stat(rt); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("XDG_RUNTIME_DIR %s: %v %v", rt, st, err)
	}
	d, err := DirOutside(nil)
	if err != nil {
		t.Fatal(err)
	}
	if at := SharedAbove(d); at != "" {
		t.Errorf("private folder %s below %s", d, at)
	}
	cmd := exec.Command("/bin/true")
	cmd.Env = []string{"HOME=" + shared, "npm_config_cache=" + shared + "/npm"}
	if _, err := Prepare(cmd, nil); err != nil {
		t.Fatal(err)
	}
	for _, kv := range cmd.Env {
		if strings.Contains(kv, shared) {
			t.Errorf("kept %s", kv)
		}
	}
}
