package mcpserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// plantVenv leaves in the workspace's venv what kernel code could: a .pth
// file that marks the host when any interpreter loads the venv, and no
// bin/python (so that the next start re-creates it).
func plantVenv(t *testing.T, ws, mark string) {
	t.Helper()
	sites, _ := filepath.Glob(filepath.Join(ws, ".ipybox", "venv", "lib", "python*", "site-packages"))
	if len(sites) == 0 {
		t.Fatal("no venv site-packages to plant in")
	}
	pth := fmt.Sprintf("import os; open(%q, 'a').write('ran from the venv\\n')\n", mark)
	if err := os.WriteFile(filepath.Join(sites[0], "zz-evil.pth"), []byte(pth), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(ws, ".ipybox", "venv", "bin", "python")); err != nil {
		t.Fatal(err)
	}
}

// TestAttackVenvPth: a .pth file planted in the workspace's venv, with its
// bin/python deleted, used to make the next `ipybox mcp` run kernel-chosen
// code on the host when it re-created the venv and ran its interpreter.
// Now the host never runs the venv's interpreter: sandboxed, venv and pip
// run inside the sandbox; unsandboxed, with the base interpreter, isolated.
func TestAttackVenvPth(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	for _, sandboxed := range []bool{true, false} {
		t.Run(fmt.Sprint("sandboxed=", sandboxed), func(t *testing.T) {
			var policy *ipybox.SandboxConfig
			if sandboxed {
				testenv.NeedsTool(t, "bwrap")
				policy = ipybox.DefaultSandbox()
			}
			ws := t.TempDir()
			mark := filepath.Join(t.TempDir(), "host-marked")
			first := newServer(t, &Options{Workspace: ws, Sandbox: policy})
			if _, err := first.only.venvPython(context.Background()); err != nil {
				t.Fatal(err)
			}
			plantVenv(t, ws, mark)

			// The next server: it finds the venv broken and re-creates it,
			// and pip installs a package.
			next := newServer(t, &Options{Workspace: ws, Sandbox: policy})
			if _, err := next.only.venvPython(context.Background()); err != nil {
				t.Fatal(err)
			}
			os.MkdirAll(filepath.Join(ws, "dist"), 0o755)
			whl := buildWheel(t, filepath.Join(ws, "dist"))
			if out, err := next.only.runPip(context.Background(), "install", filepath.Join(ws, "dist", whl)); err != nil {
				t.Fatalf("pip: %v\n%s", err, out)
			}
			if b, err := os.ReadFile(mark); err == nil {
				t.Fatalf("the host ran the planted .pth: %q", b)
			}
			aside, _ := filepath.Glob(filepath.Join(ws, ".ipybox", "venv.broken-*"))
			if len(aside) != 1 {
				t.Errorf("the broken venv was not moved aside: %v", aside)
			}
			// The same for pip on a venv whose .pth is planted, bin/python
			// kept: pip does not load the venv either.
			sites, _ := filepath.Glob(filepath.Join(ws, ".ipybox", "venv", "lib", "python*", "site-packages"))
			os.WriteFile(filepath.Join(sites[0], "zz-evil.pth"), []byte(fmt.Sprintf("import os; open(%q, 'a').write('x')\n", mark)), 0o644)
			if out, err := next.only.runPip(context.Background(), "install", filepath.Join(ws, "dist", whl)); err != nil && !strings.Contains(string(out), "already") {
				t.Fatalf("pip again: %v\n%s", err, out)
			}
			if _, err := os.Stat(mark); err == nil {
				t.Fatal("pip loaded the venv's .pth on the host")
			}
		})
	}
}
