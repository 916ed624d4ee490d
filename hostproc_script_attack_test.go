package ipybox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestAttackHostServerScriptInWorkspace: an operator's stdio server whose
// program lies outside the workspace but whose script argument lies in it
// (python /ws/srv.py, node /ws/srv.js, sh /ws/srv.sh, node --require
// /ws/x.js, --require=, the script after --, through a link to the
// workspace, climbing back into it; after an option's value, python -W
// ignore, -X dev, bash -o posix; through env, env -i --, env -S, env
// running the workspace's program itself; perl -I of the workspace, as
// one argument or two) ran the file that kernel code wrote
// there, on the host: only cwd and command were checked. Kernel code plants
// each bait; none may run, and each refusal says to sandbox the server.
// An interpreter's data argument in the workspace (python -c CODE /ws) is
// not a script, and still starts (the test can fail).
func TestAttackHostServerScriptInWorkspace(t *testing.T) {
	py := testenv.NeedsPython(t)
	node := testenv.NeedsTool(t, "node")
	ws := t.TempDir()
	link := filepath.Join(t.TempDir(), "ws")
	if err := os.Symlink(ws, link); err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(t.TempDir(), "mark")
	ex := start(t, &ipybox.Options{WorkDir: ws, NoToolApproval: true})
	run(t, ex, fmt.Sprintf("import os\nos.makedirs('sub', exist_ok=True)\nopen('bait.py', 'w').write(%q)\nopen('bait.js', 'w').write(%q)\nopen('bait.sh', 'w').write(%q)\nos.chmod('bait.sh', 0o755)\nopen('Bait.pm', 'w').write(%q)\n",
		fmt.Sprintf("open(%q, 'w').write('ran')\n", mark),
		fmt.Sprintf("require('fs').writeFileSync(%q, 'ran')\n", mark),
		fmt.Sprintf("#!/bin/sh\necho ran > %s\n", mark),
		fmt.Sprintf("open(my $f, '>', %q); print $f 'ran'; close $f; 1;\n", mark)))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i, cfg := range []ipybox.ServerConfig{
		{Command: py, Args: []string{filepath.Join(ws, "bait.py")}},
		{Command: py, Args: []string{"-u", filepath.Join(ws, "bait.py")}},
		{Command: py, Args: []string{filepath.Join(link, "bait.py")}},
		{Command: py, Args: []string{filepath.Join(ws, "sub", "..", "bait.py")}},
		{Command: node, Args: []string{filepath.Join(ws, "bait.js")}},
		{Command: node, Args: []string{"--require", filepath.Join(ws, "bait.js"), "-e", "1"}},
		{Command: node, Args: []string{"--require=" + filepath.Join(ws, "bait.js"), "-e", "1"}},
		{Command: node, Args: []string{"--", filepath.Join(ws, "bait.js")}},
		{Command: "/bin/sh", Args: []string{filepath.Join(ws, "bait.sh")}},
		{Command: "sh", Args: []string{filepath.Join(ws, "bait.sh")}},
		// An option's value before the script, and env in front.
		{Command: py, Args: []string{"-W", "ignore", filepath.Join(ws, "bait.py")}},
		{Command: py, Args: []string{"-X", "dev", filepath.Join(ws, "bait.py")}},
		{Command: "bash", Args: []string{"-o", "posix", filepath.Join(ws, "bait.sh")}},
		{Command: "env", Args: []string{py, filepath.Join(ws, "bait.py")}},
		{Command: "/usr/bin/env", Args: []string{"-i", "A=1", "--", "sh", filepath.Join(ws, "bait.sh")}},
		{Command: "env", Args: []string{"-S", py + " " + filepath.Join(ws, "bait.py")}},
		{Command: "env", Args: []string{filepath.Join(ws, "bait.sh")}},
		{Command: "perl", Args: []string{"-I", ws, "-MBait", "-e", "1"}},
		{Command: "perl", Args: []string{"-I" + ws, "-MBait", "-e", "1"}},
	} {
		_, err := ex.RegisterMCPServer(ctx, fmt.Sprintf("s%d", i), cfg)
		if _, statErr := os.Stat(mark); statErr == nil {
			t.Errorf("config %d (%s %q): the kernel's script ran on the host", i, cfg.Command, cfg.Args)
			os.Remove(mark)
		}
		if err == nil || !strings.Contains(err.Error(), "script") || !strings.Contains(err.Error(), `"sandbox": true`) {
			t.Errorf("config %d (%s %q): err = %v, want a refusal of the script that says to sandbox it", i, cfg.Command, cfg.Args, err)
		}
	}
	if _, err := ex.RegisterMCPServer(ctx, "data", ipybox.ServerConfig{Command: py, Args: []string{"-c", hostSrvPy, ws}}); err != nil {
		t.Errorf("a server given the workspace as data: %v", err)
	}
}
