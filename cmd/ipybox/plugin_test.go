package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv"
)

// The plugins of the marketplace at the repository root, and the sandbox
// flag each one's .mcp.json must pass.
var plugins = []struct{ name, dir, sandboxArg string }{
	{"ipybox", "plugin", "--allowed-domain"},
	{"ipybox-unsandboxed", "plugin-unsandboxed", "--no-sandbox"},
}

// skillBlock matches the examples of SKILL.md in order: Python cells, and
// tool calls written as ```json TOOL_NAME.
var skillBlock = regexp.MustCompile("(?s)```(python|json [a-z_]+)\n(.*?)```")

type clientStep struct {
	Tool    string         `json:"tool"`
	Args    map[string]any `json:"args"`
	Decline string         `json:"decline,omitempty"`
}

type clientResult struct {
	Tool         string `json:"tool"`
	IsError      bool   `json:"isError"`
	Text         string `json:"text"`
	Images       int    `json:"images"`
	Elicitations []struct {
		Message string `json:"message"`
		Action  string `json:"action"`
	} `json:"elicitations"`
}

// TestPluginSkillCopies: the unsandboxed plugin carries the same skill.
func TestPluginSkillCopies(t *testing.T) {
	t.Parallel()
	a, err := os.ReadFile("../../plugin/skills/codeact/SKILL.md")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../plugin-unsandboxed/skills/codeact/SKILL.md")
	if err != nil || !bytes.Equal(a, b) {
		t.Errorf("plugin-unsandboxed/skills/codeact/SKILL.md must be a copy of plugin/skills/codeact/SKILL.md (cp one over the other): %v", err)
	}
}

// TestPluginClaudeCode is the Claude Code plugin's tier-4 test, offline,
// with the real Claude Code CLI (tools/claude, installed by
// scripts/setup-claude.sh) and no API key: scripts/install.sh puts ipybox
// on PATH; `claude plugin validate --strict` accepts the marketplace and
// each plugin; `claude plugin marketplace add` and `claude plugin install`
// succeed; `claude mcp list` starts each plugin's server over stdio and
// shows it Connected. Then a TypeScript-SDK client starts the server
// exactly as the plugin's .mcp.json says (from Claude Code's installed
// copy) and runs the skill's examples through it in order, answering the
// approvals (elicitations) as a user would.
func TestPluginClaudeCode(t *testing.T) {
	if testing.Short() {
		t.Skip("tier 4 test: skipped with -short")
	}
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	root, err := filepath.Abs(testenv.RepoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	claude := filepath.Join(root, "tools", "claude", "node_modules", ".bin", "claude")
	if _, err := os.Stat(claude); err != nil {
		testenv.Missing(t, "%s not installed; run scripts/setup-claude.sh", claude)
	}
	node := testenv.NPMBin(t, "node") // Node 22, as the TypeScript SDK wants
	everything := testenv.NPMBin(t, "mcp-server-everything")

	tmp := t.TempDir()
	home := filepath.Join(tmp, "home")
	project := filepath.Join(tmp, "project")
	prefix := filepath.Join(tmp, "prefix")
	for _, d := range []string{home, project} {
		os.MkdirAll(d, 0o755)
	}
	// A secret of the project that the sandboxed kernel must not read.
	os.WriteFile(filepath.Join(project, ".env"), []byte("PLUGIN_TEST_SECRET=s3cr3t-canary\n"), 0o600)

	// The environment of every command: a fresh HOME and Claude config,
	// no update checks, no traffic but what a command needs, no API key.
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "HOME" || k == "PATH" || k == "CLAUDE_CONFIG_DIR" || k == "CLAUDE_PROJECT_DIR" || strings.HasPrefix(k, "ANTHROPIC_") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "HOME="+home, "CLAUDE_CONFIG_DIR="+filepath.Join(home, ".claude"),
		"DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1")
	// Go keeps its caches and settings under HOME by default: keep the
	// real ones, so that install.sh builds from the warm caches, offline.
	goenv, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH", "GOENV").Output()
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range strings.Fields(string(goenv)) {
		env = append(env, []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOENV"}[i]+"="+v)
	}
	basePath := os.Getenv("PATH")
	sh := func(dir string, path string, name string, args ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = append(slices.Clone(env), "PATH="+path)
		cmd.WaitDelay = 10 * time.Second
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	// scripts/install.sh: into PREFIX/bin, saying that it is not on PATH;
	// again, with it on PATH, quietly (idempotent).
	install := filepath.Join(root, "scripts", "install.sh")
	out, err := sh(root, basePath, "env", "PREFIX="+prefix, install)
	if err != nil || !strings.Contains(out, "is not on your PATH") || !strings.Contains(out, "installed ipybox ") {
		t.Fatalf("scripts/install.sh: %v\n%s", err, out)
	}
	// ipybox from PREFIX/bin, and claude for the README's commands.
	path := filepath.Join(prefix, "bin") + string(os.PathListSeparator) + filepath.Dir(claude) + string(os.PathListSeparator) + basePath
	out, err = sh(root, path, "env", "PREFIX="+prefix, install)
	if err != nil || strings.Contains(out, "not on your PATH") {
		t.Fatalf("scripts/install.sh, again: %v\n%s", err, out)
	}
	t.Logf("scripts/install.sh:\n%s", out)
	out, err = sh(project, path, filepath.Join(prefix, "bin", "ipybox"), "version")
	if err != nil || !regexp.MustCompile(`^ipybox \S+ \(commit [0-9a-f]{12}(\+dirty)?, go`).MatchString(out) {
		t.Errorf("ipybox version from PATH: %v\n%s", err, out)
	}

	// Validate, add the marketplace, install each plugin.
	for _, dir := range []string{root, filepath.Join(root, "plugin"), filepath.Join(root, "plugin-unsandboxed")} {
		out, err := sh(root, path, claude, "plugin", "validate", "--strict", dir)
		if err != nil || !strings.Contains(out, "Validation passed") {
			t.Fatalf("claude plugin validate --strict %s: %v\n%s", dir, err, out)
		}
		t.Logf("claude plugin validate --strict %s:\n%s", dir, out)
	}
	out, err = sh(project, path, claude, "plugin", "marketplace", "add", root)
	if err != nil || !strings.Contains(out, "Successfully added marketplace: ipybox") {
		t.Fatalf("claude plugin marketplace add: %v\n%s", err, out)
	}
	t.Logf("claude plugin marketplace add %s:\n%s", root, out)
	for _, p := range plugins {
		out, err = sh(project, path, claude, "plugin", "install", p.name+"@ipybox")
		if err != nil || !strings.Contains(out, "Successfully installed plugin: "+p.name+"@ipybox") {
			t.Fatalf("claude plugin install %s@ipybox: %v\n%s", p.name, err, out)
		}
		t.Logf("claude plugin install %s@ipybox:\n%s", p.name, out)
	}

	// claude mcp list starts each plugin's server, from PATH, over stdio.
	// The sandboxed one passes an explicit sandbox flag, so that it fails
	// to start, rather than runs unsandboxed, where the sandbox cannot
	// run: Connected means its sandbox started.
	out, err = sh(project, path, claude, "mcp", "list")
	t.Logf("claude mcp list:\n%s", out)
	if err != nil {
		t.Fatalf("claude mcp list: %v", err)
	}
	for _, p := range plugins {
		line := regexp.MustCompile(`(?m)^plugin:` + regexp.QuoteMeta(p.name) + `:ipybox: ipybox mcp .*$`).FindString(out)
		if !strings.Contains(line, "Connected") || !strings.Contains(line, p.sandboxArg) || !strings.Contains(line, "--approval elicit") {
			t.Errorf("claude mcp list: want plugin:%s:ipybox Connected, with %s and --approval elicit; got %q", p.name, p.sandboxArg, line)
		}
	}

	// The skill's examples, through the server as the installed plugin
	// starts it.
	installed, err := filepath.Glob(filepath.Join(home, ".claude", "plugins", "cache", "ipybox", "ipybox", "*", ".mcp.json"))
	if err != nil || len(installed) != 1 {
		t.Fatalf("the installed plugin's .mcp.json: %v %v", installed, err)
	}
	// The plugin's server sandboxes a server that the client registers
	// (docs/mcp.md): the package, copied into the project, is what the
	// sandbox sees of it, and the system's node runs it there.
	sysNode := testenv.NeedsTool(t, "node")
	everythingJS := copyNPMPackage(t, filepath.Dir(filepath.Dir(everything)), "@modelcontextprotocol/server-everything", filepath.Join(project, ".servers"))
	steps := skillSteps(t, filepath.Join(root, "plugin", "skills", "codeact", "SKILL.md"), map[string]any{"command": sysNode, "args": []string{filepath.Join(everythingJS, "dist", "index.js"), "stdio"}})
	// Then a check of this test's own: the kernel is sandboxed.
	steps = append(steps, clientStep{Tool: "execute_ipython_cell", Args: map[string]any{
		"code": "try:\n    print(repr(open('.env').read()))\nexcept OSError as e:\n    print(type(e).__name__)"}})
	stepsFile := filepath.Join(tmp, "steps.json")
	b, _ := json.Marshal(steps)
	os.WriteFile(stepsFile, b, 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(root, "cmd", "ipybox", "testdata", "plugin", "client.cjs"), installed[0], project, stepsFile)
	cmd.Env = append(slices.Clone(env), "PATH="+path, "NODE_PATH="+filepath.Join(root, "tools", "npm", "node_modules"))
	var stderr testenv.Buffer
	cmd.Stderr = &stderr
	t0 := time.Now()
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("TypeScript client: %v\n%s", err, stderr.String())
	}
	var results []clientResult
	if err := json.Unmarshal(raw, &results); err != nil || len(results) != len(steps) {
		t.Fatalf("client output (%d steps): %v\n%s\n%s", len(steps), err, raw, stderr.String())
	}
	t.Logf("the skill's %d examples and the sandbox check ran in %v", len(steps)-1, time.Since(t0).Round(time.Millisecond))

	// What each example must do, in order.
	want := []struct {
		tool     string
		text     string
		images   int
		approved []string // the tools whose calls were asked about and accepted, in order
		declined int
	}{
		{"register_mcp_server", "from mcptools.everything.get_sum import Params, run  # run(Params(a: float, b: float)) -> str", 0, nil, 0},
		{"execute_ipython_cell", `description="Choose city"`, 0, nil, 0},
		{"execute_ipython_cell", "Echo: humid: New York, Chicago; total 69", 0,
			[]string{"get-structured-content", "get-structured-content", "get-structured-content", "get-sum", "get-sum", "echo"}, 0},
		{"execute_ipython_cell", "refused: ['deploy to production: tool call everything.echo rejected by the application: declined by the user']", 0, []string{"echo"}, 1},
		{"execute_ipython_cell", "images/", 1, nil, 0},
		{"install_package", "Requirement already satisfied: numpy>=1.20", 0, nil, 0},
		{"execute_ipython_cell", "[]", 0, nil, 0},
		{"reset", "", 0, nil, 0},
		{"execute_ipython_cell", "Echo: tools survive a reset", 0, []string{"echo"}, 0},
		{"execute_ipython_cell", "PermissionError", 0, nil, 0},
	}
	if len(want) != len(results) {
		t.Fatalf("SKILL.md has %d examples, the test knows %d: update the test with the skill", len(results)-1, len(want)-1)
	}
	for i, w := range want {
		r := results[i]
		var approved []string
		declined := 0
		for _, e := range r.Elicitations {
			m := regexp.MustCompile(`call the MCP tool (\S+) of server everything`).FindStringSubmatch(e.Message)
			if m == nil {
				t.Errorf("step %d: an elicitation that is not a tool approval: %q", i+1, e.Message)
				continue
			}
			if e.Action == "decline" {
				declined++
			} else {
				approved = append(approved, m[1])
			}
		}
		if r.Tool != w.tool || r.IsError || !strings.Contains(r.Text, w.text) || r.Images != w.images || !slices.Equal(approved, w.approved) || declined != w.declined {
			t.Errorf("step %d (%s): error %v, %d images, approved %v, declined %d, text:\n%s\nwant %s containing %q, %d images, approved %v, declined %d",
				i+1, r.Tool, r.IsError, r.Images, approved, declined, r.Text, w.tool, w.text, w.images, w.approved, w.declined)
		}
	}
	if strings.Contains(results[len(results)-1].Text, "s3cr3t-canary") {
		t.Errorf("the plugin's kernel read the project's .env: it is not sandboxed")
	}
	t.Logf("main example (step 3): %s; approvals asked: %d", results[2].Text, len(results[2].Elicitations))

	readmeClaudeCommands(t, root, home, env, sh, path, claude)
}

// readmeClaudeCommands runs the README's commands for Claude Code without
// the plugin, each in a project of its own, and checks that `claude mcp
// list` shows the server Connected: `claude mcp add ipybox -- ipybox mcp`,
// and the streamable HTTP form with a token header (on a free port rather
// than the README's 8080, which another program may hold).
func readmeClaudeCommands(t *testing.T, root, home string, env []string, sh func(dir, path, name string, args ...string) (string, error), path, claude string) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(readme), "### Claude Code without the plugin")
	section, _, _ = strings.Cut(section, "\n## ")
	var stdio, httpBlock string
	for _, block := range strings.Split(section, "```sh\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if strings.Contains(block, "--transport http") {
			httpBlock = block
			continue
		}
		// The block's uvx line needs PyPI; the one after it runs the
		// ipybox on PATH.
		for _, line := range strings.Split(block, "\n") {
			if stdio == "" && line == "claude mcp add ipybox -- ipybox mcp" {
				stdio = line
			}
		}
	}
	if stdio != "claude mcp add ipybox -- ipybox mcp" || httpBlock == "" {
		t.Fatalf("README's Claude Code section: want `claude mcp add ipybox -- ipybox mcp` and an HTTP block; got %q and %q", stdio, httpBlock)
	}
	connected := func(dir, what string) {
		t.Helper()
		var out string
		for i := 0; i < 10; i++ { // the HTTP server may still be starting
			out, _ = sh(dir, path, claude, "mcp", "list")
			if regexp.MustCompile(`(?m)^ipybox: .*Connected`).MatchString(out) {
				t.Logf("%s, then claude mcp list:\n%s", what, out)
				return
			}
			time.Sleep(time.Second)
		}
		t.Errorf("%s: claude mcp list does not show ipybox Connected:\n%s", what, out)
	}

	dir := filepath.Join(home, "stdio-project")
	os.MkdirAll(dir, 0o755)
	if out, err := sh(dir, path, "sh", "-c", stdio); err != nil {
		t.Fatalf("%s: %v\n%s", stdio, err, out)
	}
	connected(dir, stdio)

	testenv.NeedsTool(t, "openssl")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	script := strings.ReplaceAll(httpBlock, "127.0.0.1:8080", fmt.Sprintf("127.0.0.1:%d", port)) + "echo ipybox-pid=$!\n"
	dir = filepath.Join(home, "http-project")
	os.MkdirAll(dir, 0o755)
	// The server runs on in the background: its output goes to a file,
	// not to a pipe that the wait would hold open.
	logPath := filepath.Join(dir, "commands.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(slices.Clone(env), "PATH="+path)
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Run()
	logf.Close()
	out, _ := os.ReadFile(logPath)
	if m := regexp.MustCompile(`ipybox-pid=(\d+)`).FindSubmatch(out); m != nil {
		pid, _ := strconv.Atoi(string(m[1]))
		t.Cleanup(func() {
			// Wait for it: it writes under the temporary HOME as it ends
			// (the sandbox's workspace lock), which TempDir removes next.
			testenv.Signal(pid, syscall.SIGTERM)
			for deadline := time.Now().Add(10 * time.Second); testenv.Alive(pid) && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
			if testenv.Alive(pid) {
				testenv.Signal(pid, syscall.SIGKILL)
				t.Errorf("the README's HTTP server (pid %d) did not end within 10s of SIGTERM", pid)
			}
		})
	}
	if err != nil {
		t.Fatalf("README's HTTP commands: %v\n%s", err, out)
	}
	connected(dir, "the README's HTTP commands")
}

// skillSteps turns the examples of SKILL.md into the client's steps. The
// register_mcp_server example names server-everything through npx, which
// would fetch it from the registry; offline, the same package comes from
// tools/npm. The error example's call that the user declines is the one
// whose arguments name "deploy to production".
func skillSteps(t *testing.T, skill string, everything map[string]any) []clientStep {
	t.Helper()
	b, err := os.ReadFile(skill)
	if err != nil {
		t.Fatal(err)
	}
	var steps []clientStep
	for _, m := range skillBlock.FindAllStringSubmatch(string(b), -1) {
		kind, body := m[1], m[2]
		if kind == "python" {
			steps = append(steps, clientStep{Tool: "execute_ipython_cell", Args: map[string]any{"code": body}, Decline: `"deploy to production"`})
			continue
		}
		step := clientStep{Tool: strings.TrimPrefix(kind, "json ")}
		if err := json.Unmarshal([]byte(body), &step.Args); err != nil {
			t.Fatalf("SKILL.md: the %s example is not a JSON object: %v\n%s", step.Tool, err, body)
		}
		if step.Tool == "register_mcp_server" {
			params, _ := step.Args["server_params"].(map[string]any)
			args, _ := json.Marshal(params["args"])
			if step.Args["server_name"] != "everything" || params["command"] != "npx" || string(args) != `["-y","@modelcontextprotocol/server-everything"]` {
				t.Fatalf("SKILL.md registers %v; the test expects server-everything through npx", step.Args)
			}
			step.Args["server_params"] = everything
		}
		steps = append(steps, step)
	}
	return steps
}

// copyNPMPackage copies the package name of the node_modules folder nm,
// with every package it depends on (resolved as node does: the nearest
// node_modules upward), to dst/node_modules, and returns the package's
// copy.
func copyNPMPackage(t *testing.T, nm, name, dst string) string {
	t.Helper()
	root := filepath.Dir(nm)
	seen := map[string]bool{}
	var walk func(dir string)
	walk = func(dir string) {
		if seen[dir] {
			return
		}
		seen[dir] = true
		b, err := os.ReadFile(filepath.Join(dir, "package.json"))
		if err != nil {
			t.Fatal(err)
		}
		var pj struct{ Dependencies, OptionalDependencies map[string]string }
		if err := json.Unmarshal(b, &pj); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for _, deps := range []map[string]string{pj.Dependencies, pj.OptionalDependencies} {
			for dep := range deps {
				for d := dir; strings.HasPrefix(d, root); d = filepath.Dir(d) {
					if p := filepath.Join(d, "node_modules", dep); fileExists(filepath.Join(p, "package.json")) {
						walk(p)
						break
					}
				}
			}
		}
	}
	walk(filepath.Join(nm, name))
	for dir := range seen {
		rel, _ := filepath.Rel(root, dir)
		parent := filepath.Join(dst, filepath.Dir(rel))
		if err := os.MkdirAll(parent, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-R", dir, parent+"/").CombinedOutput(); err != nil {
			t.Fatalf("copy %s: %v %s", dir, err, out)
		}
	}
	return filepath.Join(dst, "node_modules", name)
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
