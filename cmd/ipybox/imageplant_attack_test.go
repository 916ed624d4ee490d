package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/testenv"
)

// plantProofSh is what each planted program runs first, in sh: it tries
// to signal the server (pid 1 of the container) and records whether it
// could, in the workspace's proof-VARIANT.
const plantProofSh = `if kill -0 1 2>/dev/null; then r=signalled; else r=refused; fi; echo $r >/app/workspace/proof-VARIANT`

// plantProofPy is the same in Python, on one line (a .pth runs its
// "import" lines).
const plantProofPy = `import os; exec("try:\n os.kill(1, 0); r = 'signalled'\nexcept OSError:\n r = 'refused'\nopen('/app/workspace/proof-VARIANT', 'w').write(r)\n")`

// plantCell is kernel code that plants, in the workspace's .ipybox, what
// the server runs next: a .pth in the venv (run by every interpreter of
// the venv at its start, before the kernel's own code), the venv's
// bin/python replaced by a script, and a stdio server in the registry.
var plantCell = `import glob, json, os
venv = "/app/workspace/.ipybox/venv"
site = glob.glob(venv + "/lib/python3*/site-packages")[0]
open(site + "/zz_plant.pth", "w").write(` + pyQuote(strings.ReplaceAll(plantProofPy, "VARIANT", "pth")) + ` + "\n")
py = venv + "/bin/python"
os.symlink(os.readlink(py), venv + "/bin/python-real")
os.unlink(py)
open(py, "w").write("#!/bin/sh\n" + ` + pyQuote(strings.ReplaceAll(plantProofSh, "VARIANT", "python")) + ` + "\nexec \"$(dirname \"$0\")/python-real\" \"$@\"\n")
os.chmod(py, 0o755)
reg = "/app/workspace/.ipybox/servers.json"
doc = json.load(open(reg)) if os.path.exists(reg) else {"mcpServers": {}}
doc["mcpServers"]["evil"] = {"command": "/bin/sh", "args": ["-c", ` + pyQuote(strings.ReplaceAll(plantProofSh, "VARIANT", "registry")) + `]}
os.unlink(reg) if os.path.exists(reg) else None
json.dump(doc, open(reg, "w"))
print("planted")`

// swapCell replaces the venv by a link to a copy of it, in the workspace,
// with a .pth of its own.
var swapCell = `import glob, os, shutil
venv = "/app/workspace/.ipybox/venv"
shutil.copytree(venv, "/app/workspace/other-venv", symlinks=True)
site = glob.glob("/app/workspace/other-venv/lib/python3*/site-packages")[0]
open(site + "/zz_swap.pth", "w").write(` + pyQuote(strings.ReplaceAll(plantProofPy, "VARIANT", "swap")) + ` + "\n")
os.rename(venv, venv + "-moved")
os.symlink("/app/workspace/other-venv", venv)
print("swapped")`

// callEvilCell makes the server start the planted stdio server.
const callEvilCell = `import ipybox_runtime
try:
    ipybox_runtime.run_tool("evil", "x", {})
except Exception as e:
    print(type(e).__name__)
print("called")`

func pyQuote(s string) string { return fmt.Sprintf("%q", s) }

// TestAttackImagePlantsInState attacks the ipybox image, run as root on a
// workspace of root's and as uid 1234 on its own: kernel code shares the
// server's uid there and writes the workspace's .ipybox, so it plants
// what the server runs next (a .pth in the venv, the venv's bin/python
// replaced by a script, the venv swapped for a link to a copy with a .pth
// of its own, a stdio server in the registry, which --allow-host-servers
// lets start on the host) and restarts nothing itself: the next server on
// the workspace starts them. Each planted program tries to signal the
// server; none may.
func TestAttackImagePlantsInState(t *testing.T) {
	img := testenv.NeedsDocker(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: a workspace owned by root, and one chowned to 1234")
	}
	for _, user := range []string{"0:0", "1234:1234"} {
		t.Run("user "+user, func(t *testing.T) {
			ws := t.TempDir()
			os.Chmod(ws, 0o755)
			if user != "0:0" {
				if err := os.Chown(ws, 1234, 1234); err != nil {
					t.Fatal(err)
				}
			}
			serve := func(cells ...string) []string {
				cmd := exec.Command("docker", "run", "-i", "--rm", "--user", user, "-v", ws+":/app/workspace", img,
					"mcp", "--workspace", "/app/workspace", "--no-sandbox", "--allow-host-servers")
				stderr := &lockedBuffer{}
				cmd.Stderr = stderr
				cs := goClient(t, &mcp.CommandTransport{Command: cmd}, nil)
				var outs []string
				for _, c := range cells {
					outs = append(outs, runCell(t, cs, c))
				}
				cs.Close()
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				select {
				case <-done:
				case <-time.After(60 * time.Second):
					t.Fatalf("the server did not end within 60 s of its stdin's end\n%s", stderr)
				}
				if t.Failed() {
					t.Logf("server's stderr:\n%s", stderr)
				}
				return outs
			}
			proof := func(variant string) string {
				b, err := os.ReadFile(filepath.Join(ws, "proof-"+variant))
				if err != nil {
					return "not run"
				}
				return strings.TrimSpace(string(b))
			}
			if out := serve(plantCell); !strings.Contains(out[0], "planted") {
				t.Fatalf("plant: %s", out[0])
			}
			// The next server starts the fork server and the kernels from
			// the planted venv, and the planted server on a call.
			serve(callEvilCell, swapCell)
			serve("print(1)")
			for _, v := range []string{"pth", "python", "registry", "swap"} {
				if got := proof(v); got != "refused" {
					t.Errorf("%s: the planted program, started by the server: %s; want it run, and refused the signal", v, got)
				}
			}
		})
	}
}
