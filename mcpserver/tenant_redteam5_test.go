package mcpserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestRedteam5TenantHostServerInWorkspace: with several principals, an
// Executor's list of the folders where no host process starts was its
// own tenant's folder, not the workspace: an operator's --mcp-config
// server whose cwd is the workspace (refused with one principal), or
// another principal's folder, started there on the host for alice's
// session. bob's sandboxed kernel writes his folder, so `python -m bob`
// in the workspace ran his __main__.py on the host, and a cwd in his
// folder imported his json.py. Each must be refused, and bob's code must
// not run.
func TestRedteam5TenantHostServerInWorkspace(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws, marks := t.TempDir(), t.TempDir()
	mark := func(n string) string { return filepath.Join(marks, n) }
	srv := newGatedServer(t, &Options{Workspace: ws, HTTP: HTTPOptions{Principals: twoPrincipals}, Sandbox: ipybox.DefaultSandbox(),
		Servers: map[string]ipybox.ServerConfig{
			"rootcwd": {Command: py, Args: []string{"-m", "bob"}, Cwd: ws},
			"bobcwd":  {Command: py, Args: []string{"-c", "import json"}, Cwd: filepath.Join(ws, "bob")},
		}})
	url := serveHTTP(t, srv)
	bob := connectHTTPAs(t, url, bobTok, newVersion, nil)
	hb := createSession(t, bob)
	if got := runIn(t, bob, hb, plant(mark("root"), mark("bob"))); !strings.HasSuffix(got, "planted") {
		t.Fatalf("bob's kernel: %q", got)
	}
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	ha := createSession(t, alice)
	got := runIn(t, alice, ha, "print(1)")
	for _, n := range []string{`"rootcwd"`, `"bobcwd"`} {
		if !strings.Contains(got, "MCP server "+n+" could not be registered") || !strings.Contains(got, "which kernel code can write") {
			t.Errorf("alice's first result does not say that %s was refused for its working folder: %q", n, got)
		}
	}
	for _, n := range []string{"root", "bob"} {
		if _, err := os.Stat(mark(n)); err == nil {
			t.Errorf("bob's kernel's code ran on the host in alice's operator server (%s)", n)
		}
	}
}

// plant is the cell bob's kernel runs (in his folder, <ws>/bob): a
// package bob/ there (so <ws>/bob/bob/, which python -m bob finds only
// when sys.path[0] is <ws>/bob) and, as <ws>/bob itself is the package
// `bob` of a server started in <ws>, its __main__.py; and a json.py.
func plant(rootMark, bobMark string) string {
	return "import os\n" +
		"open('__init__.py', 'w').write('')\n" +
		"open('__main__.py', 'w').write(\"open(" + quotePy(rootMark) + ", 'w').write('ran')\\n\")\n" +
		"open('json.py', 'w').write(\"open(" + quotePy(bobMark) + ", 'w').write('ran')\\n\")\n" +
		"print('planted')"
}

func quotePy(s string) string { return "'" + s + "'" }
