package mcpserver

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
)

// elicited is one approval question as the client saw it.
type elicited struct {
	message string
	meta    map[string]any
	schema  map[string]any
}

// answeringClient answers each elicitation with answer(command) (content
// of an accept; nil declines) and records the questions.
func answeringClient(t *testing.T, srv *Server, answer func(cmd string) map[string]any) (*mcp.ClientSession, func() []elicited) {
	var mu sync.Mutex
	var asked []elicited
	// At 2025-11-25: the go-sdk's client checks the content of an
	// input-required round against the form itself, and would stop the
	// answers this test sends to see the server refuse them.
	cs := connectAt(t, srv, legacyVersion, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			var m map[string]any
			metaOf(t, r.Params.Meta, approvalMetaKey, &m)
			schema, _ := r.Params.RequestedSchema.(map[string]any)
			mu.Lock()
			asked = append(asked, elicited{r.Params.Message, m, schema})
			mu.Unlock()
			c := answer(m["command"].(string))
			if c == nil {
				return &mcp.ElicitResult{Action: "decline"}, nil
			}
			return &mcp.ElicitResult{Action: "accept", Content: c}, nil
		},
	})
	return cs, func() []elicited {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(asked)
	}
}

func loadPolicy(t *testing.T, text string) (*ipybox.ApprovalPolicy, string) {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "approvals.policy")
	os.WriteFile(file, []byte(text), 0o600)
	p, err := ipybox.LoadApprovalPolicy(file, &ipybox.ApprovalPolicyOptions{Log: filepath.Join(dir, "log.jsonl")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, file
}

const shellCell = `
def sh(c):
    try:
        get_ipython().system(c)
    except Exception as e:
        print(type(e).__name__ + ":", e)
`

// TestPolicyInAutoMode: with --approval auto, deny rules refuse and ask
// rules elicit, saying why; what no rule matches runs. A client that
// cannot be asked gets the call rejected, with the reason.
func TestPolicyInAutoMode(t *testing.T) {
	t.Parallel()
	p, file := loadPolicy(t, "ask shell echo asked *\ndeny shell rm *\n")
	srv := newServer(t, &Options{Workspace: sharedWorkspace(t), Approvals: ApprovalOptions{Policy: p}})
	cs, asked := answeringClient(t, srv, func(string) map[string]any { return map[string]any{} })
	out := run(t, cs, shellCell+"sh('echo free')\nsh('rm -rf /nonexistent-ipybox')\nsh('echo asked 1')")
	if !strings.Contains(out, "free") || !strings.Contains(out, "asked 1") || !strings.Contains(out, "ApprovalRejectedError") || !strings.Contains(out, "deny shell rm *") {
		t.Errorf("output:\n%s", out)
	}
	qs := asked()
	if len(qs) != 1 || qs[0].meta["command"] != "echo asked 1" {
		t.Fatalf("asked %+v", qs)
	}
	q := qs[0]
	if !strings.Contains(q.message, "why: asked by rule") || !strings.Contains(q.message, file+":1") || !strings.Contains(q.message, "remember as: shell echo asked 1") {
		t.Errorf("message:\n%s", q.message)
	}
	// Under an ask rule, a yes cannot be remembered (ask comes first); a
	// no can.
	answers, _ := q.meta["answers"].([]any)
	var got []string
	for _, a := range answers {
		got = append(got, a.(string))
	}
	if strings.Join(got, ",") != "allow,deny-session,deny-always" {
		t.Errorf("answers offered: %q", got)
	}
	props, _ := q.schema["properties"].(map[string]any)
	if _, ok := props["answer"]; !ok {
		t.Errorf("schema: %v", q.schema)
	}

	// A client without elicitation cannot be asked: the ask rule rejects.
	plain := connect(t, srv, nil)
	out = run(t, plain, shellCell+"sh('echo asked 2')\nsh('echo free')")
	if !strings.Contains(out, "does not support elicitation") || !strings.Contains(out, "ask shell echo asked *") || !strings.Contains(out, "free") {
		t.Errorf("without elicitation:\n%s", out)
	}
}

// TestPolicyRememberedThroughElicitation: the elicitation's answers for
// the session and always are remembered, as narrow as the call unless the
// person edits the rule; an edited rule that does not match the call
// counts once.
func TestPolicyRememberedThroughElicitation(t *testing.T) {
	t.Parallel()
	p, file := loadPolicy(t, "")
	srv := newServer(t, &Options{Workspace: sharedWorkspace(t), Approvals: ApprovalOptions{Mode: ApprovalElicit, Policy: p}})
	cs, asked := answeringClient(t, srv, func(cmd string) map[string]any {
		switch cmd {
		case "echo a":
			return map[string]any{"answer": "allow-session"}
		case "echo b":
			return map[string]any{"answer": "allow-always", "rule": "shell git status"} // does not match: once
		case "echo c":
			return map[string]any{"answer": "allow-always", "rule": "shell echo *"}
		case "echo bad":
			return map[string]any{"answer": "deny-always"}
		case "echo forged":
			return map[string]any{"answer": "allow-forever"}
		}
		return nil
	})
	out := run(t, cs, shellCell+`
for c in ['echo a', 'echo a', 'echo b', 'echo b', 'echo bad', 'echo forged', 'echo c', 'echo d', 'echo bad']:
    sh(c)
`)
	var cmds []string
	for _, q := range asked() {
		cmds = append(cmds, q.meta["command"].(string))
		if q.meta["why"] != "no rule matched" || !strings.Contains(q.message, "why: no rule matched") {
			t.Errorf("why: %v\n%s", q.meta["why"], q.message)
		}
	}
	// echo a: once, then remembered for the session. echo b: the edited
	// rule does not match, so it counts once and b is asked again. echo
	// bad: denied always (a deny beats the echo * allowed after it). echo
	// c: widened to echo *, so echo d is not asked. echo forged: an
	// answer the form did not offer is a refusal.
	if got := strings.Join(cmds, "|"); got != "echo a|echo b|echo b|echo bad|echo forged|echo c" {
		t.Errorf("asked %q", got)
	}
	if strings.Count(out, "ApprovalRejectedError") != 3 || !strings.Contains(out, "allow-forever") { // go-sdk refuses content the schema does not allow
		t.Errorf("output:\n%s", out)
	}
	text, _ := os.ReadFile(file)
	for _, w := range []string{"deny shell echo bad", "allow shell echo *", `through MCP elicitation (the client says it is "test")`} {
		if !strings.Contains(string(text), w) {
			t.Errorf("the policy lacks %q:\n%s", w, text)
		}
	}
	if strings.Contains(string(text), "git status") {
		t.Errorf("a rule that does not match the call was written:\n%s", text)
	}
}
