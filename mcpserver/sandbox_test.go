package mcpserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestSandboxedSession: with a sandbox, the session's kernel is confined,
// a bound host directory is usable inside, and install_package's pip runs
// under the sandbox (a local wheel installs; an index is unreachable unless
// allowed, and the error says how to allow it).
func TestSandboxedSession(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws, host := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(host, "in.txt"), []byte("from the host"), 0o644)
	srv := newServer(t, &Options{
		Workspace: ws,
		Sandbox:   ipybox.DefaultSandbox(),
		Binds:     []Bind{{HostPath: host, RelPath: "data"}},
	})
	cs := connect(t, srv, nil)

	res := call(t, cs, "execute_ipython_cell", map[string]any{"code": "open('/etc/shadow').read()"})
	if !res.IsError || !strings.Contains(text(res), "PermissionError") {
		t.Errorf("/etc/shadow: %s", short(text(res)))
	}
	if got := run(t, cs, "print(open('data/in.txt').read())\nopen('data/out.txt', 'w').write('from the sandbox')"); !strings.Contains(got, "from the host") {
		t.Errorf("bound dir: %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(host, "out.txt")); err != nil || string(b) != "from the sandbox" {
		t.Errorf("write through the bind: %q, %v", b, err)
	}

	os.MkdirAll(filepath.Join(ws, "dist"), 0o755)
	whl := buildWheel(t, filepath.Join(ws, "dist"))
	res = call(t, cs, "install_package", map[string]any{"package_name": "dist/" + whl})
	if res.IsError {
		t.Fatalf("install_package in the sandbox: %s", text(res))
	}
	if got := run(t, cs, "import ipybox_testpkg\nprint(ipybox_testpkg.__name__)"); !strings.Contains(got, "ipybox_testpkg") {
		t.Errorf("import after install: %q", got)
	}
	res = call(t, cs, "install_package", map[string]any{"package_name": "ipybox-no-such-package-7d1f"})
	if !res.IsError || !strings.Contains(text(res), "--allowed-domain") {
		t.Errorf("install from the index without an allowed domain: %s", short(text(res)))
	}
}
