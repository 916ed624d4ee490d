package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/policy"
	"github.com/ipybox/ipybox/internal/testenv"
)

// runCLI runs the CLI in process and returns its output and exit code.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: os.Getenv}
	code := run(t.Context(), env, args)
	return out.String(), errb.String(), code
}

// TestMalformedPolicyFailsAtStart: exec and mcp refuse a malformed policy
// before starting anything, naming the file and the line.
func TestMalformedPolicyFailsAtStart(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "approvals.policy")
	os.WriteFile(p, []byte("allow tool a.b\n\nalow shell ls\n"), 0o600)
	for _, args := range [][]string{
		{"exec", "--approval-policy", p, "-c", "1"},
		{"mcp", "--no-sandbox", "--workspace", t.TempDir(), "--approval-policy", p},
	} {
		_, errOut, code := runCLI(t, args...)
		if code != exitUsage || !strings.Contains(errOut, p+":3: ") || !strings.Contains(errOut, `"alow"`) {
			t.Errorf("%s: exit %d, stderr %q", args[0], code, errOut)
		}
	}
}

// TestApprovalsCommand: exec decides by the policy and logs; approvals
// lists the rules, prints the log and revokes.
func TestApprovalsCommand(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	dir := t.TempDir()
	pol, logf := filepath.Join(dir, "approvals.policy"), filepath.Join(dir, "approvals.jsonl")
	os.WriteFile(pol, []byte("allow tool go.tool-1 s=ok*\ndeny tool go.tool-1 s=no*\nallow shell echo hi\n"), 0o600)
	cfg := writeMCPConfig(t, map[string]any{"go": map[string]any{"command": mcptest.Build(t)}})
	code := `
from mcptools.go.tool_1 import Params, run
import ipybox_runtime
for s in ['ok 1', 'no 2', 'other']:
    try:
        print(run(Params(s=s)))
    except ipybox_runtime.ToolRunnerError as e:
        print(type(e).__name__)
get_ipython().system('echo hi')
`
	out, errOut, rc := runBinary(t, "", "exec", "--workspace", t.TempDir(), "--mcp-config", cfg, "--approval", "reject",
		"--approval-policy", pol, "--approval-log", logf, "-c", code)
	if out = strings.ReplaceAll(out, "\r", ""); rc != 0 || out != "tool-1: ok 1\nApprovalRejectedError\nApprovalRejectedError\nhi\n" {
		t.Fatalf("exec: exit %d, stdout %q, stderr %q", rc, out, errOut)
	}
	out, _, rc = runCLI(t, "approvals", "log", "--approval-log", logf)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if rc != 0 || len(lines) != 4 {
		t.Fatalf("log: exit %d:\n%s", rc, out)
	}
	for i, w := range []string{"allow     tool go.tool-1", "deny      tool go.tool-1 {\"s\":\"no 2\"}  by rule", "deny      tool go.tool-1 {\"s\":\"other\"}  by default through --approval reject", "allow     shell echo hi  by rule"} {
		if !strings.Contains(lines[i], w) {
			t.Errorf("log line %d: %q lacks %q", i+1, lines[i], w)
		}
	}
	out, _, rc = runCLI(t, "approvals", "rules", "--approval-policy", pol)
	if rc != 0 || !strings.Contains(out, "3 rules") || !strings.Contains(out, "deny tool go.tool-1 s=no*") {
		t.Fatalf("rules: exit %d:\n%s", rc, out)
	}
	rs, _ := policy.Parse(pol, []byte("deny tool go.tool-1 s=no*\n"))
	id := rs.All()[0].ID
	out, errOut, rc = runCLI(t, "approvals", "revoke", "--approval-policy", pol, id)
	if rc != 0 || !strings.Contains(out, "revoked "+id+" (line 2)") {
		t.Fatalf("revoke: exit %d, %q %q", rc, out, errOut)
	}
	out, _, _ = runCLI(t, "approvals", "rules", "--approval-policy", pol)
	if !strings.Contains(out, "2 rules") || strings.Contains(out, "s=no*") {
		t.Errorf("rules after the revoke:\n%s", out)
	}
	if _, errOut, rc := runCLI(t, "approvals", "revoke", "--approval-policy", pol, "ffffffff"); rc != exitFail || !strings.Contains(errOut, "no rule") {
		t.Errorf("revoke of nothing: exit %d, %q", rc, errOut)
	}
}

// TestRevokeReachesRunningExec: `ipybox approvals revoke` in another
// process takes effect in a running exec within a second.
func TestRevokeReachesRunningExec(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	dir := t.TempDir()
	pol := filepath.Join(dir, "approvals.policy")
	os.WriteFile(pol, []byte("allow tool go.tool-1\n"), 0o600)
	cfg := writeMCPConfig(t, map[string]any{"go": map[string]any{"command": mcptest.Build(t)}})
	code := `
from mcptools.go.tool_1 import Params, run
import ipybox_runtime, time
n = 0
while n < 3000:
    try:
        run(Params(s='x'))
    except ipybox_runtime.ToolRunnerError as e:
        print("refused", time.time(), flush=True)
        break
    n += 1
    if n == 5:
        print("running", flush=True)
    time.sleep(0.01)
`
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "exec", "--workspace", t.TempDir(), "--mcp-config", cfg, "--approval", "reject",
		"--approval-policy", pol, "--approval-log", "none", "-c", code)
	cmd.Env = append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	sc := bufio.NewScanner(stdout)
	var revoked time.Time
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "running" && revoked.IsZero():
			revoked = time.Now()
			if out, errOut, rc := runCLI(t, "approvals", "revoke", "--approval-policy", pol, "1"); rc != 0 {
				t.Fatalf("revoke: %q %q", out, errOut)
			}
		case strings.HasPrefix(line, "refused "):
			var at float64
			json.Unmarshal([]byte(strings.TrimPrefix(line, "refused ")), &at)
			d := time.Unix(0, int64(at*1e9)).Sub(revoked)
			t.Logf("the revoke reached the running exec after %v", d)
			if revoked.IsZero() || d > time.Second {
				t.Errorf("refused %v after the revoke", d)
			}
			io.Copy(io.Discard, stdout)
			return
		}
	}
	t.Fatalf("the calls were never refused; stderr:\n%s", stderr.String())
}

// TestPromptRemembers: the terminal prompt offers once, session and
// always, shows why it asks and what it would remember, and an edited
// rule widens the answer.
func TestPromptRemembers(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	dir := t.TempDir()
	pol := filepath.Join(dir, "approvals.policy")
	p, err := ipybox.LoadApprovalPolicy(pol, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ex, err := ipybox.Start(t.Context(), &ipybox.Options{Python: py, WorkDir: t.TempDir(), ApprovalPolicy: p, ApproveShellCommands: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	answers := map[string]string{
		"echo a": "s\n",                    // yes, for this session
		"echo b": "e\nshell echo b *\na\n", // widened, always
		"echo c": "na\n",                   // no, always
		"echo d": "e\nshell ls\na\ny\n",    // a rule that does not match: asked again, then yes once
		"echo e": "e\nshell echo e\nzz\n",  // an unknown answer is no
	}
	var shown []string
	d := newDecider(approvalPrompt)
	code := `
for c in ['echo a', 'echo a', 'echo b', 'echo b x', 'echo c', 'echo c', 'echo d', 'echo e']:
    try:
        get_ipython().system(c)
    except Exception as e:
        print(type(e).__name__)
`
	var asked []string
	var text string
	for ev, err := range ex.Stream(t.Context(), code, nil) {
		if err != nil {
			t.Fatal(err)
		}
		switch ev := ev.(type) {
		case *ipybox.ApprovalRequest:
			asked = append(asked, ev.Command)
			tty := &fakeTTY{Reader: strings.NewReader(answers[ev.Command])}
			d.openTTY = func() (io.ReadWriteCloser, error) { return tty, nil }
			d.decide(ev)
			shown = append(shown, tty.out.String())
		case *ipybox.Result:
			text = strings.ReplaceAll(ev.Text, "\r", "") // the shell's output comes through a terminal
		}
	}
	if got := strings.Join(asked, "|"); got != "echo a|echo b|echo c|echo d|echo e" {
		t.Errorf("asked %q", got)
	}
	if strings.Count(text, "ApprovalRejectedError") != 3 || !strings.Contains(text, "b x") || !strings.Contains(text, "\nd\n") {
		t.Errorf("output:\n%s", text)
	}
	first := shown[0]
	for _, w := range []string{"why: no rule matched", "remember as: shell echo a", "s  = yes, for this session", "a  = yes, always", "na = no, always", "[y/s/a/N/ns/na/e]"} {
		if !strings.Contains(first, w) {
			t.Errorf("the prompt lacks %q:\n%s", w, first)
		}
	}
	if !strings.Contains(shown[3], "does not match the call") {
		t.Errorf("a rule that does not match is not explained:\n%s", shown[3])
	}
	b, _ := os.ReadFile(pol)
	for _, w := range []string{"allow shell echo b *", "deny shell echo c", "by person through terminal prompt"} {
		if !strings.Contains(string(b), w) {
			t.Errorf("the policy lacks %q:\n%s", w, b)
		}
	}
	if strings.Contains(string(b), "echo a") || strings.Contains(string(b), "shell ls") {
		t.Errorf("the policy holds a session answer or a rejected rule:\n%s", b)
	}
}

// TestExecConfigOnWrite: an unsandboxed `ipybox exec` that decides
// nothing leaves no ~/.config/ipybox (it made an empty policy and log
// there on first use); its first decision creates the log, and says
// where, once.
func TestExecConfigOnWrite(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	xdg := t.TempDir()
	run := func(args ...string) (string, int) {
		cmd := exec.Command(os.Args[0], append([]string{"exec", "--workspace", t.TempDir()}, args...)...)
		cmd.Env = append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1", "XDG_CONFIG_HOME="+xdg)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return errb.String(), code
	}
	if errOut, code := run("-c", "print(1)"); code != 0 {
		t.Fatalf("exec: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(xdg, "ipybox")); err == nil {
		ents, _ := os.ReadDir(filepath.Join(xdg, "ipybox"))
		t.Fatalf("a run that decided nothing made %s: %v", filepath.Join(xdg, "ipybox"), ents)
	}
	cfg := writeMCPConfig(t, map[string]any{"go": map[string]any{"command": mcptest.Build(t)}})
	code := "from mcptools.go.tool_1 import Params, run\ntry:\n    run(Params(s='x'))\nexcept Exception as e:\n    print(type(e).__name__)"
	logf := filepath.Join(xdg, "ipybox", "approvals.jsonl")
	for i := range 2 {
		errOut, rc := run("--mcp-config", cfg, "--approval", "reject", "-c", code)
		if rc != 0 {
			t.Fatalf("exec with a decision: exit %d: %s", rc, errOut)
		}
		said := strings.Contains(errOut, "recording approval decisions in "+logf)
		if said != (i == 0) {
			t.Errorf("run %d: the log's creation told %v; want it told once: %q", i+1, said, errOut)
		}
	}
	if b, err := os.ReadFile(logf); err != nil || strings.Count(string(b), "\n") != 2 {
		t.Errorf("the log: %q, %v", b, err)
	}
}
