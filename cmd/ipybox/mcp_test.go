package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// mcpWS is a workspace that the tests of this package share, so that its
// virtualenv is made once per test process. TestMain removes it.
var mcpWS struct {
	once sync.Once
	dir  string
	err  error
}

func sharedMCPWorkspace(t *testing.T) string {
	t.Helper()
	testenv.NeedsPython(t)
	mcpWS.once.Do(func() {
		mcpWS.dir, mcpWS.err = os.MkdirTemp("", "ipybox-cmd-mcp-test-")
	})
	if mcpWS.err != nil {
		t.Fatal(mcpWS.err)
	}
	return mcpWS.dir
}

// lockedBuffer is a buffer safe for concurrent writers and readers.
type lockedBuffer = testenv.Buffer

// mcpBinary is `ipybox mcp` running as a process.
type mcpBinary struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	url    string // set in HTTP mode
	token  string // the bearer token clients send (HTTP mode, unless --no-auth)
	exited chan struct{}
	err    error
}

// startHTTP runs `ipybox mcp --http 127.0.0.1:0 args...` and returns it once
// it listens. It is stopped with SIGTERM when t ends.
func startHTTP(t *testing.T, args ...string) *mcpBinary {
	t.Helper()
	var token string
	if !slices.Contains(args, "--no-auth") {
		token = "http-test-token-" + strconv.Itoa(os.Getpid())
		f := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(f, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"--auth-token-file", f}, args...)
	}
	b := startHTTPCmd(t, exec.Command(os.Args[0], append([]string{"mcp", "--http", "127.0.0.1:0"}, args...)...))
	b.token = token
	return b
}

// startHTTPCmd starts cmd, an `ipybox mcp --http` command, with env added,
// and returns it once it listens.
func startHTTPCmd(t *testing.T, cmd *exec.Cmd, env ...string) *mcpBinary {
	t.Helper()
	cmd.Env = append(append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1"), env...)
	b := &mcpBinary{cmd: cmd, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	pr, pw := io.Pipe()
	cmd.Stderr = io.MultiWriter(b.stderr, pw)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		b.err = cmd.Wait()
		pw.Close()
		close(b.exited)
	}()
	t.Cleanup(func() { b.stop(t, syscall.SIGTERM) })
	urlc := testenv.ServingURL(pr)
	select {
	case b.url = <-urlc:
	case <-b.exited:
		t.Fatalf("ipybox mcp exited: %v\n%s", b.err, b.stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("ipybox mcp did not listen within 30s\n%s", b.stderr)
	}
	return b
}

// httpClient sends the server's bearer token.
func (b *mcpBinary) httpClient() *http.Client {
	return &http.Client{Transport: testenv.Bearer{Token: b.token}}
}

// stop signals the process and waits for it (bounded).
func (b *mcpBinary) stop(t *testing.T, sig os.Signal) {
	t.Helper()
	select {
	case <-b.exited:
		return
	default:
	}
	b.cmd.Process.Signal(sig)
	select {
	case <-b.exited:
	case <-time.After(30 * time.Second):
		b.cmd.Process.Kill()
		<-b.exited
		t.Errorf("ipybox mcp did not exit within 30s of %v\n%s", sig, b.stderr)
	}
}

// goClient connects a go-sdk client over tr. Over HTTP it speaks
// 2025-11-25, whose connections have a kernel of their own (2026-07-28's
// session handles are tested in mcpserver, TestHandles, and by the Python
// API's tests); over stdio the go-sdk's latest, 2026-07-28.
func goClient(t *testing.T, tr mcp.Transport, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	var opts *mcp.ClientSessionOptions
	if _, ok := tr.(*mcp.StreamableClientTransport); ok {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, copts)
	cs, err := c.Connect(t.Context(), tr, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callText(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n"), res.IsError
}

func runCell(t *testing.T, cs *mcp.ClientSession, code string) string {
	t.Helper()
	out, isErr := callText(t, cs, "execute_ipython_cell", map[string]any{"code": code})
	if isErr {
		t.Fatalf("cell %q: %s", code, out)
	}
	return out
}

// inspector runs the MCP Inspector's CLI with args and returns its stdout.
func inspector(t *testing.T, args ...string) string {
	t.Helper()
	node := testenv.NPMBin(t, "node")
	insp := testenv.NPMBin(t, "inspector")
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{insp, "--cli"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("inspector %q: %v\nstdout: %s\nstderr: %s", args, err, out.String(), errb.String())
	}
	return out.String()
}

type toolsCallOutput struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	IsError bool `json:"isError"`
	Tools   []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

func checkInspectorOutput(t *testing.T, list, callOut string) {
	t.Helper()
	var l, c toolsCallOutput
	if err := json.Unmarshal([]byte(list), &l); err != nil {
		t.Fatalf("tools/list output: %v\n%s", err, list)
	}
	var names []string
	for _, tool := range l.Tools {
		names = append(names, tool.Name)
	}
	if strings.Join(names, ",") != "close_session,collect_cell,create_session,download_file,execute_ipython_cell,export_notebook,fork_session,install_package,interrupt,list_sessions,register_mcp_server,reset,rewind_session,upload_file" {
		t.Errorf("tools = %v", names)
	}
	if err := json.Unmarshal([]byte(callOut), &c); err != nil {
		t.Fatalf("tools/call output: %v\n%s", err, callOut)
	}
	if c.IsError || len(c.Content) != 1 || c.Content[0].Text != "42" {
		t.Errorf("tools/call = %s", callOut)
	}
}

// TestMCPInspectorStdio drives `ipybox mcp` over stdio with the MCP
// Inspector's CLI.
func TestMCPInspectorStdio(t *testing.T) {
	ws := sharedMCPWorkspace(t)
	cfg := filepath.Join(t.TempDir(), "inspector.json")
	b, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"ipybox": map[string]any{
		"command": os.Args[0],
		"args":    []string{"mcp", "--workspace", ws},
		"env":     map[string]string{"IPYBOX_TEST_AS_MAIN": "1"},
	}}})
	os.WriteFile(cfg, b, 0o600)
	list := inspector(t, "--config", cfg, "--server", "ipybox", "--method", "tools/list")
	out := inspector(t, "--config", cfg, "--server", "ipybox", "--method", "tools/call", "--tool-name", "execute_ipython_cell", "--tool-arg", "code=print(6 * 7)")
	checkInspectorOutput(t, list, out)
}

// TestMCPInspectorHTTP drives `ipybox mcp --http` with the Inspector's CLI.
func TestMCPInspectorHTTP(t *testing.T) {
	ws := sharedMCPWorkspace(t)
	srv := startHTTP(t, "--workspace", ws)
	auth := "Authorization: Bearer " + srv.token
	list := inspector(t, srv.url, "--transport", "http", "--header", auth, "--method", "tools/list")
	out := inspector(t, srv.url, "--transport", "http", "--header", auth, "--method", "tools/call", "--tool-name", "execute_ipython_cell", "--tool-arg", "code=print(6 * 7)")
	checkInspectorOutput(t, list, out)
}

// TestMCPConformance runs the MCP conformance suite's server scenarios
// against `ipybox mcp --http`, with the committed baseline of expected
// failures (fixture-specific scenarios; see the file for why).
func TestMCPConformance(t *testing.T) {
	ws := sharedMCPWorkspace(t)
	node := testenv.NPMBin(t, "node")
	conf := testenv.NPMBin(t, "conformance")
	// The suite sends no credentials: the loopback server runs with the
	// explicit --no-auth.
	srv := startHTTP(t, "--workspace", ws, "--no-auth")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	baseline, _ := filepath.Abs(filepath.Join("testdata", "conformance-baseline.yml"))
	// Twice against the same server: the suite never closes its
	// sessions, and they must cost no kernel (issue 25: one run left 33
	// kernels, and the next failed seven scenarios).
	for i := range 2 {
		cmd := exec.CommandContext(ctx, node, conf, "server", "--url", srv.url, "--expected-failures", baseline, "-o", t.TempDir())
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		summary := out.String()
		if i := strings.Index(summary, "=== SUMMARY ==="); i >= 0 {
			summary = summary[i:]
		}
		if err != nil {
			t.Fatalf("conformance suite, run %d: %v\n%s", i+1, err, summary)
		}
		for _, s := range []string{"server-initialize", "ping", "tools-list", "logging-set-level", "dns-rebinding-protection"} {
			if !regexp.MustCompile(`✓ ` + s + `: \d+ passed, 0 failed`).MatchString(summary) {
				t.Errorf("scenario %s did not pass:\n%s", s, summary)
			}
		}
		// The warm pool's one kernel (--pool 1), and none for the
		// sessions.
		if k := kernelProcs(srv.cmd.Process.Pid); len(k) > 1 {
			t.Errorf("after run %d of the suite, the server has %d kernel processes; want at most the pool's one", i+1, len(k))
		}
		t.Logf("run %d:\n%s", i+1, summary)
	}
	conformance2026(t, ctx, node, srv.url)
}

// conformance2026 runs the suite's 0.2.0-alpha.12 (tools/npm's
// conformance-2026) with --requirements 2026-07-28, and checks that
// server-stateless, a baseline entry, fails only its four checks that
// need the suite's fixture tools.
func conformance2026(t *testing.T, ctx context.Context, node, url string) {
	conf := filepath.Join(testenv.RepoRoot(t), "tools", "npm", "node_modules", "conformance-2026", "dist", "index.js")
	if _, err := os.Stat(conf); err != nil {
		testenv.Missing(t, "%s not installed; run scripts/setup.sh", conf)
	}
	baseline, _ := filepath.Abs(filepath.Join("testdata", "conformance-baseline-2026.yml"))
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, node, conf, "server", "--url", url, "--requirements", "2026-07-28", "--expected-failures", baseline, "-o", dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	summary := out.String()
	if i := strings.Index(summary, "=== SUMMARY ==="); i >= 0 {
		summary = summary[i:]
	}
	if err != nil {
		t.Fatalf("conformance suite 2026-07-28: %v\n%s", err, summary)
	}
	t.Logf("2026-07-28:\n%s", summary)
	files, _ := filepath.Glob(filepath.Join(dir, "server-server-stateless-*", "checks.json"))
	if len(files) != 1 {
		t.Fatalf("server-stateless's checks: %v", files)
	}
	b, _ := os.ReadFile(files[0])
	var checks []struct{ ID, Status, ErrorMessage string }
	if err := json.Unmarshal(b, &checks); err != nil {
		t.Fatal(err)
	}
	fixture := map[string]bool{"sep-2575-server-rejects-undeclared-capability": true, "sep-2575-missing-capability-http-400": true,
		"sep-2575-http-server-no-independent-requests-on-stream": true, "sep-2575-server-no-log-without-loglevel": true}
	passed := false
	for _, c := range checks {
		if c.Status == "FAILURE" && !fixture[c.ID] {
			t.Errorf("server-stateless: %s failed: %s", c.ID, c.ErrorMessage)
		}
		passed = passed || c.ID == "sep-2575-server-declares-prompts-in-discover" && c.Status == "SUCCESS"
	}
	if !passed {
		t.Errorf("server-stateless: sep-2575-server-declares-prompts-in-discover did not pass")
	}
	tasksChecks(t, dir)
}

// tasksChecks checks that the tasks scenarios (baseline entries: most of
// their checks call the suite's fixture tools) pass every check that
// needs no fixture: the extension is declared, its methods are refused
// to a client that did not declare it (-32021), the removed tasks/result
// and tasks/list are -32601, an unknown taskId is -32602, and the answers
// fit the suite's schema. mcpserver's TestTasksConformanceFixtures runs
// the rest against fixture tools that run cells.
func tasksChecks(t *testing.T, dir string) {
	t.Helper()
	want := map[string][]string{
		"tasks-capability-negotiation": {"tasks-extension-advertised", "sep-2663-tasks-methods-non-declaring", "wire-schema-valid"},
		"tasks-dispatch-and-envelope": {"sep-2663-tasks-result-removed-method-not-found", "tasks-removed-tasks-list",
			"sep-2663-tasks-get-invalid-task-id-32602", "wire-schema-valid"},
		"tasks-request-headers": {"tasks-headers-reject-mismatched-method", "wire-schema-valid"},
		"tasks-lifecycle":       {"wire-schema-valid"},
	}
	for scenario, ids := range want {
		files, _ := filepath.Glob(filepath.Join(dir, "server-"+scenario+"-*", "checks.json"))
		if len(files) != 1 {
			t.Errorf("%s's checks: %v", scenario, files)
			continue
		}
		b, _ := os.ReadFile(files[0])
		var checks []struct{ ID, Status, ErrorMessage string }
		if err := json.Unmarshal(b, &checks); err != nil {
			t.Fatal(err)
		}
		status := map[string]string{}
		for _, c := range checks {
			status[c.ID] = c.Status + " " + c.ErrorMessage
		}
		for _, id := range ids {
			if got := status[id]; got != "SUCCESS " {
				t.Errorf("%s: check %s: %q, want SUCCESS", scenario, id, got)
			}
		}
	}
}

// kernelProcs returns the kernel processes below pid: ipykernel started
// with its connection file, cold or in a sandbox.
func kernelProcs(pid int) []int {
	var out []int
	for _, p := range testenv.Descendants(pid) {
		if strings.Contains(p.Cmdline, "kernel.json") && !strings.Contains(p.Cmdline, "bwrap") {
			out = append(out, p.Pid)
		}
	}
	return out
}

// TestMCPBinarySession runs a session through the binary over stdio: the
// workspace's .env, --kernel-env, --mcp-config, and registrations that
// persist across a restart.
func TestMCPBinarySession(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, ".env"), []byte("KERNEL_ENV_IPYBOX_X=from-dotenv\nPLAIN_DOTENV_Y=secret\nGO_ARG=from-dotenv-arg\n"), 0o600)
	testmcp := mcptest.Build(t)
	cfg := writeMCPConfig(t, map[string]any{"startgo": map[string]any{"command": testmcp}})
	start := func(args ...string) (*mcp.ClientSession, *lockedBuffer) {
		// The test registers its Go server, built outside the workspace,
		// through the tool: on the host, as the operator allows.
		cmd := exec.Command(os.Args[0], append([]string{"mcp", "--workspace", ws, "--log-level", "debug", "--allow-host-servers"}, args...)...)
		cmd.Env = append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1", "PLAIN_HOST_Z=host")
		stderr := &lockedBuffer{}
		cmd.Stderr = stderr
		return goClient(t, &mcp.CommandTransport{Command: cmd}, nil), stderr
	}
	cs, stderr := start("--mcp-config", cfg, "--kernel-env", "IPYBOX_K=flag")
	got := runCell(t, cs, "import os\nprint(os.environ.get('IPYBOX_X'), os.environ.get('PLAIN_DOTENV_Y'), os.environ.get('KERNEL_ENV_IPYBOX_X'), os.environ.get('PLAIN_HOST_Z'), os.environ.get('IPYBOX_K'))")
	if got != "from-dotenv None None None flag" {
		t.Errorf("kernel environment: %q", got)
	}
	// Writes to the kernel's own file descriptors do not reach the
	// protocol's standard output.
	runCell(t, cs, "import os, sys\nos.system('echo to-fd-1; echo to-fd-2 >&2')\nsys.__stdout__.write('raw\\n'); sys.__stdout__.flush()")
	// ipykernel forwards what reaches fd 1 from a thread of its own, so
	// under load those lines may come after the cell's end, with the next
	// cell's output: that is all that may precede the tool's answer.
	got = runCell(t, cs, "from mcptools.startgo.tool_1 import Params, run\nprint(run(Params(s='cfg')))")
	stray, ok := strings.CutSuffix(got, "tool-1: cfg")
	for _, line := range strings.Split(strings.TrimSpace(stray), "\n") {
		ok = ok && (line == "" || line == "to-fd-1" || line == "raw")
	}
	if !ok {
		t.Errorf("server from --mcp-config: %q", got)
	}
	// ${VAR} from .env in a registered server's config: filled under
	// --allow-host-servers, which trusts clients as the operator.
	out, isErr := callText(t, cs, "register_mcp_server", map[string]any{"server_name": "later", "server_params": map[string]any{
		"command": testmcp, "env": map[string]string{"FROM_DOTENV": "${GO_ARG}"},
	}})
	if isErr || !strings.Contains(out, "from mcptools.later.env import Params, run  # run(") {
		t.Fatalf("register: %s", out)
	}
	if got := runCell(t, cs, "from mcptools.later.env import Params, run\nprint(run(Params(name='FROM_DOTENV')))"); got != "from-dotenv-arg" {
		t.Errorf("${GO_ARG} from .env: %q", got)
	}
	cs.Close()
	if !strings.Contains(stderr.String(), "kernel started") {
		t.Errorf("no logs on stderr:\n%s", stderr)
	}
	// A restart without --mcp-config: both registrations persist.
	cs, _ = start()
	if got := runCell(t, cs, "from mcptools.startgo.tool_1 import Params, run\nfrom mcptools.later import env\nprint(run(Params(s='again')), env.run(env.Params(name='FROM_DOTENV')))"); got != "tool-1: again from-dotenv-arg" {
		t.Errorf("after a restart: %q", got)
	}
}

func checkGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []int
		for _, p := range pids {
			if testenv.Alive(p) {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, p := range left {
				b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
				t.Errorf("process %d left behind: %s", p, strings.ReplaceAll(string(b), "\x00", " "))
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMCPShutdown sends SIGTERM (HTTP) and SIGINT (stdio) to a server with
// running kernels and MCP servers, and checks that it exits cleanly and
// leaves no process behind.
func TestMCPShutdown(t *testing.T) {
	ws := sharedMCPWorkspace(t)
	cfg := writeMCPConfig(t, map[string]any{"downgo": map[string]any{"command": mcptest.Build(t)}})
	code := "from mcptools.downgo.pid import Params, run\nprint(run(Params()))"

	t.Run("http SIGTERM", func(t *testing.T) {
		srv := startHTTP(t, "--workspace", ws, "--mcp-config", cfg)
		var sessions []*mcp.ClientSession
		for range 2 {
			cs := goClient(t, &mcp.StreamableClientTransport{Endpoint: srv.url, DisableStandaloneSSE: true, HTTPClient: srv.httpClient()}, nil)
			runCell(t, cs, code)
			sessions = append(sessions, cs)
		}
		// A cell still running when the signal comes: it makes a file, then
		// sleeps.
		running := filepath.Join(ws, fmt.Sprintf(".running-%d", time.Now().UnixNano()))
		t.Cleanup(func() { os.Remove(running) })
		go sessions[0].CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_ipython_cell", Arguments: map[string]any{"code": fmt.Sprintf("import time; open(%q, 'w').close(); time.sleep(60)", running)}})
		testenv.WaitFile(t, running, 30*time.Second)
		procs := descendants(srv.cmd.Process.Pid)
		if len(procs) < 4 {
			t.Fatalf("want 2 kernels and 2 MCP servers, got processes %v", procs)
		}
		t0 := time.Now()
		srv.stop(t, syscall.SIGTERM)
		if srv.cmd.ProcessState.ExitCode() != 0 {
			t.Errorf("exit code %d\n%s", srv.cmd.ProcessState.ExitCode(), srv.stderr)
		}
		t.Logf("exited %v after SIGTERM", time.Since(t0).Round(time.Millisecond))
		checkGone(t, procs)
	})

	t.Run("stdio SIGINT", func(t *testing.T) {
		cmd := exec.Command(os.Args[0], "mcp", "--workspace", ws, "--mcp-config", cfg)
		cmd.Env = append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1")
		cs := goClient(t, &mcp.CommandTransport{Command: cmd}, nil)
		runCell(t, cs, code)
		procs := descendants(cmd.Process.Pid)
		if len(procs) < 2 {
			t.Fatalf("want a kernel and an MCP server, got processes %v", procs)
		}
		cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { cs.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the stdio server did not exit after SIGINT")
		}
		checkGone(t, procs)
	})
}

func TestMCPUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mcp", "--http", ":8080"}, "implicitly binds all interfaces"},
		{[]string{"mcp", "--http", "0.0.0.0:8080", "--no-auth"}, "without a bearer token is refused"},
		{[]string{"mcp", "--http", "127.0.0.1:0", "--auth-token", "secret"}, "--auth-token-file"},
		{[]string{"mcp", "--auth-token-file", "/x"}, "stdio needs no token"},
		{[]string{"mcp", "--no-auth"}, "stdio needs no token"},
		{[]string{"mcp", "--http", "127.0.0.1:0", "--no-auth", "--auth-token-file", "/x"}, "contradicts"},
		{[]string{"mcp", "--http", "127.0.0.1:0", "--auth-token-file", "/nonexistent/token"}, "--auth-token-file"},
		{[]string{"mcp", "--approval", "sometimes"}, `--approval "sometimes"`},
		{[]string{"mcp", "--allow-tool", "fs.*"}, "only matters with --approval elicit"},
		{[]string{"mcp", "--approval", "elicit", "--allow-tool", "fs"}, "SERVER.TOOL"},
		{[]string{"mcp", "--bind", "nocolon"}, "HOST_PATH:RELPATH"},
		{[]string{"mcp", "--container-bind", "nocolon"}, "want HOST:REL"},
		{[]string{"mcp", "--container-bind", "/tmp/x:/abs"}, "must be relative"},
		{[]string{"mcp", "--container-bind", "/tmp/x:../up"}, "stay under /app/"},
		{[]string{"mcp", "--container-bind", "/tmp/x:workspace/x"}, "is the workspace"},
		{[]string{"mcp", "--container-env-var", "NOVALUE"}, "KEY=VALUE"},
		{[]string{"mcp", "--container-tag", "x", "--bind", "/tmp:tmp"}, "use --container-bind"},
		{[]string{"mcp", "--container-tag", "x", "--sandbox"}, "contradict --container-*"},
		{[]string{"mcp", "--container-tag", "x", "--allowed-domain", "10.0.0.1/8"}, "write 10.0.0.0/8"},
		{[]string{"mcp", "--container-tag", "x", "--pids", "3"}, "too small for a kernel"},
		{[]string{"exec", "--container-tag", "x", "--memory", "1m", "-c", "1"}, "too small for Python"},
		{[]string{"mcp", "--kernel-env", "NOVALUE"}, "KEY=VALUE"},
		{[]string{"mcp", "--container-env-file", "/nonexistent/.env"}, "--container-env-file"},
		{[]string{"mcp", "--workspace", "/dev/null"}, "not a directory"},
		{[]string{"mcp", "--workspace", "/dev/null/ws"}, "--workspace: "},
		{[]string{"mcp", "extra"}, `unexpected argument "extra"`},
		{[]string{"mcp", "--no-sandbox", "--sandbox"}, "--no-sandbox contradicts"},
		{[]string{"mcp", "--no-sandbox", "--sandbox-fork-server"}, "drop --sandbox-fork-server"},
		{[]string{"mcp", "--container-tag", "x", "--sandbox-fork-server"}, "a container runs its image's python3"},
		{[]string{"mcp", "--gateway-url", "http://127.0.0.1:1", "--sandbox-fork-server"}, "gateway kernels start on the gateway"},
		{[]string{"mcp", "--no-fork-server", "--sandbox-fork-server"}, "drop one of them"},
		{[]string{"mcp", "--sandbox-fork-server=maybe"}, "want true or false"},
		{[]string{"mcp", "--no-sandbox", "--allowed-domain", "pypi.org"}, "--no-sandbox contradicts"},
		{[]string{"mcp", "--no-sandbox", "--memory", "1g"}, "mean nothing with --no-sandbox"},
		{[]string{"mcp", "--memory", "1m"}, "too small for Python"},
		{[]string{"mcp", "--memory", "lots"}, `--memory: size "lots"`},
		{[]string{"mcp", "--pids", "3"}, "too small for a kernel"},
		{[]string{"exec", "--memory", "1g", "-c", "1"}, "add --sandbox"},
	} {
		var out bytes.Buffer
		env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &out, getenv: func(string) string { return "" }}
		if code := run(t.Context(), env, tc.args); code != exitUsage {
			t.Errorf("%q: exit %d, want %d (%s)", tc.args, code, exitUsage, out.String())
		}
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("%q: %q does not mention %q", tc.args, out.String(), tc.want)
		}
	}
}

// descendants returns the pids of every live process below pid.
func descendants(pid int) []int {
	var out []int
	for _, p := range testenv.Descendants(pid) {
		out = append(out, p.Pid)
	}
	return out
}

// TestMCPAddressInUse: --http on a port that another server holds fails
// at once, with the port's owner to look up and another port to use.
func TestMCPAddressInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(port)
	_, stderr, code := runBinary(t, "", "mcp", "--http", addr, "--no-sandbox", "--pool", "0", "--workspace", t.TempDir())
	want := fmt.Sprintf("ipybox mcp: --http %s: the address is in use, by another ipybox mcp or another server (`ss -ltnp 'sport = :%s'` shows which); stop it, or choose another port, as in --http 127.0.0.1:%d\n", addr, port, n+1)
	if code != exitFail || !strings.HasSuffix(stderr, want) {
		t.Errorf("exit %d, stderr %q\nwant it to end with %q", code, stderr, want)
	}
}
