package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

func writeMCPConfig(t *testing.T, servers map[string]any) string {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"mcpServers": servers})
	p := filepath.Join(t.TempDir(), "mcp.json")
	os.WriteFile(p, b, 0o600)
	return p
}

func TestExecWithMCPConfig(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	cfg := writeMCPConfig(t, map[string]any{"go": map[string]any{"command": mcptest.Build(t)}})
	code := "from mcptools.go.tool_1 import Params, run\nprint(run(Params(s='cli')))"
	out, errOut, rc := runBinary(t, "", "exec", "--workspace", t.TempDir(), "--mcp-config", cfg, "-c", code)
	if rc != 0 || out != "tool-1: cli\n" {
		t.Errorf("auto: exit %d, stdout %q, stderr %q", rc, out, errOut)
	}
	out, errOut, rc = runBinary(t, "", "exec", "--workspace", t.TempDir(), "--mcp-config", cfg, "--approval", "reject", "-c", code)
	if rc != 1 || !strings.Contains(errOut, "ApprovalRejectedError") || !strings.Contains(errOut, "--approval reject") {
		t.Errorf("reject: exit %d, stdout %q, stderr %q", rc, out, errOut)
	}
	// Prompt without a terminal (the test binary has none): rejected.
	out, errOut, rc = runBinary(t, "", "exec", "--workspace", t.TempDir(), "--mcp-config", cfg, "--approval", "prompt", "--json", "-c", code)
	if rc != 1 || !strings.Contains(out, `"type":"approval"`) || !strings.Contains(out, "no terminal") {
		t.Errorf("prompt without a terminal: exit %d, stdout %q, stderr %q", rc, out, errOut)
	}
	// Shell approval.
	out, errOut, rc = runBinary(t, "", "exec", "--approve-shell", "--approval", "reject", "-c", "!echo never")
	if rc != 1 || strings.Contains(out, "never") || !strings.Contains(errOut, "ApprovalRejectedError") {
		t.Errorf("--approve-shell: exit %d, stdout %q, stderr %q", rc, out, errOut)
	}
}

func TestExecMCPConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ content, want string }{
		{`{}`, `no "mcpServers" object`},
		{`{"mcpServers": {"bad-name": {"command": "x"}}}`, `"bad-name"`},
		{`{"mcpServers": {"s": {}}}`, `command`},
		{`{"mcpServers": {"s": {"command": "x", "url": "http://h"}}}`, `both`},
		{`not json`, `want {"mcpServers"`},
	} {
		p := filepath.Join(t.TempDir(), "c.json")
		os.WriteFile(p, []byte(tc.content), 0o600)
		var out bytes.Buffer
		env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &out, getenv: os.Getenv}
		if rc := run(t.Context(), env, []string{"exec", "--mcp-config", p, "-c", "1"}); rc != exitUsage {
			t.Errorf("%s: exit %d", tc.content, rc)
		}
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("%s: %q does not mention %q", tc.content, out.String(), tc.want)
		}
		if strings.Count(out.String(), tc.want) > 1 || strings.Contains(out.String(), "pygen:") {
			t.Errorf("%s: %q stutters", tc.content, out.String())
		}
	}
}

// fakeTTY is a terminal whose input is fixed.
type fakeTTY struct {
	io.Reader
	out bytes.Buffer
}

func (f *fakeTTY) Write(p []byte) (int, error) { return f.out.Write(p) }
func (f *fakeTTY) Close() error                { return nil }

func TestPromptDecider(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		answer string
		accept bool
	}{{"y\n", true}, {"yes\n", true}, {"n\n", false}, {"\n", false}, {"", false}} {
		tty := &fakeTTY{Reader: strings.NewReader(tc.answer)}
		d := newDecider(approvalPrompt)
		d.openTTY = func() (io.ReadWriteCloser, error) { return tty, nil }
		req, decided := newTestRequest(t)
		d.decide(req)
		if got := decided(); got != tc.accept {
			t.Errorf("answer %q: accepted = %v", tc.answer, got)
		}
		if !strings.Contains(tty.out.String(), "server: go") || !strings.Contains(tty.out.String(), `"s": "x"`) {
			t.Errorf("prompt does not show the call: %q", tty.out.String())
		}
	}
}

// newTestRequest returns a real approval request from a running cell (an
// ApprovalRequest's decision channel belongs to the ipybox package) and a
// function that reports whether the cell succeeded, that is, whether the
// request was accepted.
func newTestRequest(t *testing.T) (*ipybox.ApprovalRequest, func() bool) {
	t.Helper()
	ex := sharedExecutor(t)
	ch := make(chan *ipybox.ApprovalRequest, 1)
	done := make(chan bool, 1)
	go func() {
		ok := true
		for ev, err := range ex.Stream(t.Context(), "from mcptools.go.tool_1 import Params, run\nrun(Params(s='x'))", nil) {
			if r, isReq := ev.(*ipybox.ApprovalRequest); isReq {
				ch <- r
			}
			if err != nil {
				ok = false
			}
		}
		done <- ok
	}()
	return <-ch, func() bool { return <-done }
}

var shared *ipybox.Executor

func sharedExecutor(t *testing.T) *ipybox.Executor {
	t.Helper()
	if shared != nil {
		return shared
	}
	py := testenv.NeedsPython(t)
	ex, err := ipybox.Start(t.Context(), &ipybox.Options{Python: py, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ex.RegisterMCPServer(t.Context(), "go", ipybox.ServerConfig{Command: mcptest.Build(t)}); err != nil {
		t.Fatal(err)
	}
	shared = ex
	t.Cleanup(func() { ex.Close(); shared = nil })
	return ex
}

func TestApigen(t *testing.T) {
	t.Parallel()
	bin := mcptest.Build(t)
	out := filepath.Join(t.TempDir(), "tools")
	server, _ := json.Marshal(map[string]any{"command": bin})
	stdout, stderr, rc := runBinary(t, "", "apigen", "--name", "go", "--server", string(server), "--out", out)
	if rc != 0 {
		t.Fatalf("exit %d: %s", rc, stderr)
	}
	mods := strings.Fields(stdout)
	for _, want := range []string{"tool_1", "tool_2", "tool_3"} {
		found := false
		for _, m := range mods {
			found = found || m == want
		}
		if !found {
			t.Errorf("modules %v lack %s", mods, want)
		}
		if _, err := os.Stat(filepath.Join(out, "go", want+".py")); err != nil {
			t.Error(err)
		}
	}
	// The config from standard input.
	stdout, stderr, rc = runBinary(t, string(server), "apigen", "--name", "go_stdin", "--server", "-", "--out", out)
	if rc != 0 || !strings.Contains(stdout, "tool_1\n") {
		t.Fatalf("--server -: exit %d, stdout %q, stderr %q", rc, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "go_stdin", "tool_1.py")); err != nil {
		t.Error(err)
	}
	_, stderr, rc = runBinary(t, strings.Repeat(" ", maxServerConfig+1), "apigen", "--name", "big", "--server", "-", "--out", out)
	if rc != exitUsage || !strings.Contains(stderr, "over 1048576 bytes") {
		t.Errorf("oversized --server -: exit %d, stderr %q", rc, stderr)
	}
	for _, tc := range []struct {
		args []string
		rc   int
		want string
	}{
		{[]string{"apigen", "--name", "go"}, exitUsage, "--name and --server are required"},
		{[]string{"apigen", "--name", "../x", "--server", string(server), "--out", out}, exitFail, "../x"},
		{[]string{"apigen", "--name", "ok", "--server", `{"command": "/nonexistent"}`, "--out", out}, exitFail, "/nonexistent"},
		{[]string{"apigen", "--name", "ok", "--server", `{"nope": 1}`}, exitUsage, "nope"},
	} {
		_, stderr, rc := runBinary(t, "", tc.args...)
		if rc != tc.rc || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q (want %d, %q)", tc.args, rc, stderr, tc.rc, tc.want)
		}
	}
}

func TestExecSandbox(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	out, errOut, rc := runBinary(t, "", "exec", "--sandbox", "--workspace", ws, "-c",
		"import os\nprint(os.path.exists('/home'), b'__sandbox-init' in open('/proc/1/cmdline', 'rb').read())")
	if rc != 0 || out != "False True\n" {
		t.Errorf("--sandbox: exit %d, stdout %q, stderr %q", rc, out, errOut)
	}
	// Bad settings are usage errors that name the problem.
	bad := filepath.Join(t.TempDir(), "srt.json")
	os.WriteFile(bad, []byte(`{"rootMode": "everything"}`), 0o600)
	_, errOut, rc = runBinary(t, "", "exec", "--sandbox-config", bad, "-c", "1")
	if rc != exitUsage || !strings.Contains(errOut, "everything") {
		t.Errorf("bad --sandbox-config: exit %d, stderr %q", rc, errOut)
	}
	_, errOut, rc = runBinary(t, "", "exec", "--allowed-domain", "http://x/y", "-c", "1")
	if rc != exitUsage || !strings.Contains(errOut, "http://x/y") {
		t.Errorf("bad --allowed-domain: exit %d, stderr %q", rc, errOut)
	}
}

func TestMCPSandboxFailsClosedAtStart(t *testing.T) {
	t.Parallel()
	for _, flag := range []string{"--sandbox", "--allowed-domain=example.com"} {
		cmd := exec.Command(os.Args[0], "mcp", "--workspace", t.TempDir(), flag)
		cmd.Env = append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1", "PATH="+t.TempDir())
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != exitFail || !strings.Contains(string(out), "bubblewrap") {
			t.Errorf("mcp %s without bwrap: %v\n%s", flag, err, out)
		}
	}
}
