package ipybox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// hostSrvPy is a stdio MCP server in stdlib Python: its one tool answers
// the server's working folder. It imports json, which a module in the
// working folder would shadow under python -m and -c.
const hostSrvPy = `import json, os, sys
def send(m):
    sys.stdout.write(json.dumps(m) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line); i = m.get("id")
    if i is None: continue
    meth = m.get("method")
    if meth == "initialize":
        send({"jsonrpc": "2.0", "id": i, "result": {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "hostsrv", "version": "1"}}})
    elif meth == "tools/list":
        send({"jsonrpc": "2.0", "id": i, "result": {"tools": [{"name": "where", "description": "the working folder", "inputSchema": {"type": "object"}}]}})
    elif meth == "tools/call":
        send({"jsonrpc": "2.0", "id": i, "result": {"content": [{"type": "text", "text": os.getcwd()}]}})
    else:
        send({"jsonrpc": "2.0", "id": i, "error": {"code": -32601, "message": "unknown method"}})
`

// hostSrvJS is the same server in node.
const hostSrvJS = `const rl = require("readline").createInterface({input: process.stdin});
const send = (m) => process.stdout.write(JSON.stringify(m) + "\n");
rl.on("line", (line) => {
  const m = JSON.parse(line); const i = m.id;
  if (i === undefined) return;
  if (m.method === "initialize") send({jsonrpc: "2.0", id: i, result: {protocolVersion: m.params.protocolVersion, capabilities: {tools: {}}, serverInfo: {name: "hostsrv", version: "1"}}});
  else if (m.method === "tools/list") send({jsonrpc: "2.0", id: i, result: {tools: [{name: "where", description: "the working folder", inputSchema: {type: "object"}}]}});
  else if (m.method === "tools/call") send({jsonrpc: "2.0", id: i, result: {content: [{type: "text", text: process.cwd()}]}});
  else send({jsonrpc: "2.0", id: i, error: {code: -32601, message: "unknown method"}});
});
`

// hostLaunch is one launcher kind's attack: a server config with no cwd,
// the files kernel code plants in the workspace for it, and whether the
// legitimate server must still work.
type hostLaunch struct {
	name  string
	cfg   func(trusted string) ipybox.ServerConfig
	plant map[string]string // workspace path -> content; MARK is replaced by the marker's path
	code  string            // more planting, as Python run in the case's folder; MARK and DIR replaced
	works bool              // the trusted server answers (false: the bait was the only one)
	dir   string            // where the bait lies (ipybox's working folder for the case)
	mark  string            // the file the bait writes when it runs
	reg   string            // the server's name
	needs func(testing.TB)  // finds what the case needs (testenv skips it locally when missing, fails in CI)
}

// TestAttackHostProcessLoadsWorkspace: a stdio server whose config names
// no cwd started in ipybox's working folder, the workspace in the default
// set-up (ipybox mcp started by a client in the project), so that
// python -m and -c imported kernel-written modules, a relative script ran
// the kernel's, and node -e and npx ran the kernel's node_modules: host
// code execution for kernel code. Each launcher kind plants its bait
// through a real kernel while ipybox's own working folder is the
// workspace; none may run, and the legitimate servers still answer, from a
// folder that is not the workspace. Each bait is first shown to work when
// the same command runs in the workspace, so that its absence means
// something.
func TestAttackHostProcessLoadsWorkspace(t *testing.T) {
	py := testenv.NeedsPython(t)
	node := testenv.NeedsTool(t, "node")
	npx := testenv.NeedsTool(t, "npx")
	trusted := t.TempDir()
	if err := os.WriteFile(filepath.Join(trusted, "hostsrv.py"), []byte(hostSrvPy), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(trusted, "node_modules", "hostsrv"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(trusted, "node_modules", "hostsrv", "index.js"), []byte(hostSrvJS), 0o644); err != nil {
		t.Fatal(err)
	}
	pyBait := "open('MARK', 'w').write('ran')\nraise SystemExit(3)\n"
	jsBait := "require('fs').writeFileSync('MARK', 'ran'); process.exit(3);\n"
	cases := []hostLaunch{
		{name: "python -m, shadowing the server's import", works: true,
			cfg: func(tr string) ipybox.ServerConfig {
				return ipybox.ServerConfig{Command: py, Args: []string{"-m", "hostsrv"}, Env: map[string]string{"PYTHONPATH": tr}}
			},
			plant: map[string]string{"json.py": pyBait}},
		{name: "python -m, shadowing the server module", works: true,
			cfg: func(tr string) ipybox.ServerConfig {
				return ipybox.ServerConfig{Command: py, Args: []string{"-m", "hostsrv"}, Env: map[string]string{"PYTHONPATH": tr}}
			},
			plant: map[string]string{"hostsrv.py": pyBait}},
		{name: "python -c", works: true,
			cfg: func(tr string) ipybox.ServerConfig {
				return ipybox.ServerConfig{Command: py, Args: []string{"-c", fmt.Sprintf("import runpy; runpy.run_path(%q, run_name='__main__')", filepath.Join(tr, "hostsrv.py"))}}
			},
			plant: map[string]string{"json.py": pyBait}},
		{name: "a relative script path",
			cfg: func(string) ipybox.ServerConfig {
				return ipybox.ServerConfig{Command: py, Args: []string{"hostsrv.py"}}
			},
			plant: map[string]string{"hostsrv.py": pyBait}},
		{name: "a relative program",
			cfg: func(string) ipybox.ServerConfig {
				return ipybox.ServerConfig{Command: "./hostsrv.sh"}
			},
			plant: map[string]string{"hostsrv.sh": "#!/bin/sh\necho ran > MARK\nexit 3\n"}},
		{name: "node -e, require", works: true,
			cfg: func(tr string) ipybox.ServerConfig {
				return ipybox.ServerConfig{Command: node, Args: []string{"-e", "require('hostsrv')"}, Env: map[string]string{"NODE_PATH": filepath.Join(tr, "node_modules")}}
			},
			plant: map[string]string{"node_modules/hostsrv/index.js": jsBait}},
		{name: "npx, a planted node_modules",
			cfg: func(string) ipybox.ServerConfig {
				// Offline: the test must not reach the registry, where the
				// name might exist.
				return ipybox.ServerConfig{Command: npx, Args: []string{"-y", "ipybox-hostproc-bait"}, Env: map[string]string{"npm_config_offline": "true"}}
			},
			plant: map[string]string{
				"node_modules/ipybox-hostproc-bait/package.json": `{"name": "ipybox-hostproc-bait", "version": "1.0.0", "bin": {"ipybox-hostproc-bait": "cli.js"}}`,
				"node_modules/ipybox-hostproc-bait/cli.js":       "#!/usr/bin/env node\n" + jsBait,
				"node_modules/.bin/ipybox-hostproc-bait":         "#!/usr/bin/env node\n" + jsBait,
			}},
	}
	cases = append(cases, uvRunCase())

	ws := t.TempDir()
	marks := t.TempDir()
	// ipybox's own working folder is the workspace, as when a client
	// starts ipybox mcp in its project.
	t.Chdir(ws)
	ex := start(t, &ipybox.Options{WorkDir: ws, NoToolApproval: true})
	for i, c := range cases {
		mark := filepath.Join(marks, fmt.Sprintf("m%d", i))
		dir := filepath.Join("case", fmt.Sprint(i))
		// Kernel code plants the bait (in a folder of its own per case,
		// so that the cases do not see each other's).
		var code strings.Builder
		fmt.Fprintf(&code, "import os\n")
		for p, content := range c.plant {
			full := filepath.Join(dir, p)
			fmt.Fprintf(&code, "os.makedirs(%q, exist_ok=True)\nopen(%q, 'w').write(%q)\nos.chmod(%q, 0o755)\n",
				filepath.Dir(full), full, strings.NewReplacer("MARK", mark, "DIR", filepath.Join(ws, dir)).Replace(content), full)
		}
		if strings.HasSuffix(c.name, "node_modules") {
			fmt.Fprintf(&code, "os.remove(%q)\nos.symlink('../ipybox-hostproc-bait/cli.js', %q)\n",
				filepath.Join(dir, "node_modules/.bin/ipybox-hostproc-bait"), filepath.Join(dir, "node_modules/.bin/ipybox-hostproc-bait"))
		}
		if c.code != "" {
			fmt.Fprintf(&code, "_d = os.getcwd()\nos.chdir(%q)\n%s\nos.chdir(_d)\n", dir,
				strings.NewReplacer("MARK", mark, "DIR", filepath.Join(ws, dir)).Replace(c.code))
		}
		run(t, ex, code.String())
		c.dir, c.mark, c.reg = filepath.Join(ws, dir), mark, fmt.Sprintf("h%d", i)
		t.Run(c.name, func(t *testing.T) { c.attack(t, ex, ws, trusted) })
	}
}

func (c hostLaunch) attack(t *testing.T, ex *ipybox.Executor, ws, trusted string) {
	if c.needs != nil {
		c.needs(t)
	}
	cfg := c.cfg(trusted)
	// The bait works where the old code started the server.
	ctl := exec.Command(cfg.Command, cfg.Args...)
	ctl.Dir = c.dir
	ctl.Env = append(os.Environ(), envList(cfg.Env)...)
	ctl.WaitDelay = 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if b, err := ctl.CombinedOutput(); !exists(c.mark) { // bound: the bait exits at once; WaitDelay
		t.Fatalf("control: the bait did not run when the command ran in the workspace (%v): %s", err, b)
	}
	os.Remove(c.mark)

	if err := os.Chdir(c.dir); err != nil {
		t.Fatal(err)
	}
	mods, err := ex.RegisterMCPServer(ctx, c.reg, cfg)
	if exists(c.mark) {
		t.Fatalf("the kernel's bait ran on the host (register: %v)", err)
	}
	if !c.works {
		if err == nil {
			t.Fatalf("registered %d tools; want the start to fail (only the bait could answer)", len(mods))
		}
		t.Logf("refused as it should be: %v", err)
		return
	}
	if err != nil {
		t.Fatalf("the legitimate server did not start: %v", err)
	}
	res := run(t, ex, fmt.Sprintf("from mcptools.%s.where import Params, run\nprint(run(Params()))", c.reg))
	cwd := strings.TrimSpace(res.Text)
	if cwd == "" || strings.HasPrefix(cwd+"/", ws+"/") {
		t.Errorf("the server's working folder is %q, in the workspace %s", cwd, ws)
	}
	if exists(c.mark) {
		t.Fatal("the kernel's bait ran on the host")
	}
}

// uvRunCase: uv run discovers the project (pyproject.toml, uv.toml) from
// its working folder upward, and installs and runs what it declares. The
// kernel plants a project whose dependency is its own wheel, from a
// find-links folder beside it. (uvx does not read a project's config:
// uv 0.13.8 ignored a planted uv.toml and pyproject.toml.)
func uvRunCase() hostLaunch {
	uv := new(string) // setup.sh's uv, from its own venv (testenv.UV)
	return hostLaunch{name: "uv run, a planted project", needs: func(t testing.TB) { *uv = testenv.UV(t) },
		cfg: func(string) ipybox.ServerConfig {
			// Offline: outside the planted project the name is looked up
			// nowhere.
			return ipybox.ServerConfig{Command: *uv, Args: []string{"run", "ipybox-hostproc-bait"}, Env: map[string]string{"UV_OFFLINE": "1"}}
		},
		plant: map[string]string{"pyproject.toml": `[project]
name = "proj"
version = "0"
requires-python = ">=3.8"
dependencies = ["ipybox-hostproc-bait"]
[tool.uv]
no-index = true
find-links = ["DIR/wheels"]
`},
		code: `import zipfile, base64, hashlib
os.makedirs("wheels", exist_ok=True)
n, v = "ipybox_hostproc_bait", "1.0"
files = {n + "/__init__.py": "def main():\n    open('MARK', 'w').write('ran')\n",
    f"{n}-{v}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: ipybox-hostproc-bait\nVersion: {v}\n",
    f"{n}-{v}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: bait\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    f"{n}-{v}.dist-info/entry_points.txt": f"[console_scripts]\nipybox-hostproc-bait = {n}:main\n"}
rec = []
with zipfile.ZipFile(f"wheels/{n}-{v}-py3-none-any.whl", "w") as z:
    for p, c in files.items():
        z.writestr(p, c)
        rec.append(f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(c.encode()).digest()).rstrip(b'=').decode()},{len(c)}")
    z.writestr(f"{n}-{v}.dist-info/RECORD", "\n".join(rec + [f"{n}-{v}.dist-info/RECORD,,"]) + "\n")`,
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func envList(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

// TestHostServerCwdInWorkspace: a config whose cwd (or program) lies in
// the workspace, however spelt, is refused on the host with a message
// that says to sandbox it; with "sandbox": true the same config runs, in
// the sandbox, in that folder.
func TestHostServerCwdInWorkspace(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "ws")
	if err := os.Symlink(ws, link); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "srv.py"), []byte(hostSrvPy), 0o755); err != nil {
		t.Fatal(err)
	}
	ex := start(t, &ipybox.Options{WorkDir: ws, NoToolApproval: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, cfg := range []ipybox.ServerConfig{
		{Command: py, Args: []string{"-c", hostSrvPy}, Cwd: ws},
		{Command: py, Args: []string{"-c", hostSrvPy}, Cwd: filepath.Join(ws, "sub")},
		{Command: py, Args: []string{"-c", hostSrvPy}, Cwd: filepath.Join(link, "sub", "..")},
		{Command: filepath.Join(ws, "srv.py")},
		{Command: filepath.Join(link, "srv.py")},
	} {
		_, err := ex.RegisterMCPServer(ctx, fmt.Sprintf("cwd%d", i), cfg)
		if err == nil || !strings.Contains(err.Error(), "kernel code can write") || !strings.Contains(err.Error(), `"sandbox": true`) {
			t.Errorf("config %d (cwd %q, command %q): err = %v, want a refusal that says to sandbox it", i, cfg.Cwd, cfg.Command, err)
		}
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		testenv.Missing(t, "bwrap, for the sandboxed case")
	}
	if _, err := ex.RegisterMCPServer(ctx, "boxed", ipybox.ServerConfig{Command: py, Args: []string{"-c", hostSrvPy}, Cwd: filepath.Join(ws, "sub"), Sandbox: json.RawMessage("true")}); err != nil {
		t.Fatalf("the sandboxed server in the workspace: %v", err)
	}
	res := run(t, ex, "from mcptools.boxed.where import Params, run\nprint(run(Params()))")
	if got := strings.TrimSpace(res.Text); got != filepath.Join(ws, "sub") {
		t.Errorf("the sandboxed server's folder = %q, want %q", got, filepath.Join(ws, "sub"))
	}
}
