package ipybox_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/policy"
	"github.com/ipybox/ipybox/internal/testenv"
)

// newPolicy writes text as a policy file outside any workspace and loads
// it with an audit log beside it.
func newPolicy(t *testing.T, text string) (p *ipybox.ApprovalPolicy, file, log string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "config")
	os.Mkdir(dir, 0o700)
	file, log = filepath.Join(dir, "approvals.policy"), filepath.Join(dir, "approvals.jsonl")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := ipybox.LoadApprovalPolicy(file, &ipybox.ApprovalPolicyOptions{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, file, log
}

func readAudit(t *testing.T, log string) []policy.Entry {
	t.Helper()
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []policy.Entry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e policy.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

const policyImports = `
import ipybox_runtime
from mcptools.go.tool_1 import Params as P1, run as r1
from mcptools.go.tool_3 import Params as P3, run as r3
from mcptools.go.fail import Params as PF, run as rf
ip = get_ipython()
def attempt(f):
    try:
        f()
        return "ran"
    except ipybox_runtime.ToolRunnerError as e:
        return type(e).__name__ + ": " + str(e)
`

// TestApprovalPolicyDecides: the rules decide before the application is
// asked, the application is asked with the reason, and every decision is
// in the audit log, redacted.
func TestApprovalPolicyDecides(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t-value-4f2a"
	p, file, log := newPolicy(t, `
deny  tool go.fail
ask   tool go.tool_3 count=10..
allow tool go.tool_3
allow tool go.tool-1 s=hi*
redact name
allow shell echo ok
deny  shell rm *
`)
	ex := start(t, &ipybox.Options{ApprovalPolicy: p, DotEnv: map[string]string{"POLICY_TEST_SECRET": secret}})
	cfg := testmcpStdio(t)
	cfg.Env = map[string]string{"TOKEN": "${POLICY_TEST_SECRET}"}
	register(t, ex, "go", cfg)
	code := policyImports + `
print(attempt(lambda: r1(P1(s='hi there'))))
print(attempt(lambda: r1(P1(s='` + secret + `'))))
print(attempt(lambda: r3(P3(name='alice', count=1))))
print(attempt(lambda: r3(P3(name='bob', count=50))))
print(attempt(lambda: rf(PF())))
print(attempt(lambda: ip.system('echo ok')))
print(attempt(lambda: ip.system('rm -rf /nonexistent-ipybox-policy-test')))
print(attempt(lambda: ip.system('echo other')))
`
	reqs, events, err := collect(t, ex, code, nil, func(r *ipybox.ApprovalRequest) {
		if r.Tool == "tool_3" {
			r.Reject("not 50")
		} else {
			r.Accept()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	out := resultText(events)
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l = strings.TrimSpace(l); l != "ok" && l != "other" { // what the shell commands print
			lines = append(lines, l)
		}
	}
	want := []string{"ran", "ran", "ran", "ApprovalRejectedError: tool call go.tool_3 rejected by the application: not 50", "ApprovalRejectedError: tool call go.fail rejected by the application: approval policy: denied by rule", "ran", "ApprovalRejectedError: shell command rejected by the application: approval policy: denied by rule", "ran"}
	if len(lines) != len(want) {
		t.Fatalf("output:\n%s", out)
	}
	for i, w := range want {
		if !strings.HasPrefix(strings.TrimSpace(lines[i]), w) {
			t.Errorf("line %d: %q, want %q...", i+1, lines[i], w)
		}
	}
	if !strings.Contains(lines[4], "deny tool go.fail") || !strings.Contains(lines[4], file+":2") {
		t.Errorf("the denial does not name its rule and place: %q", lines[4])
	}
	// Asked: the call no rule matched, and the one the ask rule matched,
	// each saying why.
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2: %v", len(reqs), reqs)
	}
	if reqs[0].Tool != "tool-1" || reqs[0].Why != "no rule matched" {
		t.Errorf("request 1: %s, why %q", reqs[0], reqs[0].Why)
	}
	if reqs[1].Tool != "tool_3" || !strings.Contains(reqs[1].Why, "ask tool go.tool_3 count=10..") || !strings.Contains(reqs[1].Why, file+":3") {
		t.Errorf("request 2: %s, why %q", reqs[1], reqs[1].Why)
	}

	entries := readAudit(t, log)
	type row struct{ kind, what, decision, by, rule string }
	wantRows := []row{
		{"tool", "tool-1", "allow", "rule", "allow tool go.tool-1 s=hi*"},
		{"tool", "tool-1", "allow", "application", ""},
		{"tool", "tool_3", "allow", "rule", "allow tool go.tool_3"},
		{"tool", "tool_3", "deny", "application", ""},
		{"tool", "fail", "deny", "rule", "deny tool go.fail"},
		{"shell", "echo ok", "allow", "rule", "allow shell echo ok"},
		{"shell", "rm -rf /nonexistent-ipybox-policy-test", "deny", "rule", "deny shell rm *"},
		{"shell", "echo other", "allow", "default", ""},
	}
	if len(entries) != len(wantRows) {
		t.Fatalf("%d audit entries, want %d: %+v", len(entries), len(wantRows), entries)
	}
	for i, w := range wantRows {
		e := entries[i]
		what := e.Tool
		if e.Kind == "shell" {
			what = e.Command
		}
		rule := ""
		if e.Rule != nil {
			rule = e.Rule.Text
		}
		if e.Kind != w.kind || what != w.what || e.Decision != w.decision || e.By != w.by || rule != w.rule {
			t.Errorf("audit %d: %s %s %s by %s (rule %q); want %+v", i+1, e.Kind, what, e.Decision, e.By, rule, w)
		}
		if e.Session == "" || e.Session != entries[0].Session || e.Time.IsZero() {
			t.Errorf("audit %d: session %q, time %v", i+1, e.Session, e.Time)
		}
	}
	if e := entries[1]; e.Asked != "no rule matched" || e.Channel != "" || e.WaitedMS <= 0 {
		t.Errorf("asked entry: %+v", e)
	}
	if e := entries[3]; !strings.Contains(e.Asked, "ask tool go.tool_3") || e.Reason != "not 50" {
		t.Errorf("asked entry: %+v", e)
	}
	if e := entries[7]; !strings.Contains(e.Channel, "shell approval off") {
		t.Errorf("default entry: %+v", e)
	}
	if e := entries[6]; e.Rule.File != file || e.Rule.Line != 8 || e.Rule.ID == "" {
		t.Errorf("rule reference: %+v", e.Rule)
	}
	raw, _ := os.ReadFile(log)
	for _, leak := range []string{secret, "alice", "bob"} {
		if strings.Contains(string(raw), leak) {
			t.Errorf("the audit log holds %q:\n%s", leak, raw)
		}
	}
	if !strings.Contains(string(entries[1].Args), policy.Redacted) || !strings.Contains(string(entries[2].Args), `"name":"<redacted>"`) {
		t.Errorf("redacted args: %s, %s", entries[1].Args, entries[2].Args)
	}
}

// TestRememberedAnswers: an answer remembered for the session is as narrow
// as the call; one remembered always is written into the policy file and
// holds for other Executors; a person may widen it; a refusal can be
// remembered too.
func TestRememberedAnswers(t *testing.T) {
	t.Parallel()
	p, file, log := newPolicy(t, "")
	opts := &ipybox.Options{ApprovalPolicy: p, ApproveShellCommands: true}
	ex := start(t, opts)
	register(t, ex, "go", testmcpStdio(t))
	code := policyImports + `
for s in ['a', 'a', 'b', 'b', 'a']:
    print(s, attempt(lambda: r1(P1(s=s))))
`
	reqs, events, err := collect(t, ex, code, nil, func(r *ipybox.ApprovalRequest) {
		var how ipybox.Remember = ipybox.RememberSession
		if strings.Contains(string(r.Args), `"b"`) {
			how = ipybox.RememberAlways
		}
		if err := r.Answer(ipybox.Answer{Accept: true, Remember: how, By: "person", Channel: "test"}); err != nil {
			t.Errorf("Answer: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 2 || strings.Count(resultText(events), "ran") != 5 {
		t.Fatalf("%d requests (want 2: a, then b), output %q", len(reqs), resultText(events))
	}
	text, _ := os.ReadFile(file)
	if !strings.Contains(string(text), `allow tool go.tool-1 args={"s":"b"}`) || !strings.Contains(string(text), policy.RememberedMark) || strings.Contains(string(text), `"a"`) {
		t.Errorf("policy file after answers:\n%s", text)
	}
	entries := readAudit(t, log)
	if len(entries) != 5 || entries[0].Remember != "session" || entries[1].By != "session" || entries[2].Remember != "always" || entries[3].By != "rule" {
		t.Errorf("audit: %+v", entries)
	}

	// Another Executor on the same policy: "always" holds, "session" does not.
	ex2 := start(t, opts)
	register(t, ex2, "go", testmcpStdio(t))
	reqs, _, err = collect(t, ex2, policyImports+"attempt(lambda: r1(P1(s='b')))\nattempt(lambda: r1(P1(s='a')))", nil, nil)
	if err != nil || len(reqs) != 1 || !strings.Contains(string(reqs[0].Args), `"a"`) {
		t.Fatalf("second Executor: %v, requests %v", err, reqs)
	}

	// Widened by the person: any echo, always.
	var asked []string
	_, events, err = collect(t, ex2, `
for c in ['echo one', 'echo two', 'echo three']:
    get_ipython().system(c)
`, nil, func(r *ipybox.ApprovalRequest) {
		asked = append(asked, r.Command)
		if err := r.Answer(ipybox.Answer{Accept: true, Remember: ipybox.RememberAlways, Rules: []string{"shell git status"}}); !errors.Is(err, ipybox.ErrCannotRemember) {
			t.Errorf("a rule that does not match the call: %v", err)
		}
		if err := r.Answer(ipybox.Answer{Accept: true, Remember: ipybox.RememberAlways, Rules: []string{"shell echo *"}}); err != nil {
			t.Errorf("Answer %q: %v", r.Command, err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(asked, "|"); got != "echo one" {
		t.Errorf("asked %q; want only the first echo", got)
	}
	if out := resultText(events); !strings.Contains(out, "one") || !strings.Contains(out, "three") {
		t.Errorf("output: %q", out)
	}
	text, _ = os.ReadFile(file)
	if !strings.Contains(string(text), "allow shell echo *") {
		t.Errorf("widened rule missing:\n%s", text)
	}
}

// TestRememberedRefusal: a refusal remembered for the session refuses the
// same call without asking; an ask rule's question cannot be answered
// "allow always" (ask comes before allow), and says so.
func TestRememberedRefusal(t *testing.T) {
	t.Parallel()
	p, _, _ := newPolicy(t, "ask shell make *\n")
	ex := start(t, &ipybox.Options{ApprovalPolicy: p, ApproveShellCommands: true})
	var asked []string
	_, events, err := collect(t, ex, `
for c in ['echo bad', 'echo bad', 'echo good', 'make -v', 'printf $(id)', 'echo $(id)']:
    try:
        get_ipython().system(c)
    except Exception as e:
        print(type(e).__name__, e)
`, nil, func(r *ipybox.ApprovalRequest) {
		asked = append(asked, r.Command)
		switch r.Command {
		case "echo bad":
			if err := r.Answer(ipybox.Answer{Reason: "never", Remember: ipybox.RememberSession}); err != nil {
				t.Error(err)
			}
		case "make -v":
			if err := r.CanRemember(true, ipybox.RememberSession); !errors.Is(err, ipybox.ErrCannotRemember) || !strings.Contains(err.Error(), "ask rule") {
				t.Errorf("CanRemember under an ask rule: %v", err)
			}
			if err := r.CanRemember(false, ipybox.RememberSession); err != nil {
				t.Errorf("a refusal under an ask rule: %v", err)
			}
			if err := r.CanRemember(true, ipybox.RememberAlways); err != nil && !strings.Contains(err.Error(), "ask rule") {
				t.Errorf("CanRemember always: %v", err)
			}
			r.Accept()
		case "printf $(id)":
			if _, err := r.NarrowRules(); err == nil {
				t.Errorf("a command with $(...) has narrow rules")
			}
			if err := r.Answer(ipybox.Answer{Accept: true, Remember: ipybox.RememberSession}); !errors.Is(err, ipybox.ErrCannotRemember) {
				t.Errorf("remembered a command with $(...): %v", err)
			}
			r.Reject("once")
		default:
			r.Accept()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	// echo $(id) is not asked about: the refusal of "echo bad" may match
	// it, since $(id) may print "bad".
	if got := strings.Join(asked, "|"); got != "echo bad|echo good|make -v|printf $(id)" {
		t.Errorf("asked %q", got)
	}
	if out := resultText(events); strings.Count(out, "ApprovalRejectedError") != 4 || !strings.Contains(out, "never") {
		t.Errorf("output %q", out)
	}
}

// TestRevokeReachesRunningSession: a rule removed from the policy file by
// another process (as `ipybox approvals revoke` does) stops applying to a
// cell that is running, within a second.
func TestRevokeReachesRunningSession(t *testing.T) {
	t.Parallel()
	p, file, _ := newPolicy(t, "allow tool go.tool-1\n")
	ex := start(t, &ipybox.Options{ApprovalPolicy: p})
	register(t, ex, "go", testmcpStdio(t))
	rs, err := policy.Parse(file, []byte("allow tool go.tool-1\n"))
	if err != nil {
		t.Fatal(err)
	}
	id := rs.All()[0].ID
	code := policyImports + `
import time
n = 0
while n < 2000 and attempt(lambda: r1(P1(s='x'))) == "ran":
    n += 1
    if n == 5:
        print("five", flush=True)
    time.sleep(0.01)
print("calls", n)
`
	var revoked time.Time
	var latency time.Duration
	asked := 0
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for ev, err := range ex.Stream(ctx, code, nil) {
		if err != nil {
			t.Fatal(err)
		}
		switch ev := ev.(type) {
		case *ipybox.Output:
			if strings.Contains(ev.Text, "five") && revoked.IsZero() {
				f, err := policy.Open(file)
				if err != nil {
					t.Fatal(err)
				}
				revoked = time.Now()
				if _, err := f.Remove(id); err != nil {
					t.Fatal(err)
				}
			}
		case *ipybox.ApprovalRequest:
			asked++
			latency = time.Since(revoked)
			if ev.Why != "no rule matched" {
				t.Errorf("why %q", ev.Why)
			}
			ev.Reject("revoked")
		case *ipybox.Result:
			t.Logf("%s", strings.TrimSpace(ev.Text))
		}
	}
	if revoked.IsZero() || asked != 1 {
		t.Fatalf("revoked %v, asked %d times", revoked, asked)
	}
	if latency > time.Second {
		t.Errorf("the revoke took %v to reach the running cell", latency)
	}
	t.Logf("the revoke reached the running cell after %v", latency)
}

// TestApprovalPolicyOutsideWorkspace: a policy or log where kernel code
// can write (the workspace, a sandbox's allowWrite folder) is refused at
// start, before any kernel runs.
func TestApprovalPolicyOutsideWorkspace(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	writable := t.TempDir()
	for _, tc := range []struct {
		name, file, log string
		sandbox         bool
	}{
		{"policy in the workspace", filepath.Join(ws, "approvals.policy"), "", false},
		{"log in the workspace", "", filepath.Join(ws, ".ipybox", "log.jsonl"), false},
		{"policy in allowWrite", filepath.Join(writable, "sub", "p"), "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ipybox.LoadApprovalPolicy(tc.file, &ipybox.ApprovalPolicyOptions{Log: tc.log})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			o := &ipybox.Options{WorkDir: ws, ApprovalPolicy: p}
			if tc.sandbox {
				o.Sandbox = ipybox.DefaultSandbox()
				o.Sandbox.Filesystem.AllowWrite = []string{writable}
			}
			ex, err := ipybox.Start(context.Background(), o)
			if err == nil {
				ex.Close()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), "kernel code can write") {
				t.Errorf("error: %v", err)
			}
		})
	}
}

// TestAttackKernelWritesPolicy: sandboxed kernel code that sees the whole
// host (rootMode "host") cannot read, write, replace or remove the policy
// file or the audit log, by Python or by shell, and its attempts leave
// both as they were.
func TestAttackKernelWritesPolicy(t *testing.T) {
	t.Parallel()
	// In a folder that rootMode "host" shows, and that the sandboxed user
	// may enter (the sandbox has its own /tmp and /var/tmp, and hides the
	// home folder's dot files anyway): hidden only by the mask.
	dir := visibleTempDir(t)
	file, log := filepath.Join(dir, "approvals.policy"), filepath.Join(dir, "approvals.jsonl")
	os.WriteFile(file, []byte("allow tool go.tool-1\ndeny shell rm *\n"), 0o600)
	p, err := ipybox.LoadApprovalPolicy(file, &ipybox.ApprovalPolicyOptions{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	// Readable by all, as a lax umask leaves them (when the tests run as
	// root, the kernel runs as another user): the mask must hide them.
	for _, f := range []string{dir, file, log} {
		os.Chmod(f, 0o755)
	}
	sb := ipybox.DefaultSandbox()
	sb.RootMode = "host"
	ex := startSandboxed(t, &ipybox.Options{ApprovalPolicy: p, Sandbox: sb})
	before, _ := os.ReadFile(file)
	code := `
import os, shutil
F, L, D = ` + pyStr(file) + `, ` + pyStr(log) + `, ` + pyStr(dir) + `
def attempt(name, f):
    try:
        f()
        print(name, "SUCCEEDED")
    except Exception as e:
        print(name, "failed:", type(e).__name__, e)
attempt("read policy", lambda: open(F).read())
attempt("read log", lambda: open(L).read())
attempt("append policy", lambda: open(F, "a").write("allow tool *.*\n"))
attempt("truncate policy", lambda: open(F, "w").write("allow tool *.*\n"))
attempt("append log", lambda: open(L, "a").write("{}\n"))
attempt("remove policy", lambda: os.remove(F))
attempt("rename folder", lambda: os.rename(D, D + ".old"))
attempt("new file beside", lambda: open(os.path.join(D, "x"), "w").write("x"))
attempt("symlink beside", lambda: os.symlink("/tmp", os.path.join(D, "l")))
attempt("chmod policy", lambda: os.chmod(F, 0o666))
attempt("replace folder", lambda: shutil.rmtree(D))
get_ipython().system("echo 'allow tool *.*' >> " + F + " || echo shell-append-failed")
`
	res := run(t, ex, code)
	if strings.Contains(res.Text, "SUCCEEDED") {
		t.Errorf("kernel code reached the policy:\n%s", res.Text)
	}
	if !strings.Contains(res.Text, "shell-append-failed") {
		t.Errorf("the shell append did not fail:\n%s", res.Text)
	}
	after, err := os.ReadFile(file)
	if err != nil || string(after) != string(before) {
		t.Errorf("the policy changed: %q -> %q (%v)", before, after, err)
	}
	if entries := readAudit(t, log); len(entries) != 1 || entries[0].Kind != "shell" {
		t.Errorf("audit log after the attack: %+v", entries)
	}
}

// visibleTempDir makes a folder of mode 0755 outside /tmp, in a place
// whose every parent others may enter, or skips the test.
func visibleTempDir(t *testing.T) string {
	home, _ := os.UserHomeDir()
	for _, parent := range []string{home, "/var/cache", "/opt"} {
		if parent == "" || !enterable(parent) {
			continue
		}
		dir, err := os.MkdirTemp(parent, "ipybox-test-policy-")
		if err != nil {
			continue
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		os.Chmod(dir, 0o755)
		return dir
	}
	testenv.Missing(t, "no folder outside /tmp that the sandboxed user could enter")
	return ""
}

func enterable(p string) bool {
	for ; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if p == "/" {
			return true
		}
	}
}

// TestDefaultPolicyInWorkspace: with the home folder as the workspace, the
// default policy (in the user's config folder) is inside it. Unsandboxed,
// kernel code can write there anyway, and Start goes on; sandboxed, the
// workspace is writable and the config folder in it is refused.
func TestDefaultPolicyInWorkspace(t *testing.T) {
	home := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	file, err := ipybox.DefaultApprovalPolicyFile()
	if err != nil {
		t.Fatal(err)
	}
	logf, _ := ipybox.DefaultApprovalLogFile()
	p, err := ipybox.LoadApprovalPolicy(file, &ipybox.ApprovalPolicyOptions{Log: logf})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ex := start(t, &ipybox.Options{WorkDir: home, ApprovalPolicy: p})
	ex.Close()
	testenv.NeedsTool(t, "bwrap")
	_, err = ipybox.Start(context.Background(), &ipybox.Options{WorkDir: home, ApprovalPolicy: p, Sandbox: ipybox.DefaultSandbox()})
	if err == nil || !strings.Contains(err.Error(), "can write") {
		t.Errorf("sandboxed with the config folder in the workspace: %v", err)
	}
}

// TestAttackShellPolicyThroughKernel: kernel code tries to make a command
// that the rule "allow shell echo hi *" allows run something else, through
// IPython's own ways of building commands ($var and {expr} expansion,
// aliases, script magics, the shell's methods). The policy sees the
// expanded text that runs, so none is allowed: each is asked about (and
// refused here), and the marker is never made.
func TestAttackShellPolicyThroughKernel(t *testing.T) {
	t.Parallel()
	p, _, _ := newPolicy(t, "allow shell echo hi *\n")
	ex := start(t, &ipybox.Options{ApprovalPolicy: p, ApproveShellCommands: true})
	marker := filepath.Join(ex.Workspace(), "pwned")
	m := pyStr(marker)
	for _, tc := range []struct{ name, code string }{
		{"bang list", "!echo hi; touch " + marker},
		{"$var holds a separator", "x = '; touch ' + " + m + "\n!echo hi $x"},
		{"{expr} holds a substitution", "x = '$(touch ' + " + m + " + ')'\n!echo hi {x}"},
		{"{expr} holds a newline", "x = '\\ntouch ' + " + m + "\n!echo hi {x}"},
		{"alias", "%alias e echo hi; touch " + marker + "\n%e"},
		{"alias with arguments", "%alias e echo hi %s\n%e ; touch " + marker},
		{"script magic", "%%bash\necho hi\ntouch " + marker},
		{"system", "get_ipython().system('echo hi && touch ' + " + m + ")"},
		{"sx pipe", "%sx echo hi | touch " + marker},
		{"double bang", "!!echo hi; touch " + marker},
		{"redirection", "!echo hi > " + marker},
		{"assignment", "!X=1 echo hi; touch " + marker},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(marker)
			reqs, _, _ := collect(t, ex, tc.code, nil, func(r *ipybox.ApprovalRequest) { r.Reject("not allowed") })
			if _, err := os.Stat(marker); err == nil {
				t.Fatalf("the command ran")
			}
			if len(reqs) == 0 {
				t.Fatalf("nothing was asked: the policy allowed it")
			}
			t.Logf("asked about %q: %s", reqs[0].Command, reqs[0].Why)
		})
	}
	// The allowed command itself runs without asking.
	reqs, events, err := collect(t, ex, "!echo hi there", nil, func(r *ipybox.ApprovalRequest) { r.Reject("not allowed") })
	if err != nil || len(reqs) != 0 || !strings.Contains(resultText(events), "hi there") {
		t.Errorf("allowed command: %v, %d requests, %q", err, len(reqs), resultText(events))
	}
}
