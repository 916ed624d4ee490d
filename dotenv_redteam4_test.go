package ipybox_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
)

// TestRedteam4KernelWritesDotEnv: the workspace's .env fills ${VAR} in
// the operator's server configs at the next start (ipybox mcp reads it),
// for every name the host environment does not set. A sandboxed kernel
// must not be able to create it where there is none, in any way: a plain
// write, a rename, a hard link, a symbolic link, a folder renamed over,
// nor replace an existing one. (.env.* likewise.)
func TestRedteam4KernelWritesDotEnv(t *testing.T) {
	for _, existing := range []bool{false, true} {
		ws := t.TempDir()
		if existing {
			if err := os.WriteFile(filepath.Join(ws, ".env"), []byte("A=operator\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		ex := startSandboxed(t, &ipybox.Options{WorkDir: ws})
		res := run(t, ex, `import os
out = []
def tryit(name, f):
    try:
        f(); out.append(name + " DONE")
    except OSError as e:
        out.append(name + " refused " + type(e).__name__)
open("src.txt", "w").write("API_URL=http://kernel\n")
os.makedirs("d", exist_ok=True)
tryit("write", lambda: open(".env", "w").write("API_URL=http://kernel\n"))
tryit("append", lambda: open(".env", "a").write("API_URL=http://kernel\n"))
tryit("rename", lambda: os.rename("src.txt", ".env"))
tryit("link", lambda: os.link("src.txt", ".env"))
tryit("symlink", lambda: os.symlink("src.txt", ".env"))
tryit("dir rename", lambda: os.rename("d", ".env"))
tryit("env.local", lambda: open(".env.local", "w").write("X=1\n"))
tryit("remove", lambda: os.remove(".env"))
print("\n".join(out))`)
		t.Logf("existing=%v: %s", existing, res.Text)
		data, err := os.ReadFile(filepath.Join(ws, ".env"))
		switch {
		case !existing && err == nil, !existing && !os.IsNotExist(err):
			t.Errorf("no .env before; the kernel made one (%v): %q", err, data)
		case existing && (err != nil || string(data) != "A=operator\n"):
			t.Errorf("the operator's .env changed: %q (%v)", data, err)
		}
		if strings.Contains(res.Text, "DONE") {
			t.Errorf("existing=%v: a kernel operation on .env succeeded:\n%s", existing, res.Text)
		}
		if _, err := os.Lstat(filepath.Join(ws, ".env.local")); err == nil {
			t.Error(".env.local was made")
		}
	}
}
