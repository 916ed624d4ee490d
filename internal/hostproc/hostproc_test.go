//go:build !windows

package hostproc

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestPrepare(t *testing.T) {
	ws := t.TempDir()
	outside := ownTempDir(t)
	link := filepath.Join(outside, "link")
	if err := os.Symlink(ws, link); err != nil {
		t.Fatal(err)
	}

	// No folder: the private one, 0700, outside the workspace.
	cmd := exec.Command("/bin/true")
	if _, err := Prepare(cmd, []string{ws}); err != nil {
		t.Fatal(err)
	}
	d, _ := Dir()
	if cmd.Dir != d || Inside(cmd.Dir, []string{ws}) != "" {
		t.Errorf("Dir = %q, want the private folder %q", cmd.Dir, d)
	}
	if st, err := os.Stat(d); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("private folder %s: %v %v", d, st.Mode(), err)
	}
	if cmd.Env == nil {
		t.Error("a nil environment stays nil: the process would inherit ours")
	}

	// A folder or a program in the workspace, however spelt, is refused.
	for _, c := range []struct{ dir, path string }{
		{dir: ws}, {dir: filepath.Join(ws, "sub")}, {dir: link}, {dir: filepath.Join(link, "a", "..", "b")},
		{path: filepath.Join(ws, "srv")}, {path: filepath.Join(link, "srv")}, {dir: outside, path: "../" + filepath.Base(outside) + "/link/x"},
	} {
		cmd := &exec.Cmd{Path: c.path, Dir: c.dir}
		var we *WritableError
		if _, err := Prepare(cmd, []string{ws}); !errors.As(err, &we) {
			t.Errorf("Prepare(dir %q, path %q) = %v, want a WritableError", c.dir, c.path, err)
		}
	}

	// Search paths lose relative, empty and workspace entries; other
	// variables keep theirs.
	cmd = exec.Command("/bin/true")
	cmd.Env = []string{"PATH=/usr/bin::.:bin:" + ws + "/bin:" + link + "/x:/bin", "PYTHONPATH=" + ws, "NODE_PATH=" + outside, "HOME=" + ws, "path=."}
	dropped, err := Prepare(cmd, []string{ws})
	if err != nil {
		t.Fatal(err)
	}
	h, err := Home()
	if err != nil {
		t.Fatal(err)
	}
	// HOME in the workspace is a search path into it (npx's cache, the
	// user site): it becomes the private home.
	want := []string{"PATH=/usr/bin:/bin", "NODE_PATH=" + outside, "HOME=" + h}
	if !slices.Equal(cmd.Env, want) {
		t.Errorf("env = %q, want %q", cmd.Env, want)
	}
	if len(dropped) != 8 || !strings.HasPrefix(dropped[0], "PATH=") {
		t.Errorf("dropped = %q", dropped)
	}
	if st, err := os.Stat(h); err != nil || st.Mode().Perm() != 0o700 || Inside(h, []string{ws}) != "" {
		t.Errorf("private home %s: %v %v", h, st, err)
	}

	// The other folders of caches and configs are dropped when in the
	// workspace (through a link too), kept outside it; HOME outside stays.
	cmd = exec.Command("/bin/true")
	cmd.Env = []string{"HOME=" + outside, "XDG_CACHE_HOME=" + link + "/c", "npm_config_cache=" + ws + "/npm", "NPM_CONFIG_PREFIX=" + ws,
		"UV_CACHE_DIR=" + outside + "/uv", "XDG_DATA_DIRS=/usr/share:" + ws, "MEMORY_FILE_PATH=" + ws + "/m.json"}
	if _, err := Prepare(cmd, []string{ws}); err != nil {
		t.Fatal(err)
	}
	want = []string{"HOME=" + outside, "UV_CACHE_DIR=" + outside + "/uv", "MEMORY_FILE_PATH=" + ws + "/m.json"}
	if !slices.Equal(cmd.Env, want) {
		t.Errorf("env = %q, want %q", cmd.Env, want)
	}

	// Options that name a file the program runs: dropped when the file is
	// in the workspace, by any spelling; kept otherwise.
	cmd = exec.Command("/bin/true")
	cmd.Env = []string{"NODE_OPTIONS=--require " + ws + "/h.js", "BASH_ENV=" + link + "/e.sh", "LD_PRELOAD=/usr/lib/x.so:" + ws + "/y.so",
		"JAVA_TOOL_OPTIONS=-javaagent:" + ws + "/a.jar", "node_options=--import=file://" + ws + "/h.mjs", "PERL5OPT=-Mstrict", "ENV=" + outside + "/env.sh",
		`NODE_OPTIONS=--require "` + ws + `/q.js"`, `RUBYOPT=-r'` + ws + `/x.rb'`}
	if _, err := Prepare(cmd, []string{ws}); err != nil {
		t.Fatal(err)
	}
	want = []string{"PERL5OPT=-Mstrict", "ENV=" + outside + "/env.sh"}
	if !slices.Equal(cmd.Env, want) {
		t.Errorf("env = %q, want %q", cmd.Env, want)
	}
}

// TestDirOutsideHome: with the home folder as the workspace and no
// $XDG_RUNTIME_DIR, the user's cache folder is in the workspace: the
// private folder is made elsewhere, not refused.
func TestDirOutsideHome(t *testing.T) {
	home := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", home)
	d, err := DirOutside([]string{home})
	if err != nil {
		t.Fatal(err)
	}
	if Inside(d, []string{home}) != "" {
		t.Errorf("DirOutside = %s, in the workspace %s", d, home)
	}
	cmd := exec.Command("/bin/true")
	if _, err := Prepare(cmd, []string{home}); err != nil || cmd.Dir != d {
		t.Errorf("Prepare: dir %q, %v; want %q", cmd.Dir, err, d)
	}
}

// TestKernelRunDir: a kernel's run directory counts as writable for every
// program check, whatever the caller lists (acc3: a file a sandboxed
// kernel wrote in its run directory ran on the host).
func TestKernelRunDir(t *testing.T) {
	tmp := os.TempDir()
	for _, c := range []struct{ p, want string }{
		{filepath.Join(tmp, "ipybox-0123456789", "kernel", "python3"), filepath.Join(tmp, "ipybox-0123456789")},
		{filepath.Join(tmp, "ipybox-0123456789"), filepath.Join(tmp, "ipybox-0123456789")},
		{filepath.Join(tmp, "ipybox-sandbox-0123456789", "x"), ""},
		{filepath.Join(tmp, "ipybox-host-0123456789", "x"), ""},
		{filepath.Join(tmp, "ipybox-012345678", "x"), ""},
		{"/usr/bin/python3", ""},
	} {
		if got := KernelRunDir(c.p); got != c.want {
			t.Errorf("KernelRunDir(%s) = %q, want %q", c.p, got, c.want)
		}
	}
	if got := ProgramInside(filepath.Join(tmp, "ipybox-0123456789", "kernel", "python3"), nil); got == "" {
		t.Error("ProgramInside: a program in a kernel's run directory passed with no writable folders listed")
	}
}
