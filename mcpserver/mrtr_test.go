package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// asker is a client's elicitation handler that answers from a list and
// records what it was asked.
type asker struct {
	mu      sync.Mutex
	answers []string
	asked   []*mcp.ElicitParams
	// during runs in the handler, before it answers.
	during func()
}

func (a *asker) handle(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	if a.during != nil {
		a.during()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, r.Params)
	ans := "cancel"
	if len(a.asked) <= len(a.answers) {
		ans = a.answers[len(a.asked)-1]
	}
	return &mcp.ElicitResult{Action: ans, Content: map[string]any{}}, nil
}

func (a *asker) messages() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, p := range a.asked {
		out = append(out, p.Message)
	}
	return out
}

// elicitServer serves --approval elicit with the Go test MCP server
// registered as "ap", over HTTP.
func elicitServer(t *testing.T, o *Options) (*Server, string) {
	t.Helper()
	testenv.NeedsPython(t)
	if o.Workspace == "" {
		o.Workspace = t.TempDir()
	}
	o.Approvals.Mode = ApprovalElicit
	o.Servers = map[string]ipybox.ServerConfig{"ap": {Command: mcptest.Build(t)}}
	srv := newServer(t, o)
	return srv, serveHTTP(t, srv)
}

// TestApprovalsAsInputRequired: with a 2026-07-28 client, a cell that
// reaches a tool call or a shell command needing approval makes the call
// return an input-required result, with the elicitation of today; the
// cell waits at the call; the client's retry with the answer resumes it.
// Accept runs the call, decline rejects it, and several approvals in one
// cell each take a round. A 2025-11-25 client gets the same questions as
// elicitation requests.
func TestApprovalsAsInputRequired(t *testing.T) {
	for _, version := range []string{newVersion, legacyVersion} {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			srv, url := elicitServer(t, &Options{})
			ws := srv.Workspace()
			ask := &asker{answers: []string{"accept", "decline", "accept", "accept", "accept"}}
			// While the client is asked, the cell waits at the call:
			// what comes after it has not run.
			ask.during = func() {
				if _, err := os.Stat(filepath.Join(ws, "after.txt")); err == nil {
					t.Error("the cell went on while its call waited for approval")
				}
			}
			cs := connectHTTPAs(t, url, testToken, version, &mcp.ClientOptions{ElicitationHandler: ask.handle})
			h := ""
			if version == newVersion {
				h = createSession(t, cs)
			}
			code := "from mcptools.ap.tool_1 import Params, run\nprint('before', flush=True)\nr = run(Params(s=%q))\nopen('after.txt', 'w').close()\nprint(r)"
			res := call(t, cs, "execute_ipython_cell", map[string]any{"code": fmt.Sprintf(code, "first"), "session": h})
			if got := text(res); res.IsError || got != "before\ntool-1: first" {
				t.Errorf("accepted: %q", got)
			}
			os.Remove(filepath.Join(ws, "after.txt"))
			res = call(t, cs, "execute_ipython_cell", map[string]any{"code": fmt.Sprintf(code, "second"), "session": h})
			if got := text(res); !res.IsError || !strings.Contains(got, "ApprovalRejectedError") || !strings.Contains(got, "declined by the user") || !strings.HasPrefix(got, "before") {
				t.Errorf("declined: %q", got)
			}
			// Three approvals in one cell: two tool calls and a shell
			// command.
			res = call(t, cs, "execute_ipython_cell", map[string]any{"session": h, "code": "from mcptools.ap.tool_1 import Params, run\n" +
				"print(run(Params(s='one')))\nprint(run(Params(s='two')))\n!echo three"})
			if got := text(res); res.IsError || got != "tool-1: one\ntool-1: two\nthree" {
				t.Errorf("three approvals: %q", got)
			}
			asked := ask.messages()
			if len(asked) != 5 {
				t.Fatalf("asked %d times, want 5: %q", len(asked), asked)
			}
			for i, want := range []string{`"s": "first"`, `"s": "second"`, `"s": "one"`, `"s": "two"`, "echo three"} {
				if !strings.Contains(asked[i], want) {
					t.Errorf("question %d: %q, want %q in it", i, asked[i], want)
				}
			}
			if !strings.Contains(asked[0], "wants to call the MCP tool tool-1 of server ap with these arguments") {
				t.Errorf("the question is not today's: %q", asked[0])
			}
			ask.mu.Lock()
			meta, _ := ask.asked[4].Meta[approvalMetaKey].(map[string]any)
			ask.mu.Unlock()
			if meta["kind"] != "shell" || meta["command"] != "echo three" {
				t.Errorf("the shell question's _meta: %v", meta)
			}
		})
	}
}

// TestApprovalUnanswered: a 2026-07-28 client that gets the input-required
// result and never retries leaves the cell at the call until the approval
// timeout; the call then fails in the cell, the cell goes on, and the
// kernel keeps its state. A late retry gets the cell's result; a forged
// requestState, and one presented by another principal, get an error.
func TestApprovalUnanswered(t *testing.T) {
	t.Parallel()
	srv, url := elicitServer(t, &Options{Approvals: ApprovalOptions{Timeout: 2 * time.Second}, HTTP: HTTPOptions{Principals: map[string]string{"other": "other-token-0123456789"}}})
	_ = srv
	// The go-sdk client answers and retries by itself; this one does not.
	cs := connectHTTPAs(t, url, testToken, newVersion, &mcp.ClientOptions{
		ElicitationHandler: (&asker{}).handle,
		MultiRoundTrip:     &mcp.MultiRoundTripOptions{Disabled: true},
	})
	h := createSession(t, cs)
	args := map[string]any{"session": h, "code": "from mcptools.ap.tool_1 import Params, run\nx = 1\ntry:\n    run(Params(s='never'))\nexcept Exception as e:\n    err = type(e).__name__\nprint('went on', err)"}
	t0 := time.Now()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "execute_ipython_cell", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	if !res.NeedsInput() || len(res.InputRequests) != 1 || res.RequestState == "" {
		t.Fatalf("not an input-required result: %+v", res)
	}
	for id, ir := range res.InputRequests {
		ep, ok := ir.(*mcp.ElicitParams)
		if !ok || !strings.Contains(ep.Message, `"s": "never"`) || ep.Meta[approvalMetaKey] == nil {
			t.Errorf("input request %s: %#v", id, ir)
		}
	}
	if d := time.Since(t0); d > 15*time.Second {
		t.Errorf("the input-required result took %v", d)
	}
	// Forged, and another principal's.
	forged := &mcp.CallToolParams{Name: "execute_ipython_cell", Arguments: args, RequestState: handlePrefix + "state_" + strings.Repeat("A", 26)}
	var werr *jsonrpc.Error
	if _, err := cs.CallTool(t.Context(), forged); !errors.As(err, &werr) || !strings.Contains(werr.Message, "requestState") {
		t.Errorf("a forged requestState: %v", err)
	}
	other := connectHTTPAs(t, url, "other-token-0123456789", newVersion, &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}})
	stolen := &mcp.CallToolParams{Name: "execute_ipython_cell", Arguments: args, RequestState: res.RequestState,
		InputResponses: mcp.InputResponseMap{"approval-1": &mcp.ElicitResult{Action: "accept"}}}
	if _, err := other.CallTool(t.Context(), stolen); !errors.As(err, &werr) || !strings.Contains(werr.Message, "requestState") {
		t.Errorf("another principal's retry: %v", err)
	}
	// The approval times out in the cell, which goes on; the kernel keeps
	// its state. Until then the session is busy with the cell.
	if !sessionBusy(t, cs, h) {
		t.Error("the session of a cell left at an approval is not busy")
	}
	waitSessionIdle(t, cs, h, 60*time.Second)
	if d := time.Since(t0); d < 2*time.Second {
		t.Errorf("the cell went on after %v, before the approval timeout", d)
	}
	if got := runIn(t, cs, h, "print(x, err)"); got != "1 ApprovalTimeoutError" {
		t.Errorf("after the timeout: %q", got)
	}
	// The late retry gets the cell's result, with no question left.
	late := &mcp.CallToolParams{Name: "execute_ipython_cell", Arguments: args, RequestState: res.RequestState,
		InputResponses: mcp.InputResponseMap{"approval-1": &mcp.ElicitResult{Action: "accept"}}}
	res, err = cs.CallTool(t.Context(), late)
	if err != nil || res.NeedsInput() || text(res) != "went on ApprovalTimeoutError" {
		t.Errorf("the late retry: %v %q", err, text(res))
	}
	// Once: the same state again is unknown.
	if _, err := cs.CallTool(t.Context(), late); !errors.As(err, &werr) {
		t.Errorf("a second retry with the same state: %v", err)
	}
}

// TestApprovalWaitBoundedForOldClients: a 2025-11-25 client asked by an
// elicitation request that never answers is asked no longer than the
// approval timeout, and the cell goes on.
func TestApprovalWaitBoundedForOldClients(t *testing.T) {
	t.Parallel()
	_, url := elicitServer(t, &Options{Approvals: ApprovalOptions{Timeout: 2 * time.Second}})
	var mu sync.Mutex
	asked := 0
	cs := connectHTTP(t, url, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			mu.Lock()
			asked++
			mu.Unlock()
			<-ctx.Done() // a person who never answers
			return nil, ctx.Err()
		},
	})
	t0 := time.Now()
	res := call(t, cs, "execute_ipython_cell", map[string]any{"code": "from mcptools.ap.tool_1 import Params, run\ntry:\n    run(Params(s='x'))\nexcept Exception as e:\n    print(type(e).__name__)\nprint('went on')"})
	if d := time.Since(t0); d > 20*time.Second {
		t.Errorf("the call took %v; want about the 2 s approval timeout", d)
	}
	if got := text(res); res.IsError || got != "ApprovalTimeoutError\nwent on" {
		t.Errorf("result: %q", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if asked != 1 {
		t.Errorf("asked %d times, want 1", asked)
	}
}

// TestOutputAsProgress: a request with a progress token gets every chunk
// of a cell's output as a progress notification, its text as the message,
// in order and before the result, over both revisions, also across the
// rounds of an approval; the values increase over the whole cell.
func TestOutputAsProgress(t *testing.T) {
	for _, version := range []string{newVersion, legacyVersion} {
		t.Run(version, func(t *testing.T) {
			t.Parallel()
			_, url := elicitServer(t, &Options{})
			var mu sync.Mutex
			var chunks []string
			var values []float64
			var heartbeats int
			done := false
			cs := connectHTTPAs(t, url, testToken, version, &mcp.ClientOptions{
				ElicitationHandler: (&asker{answers: []string{"accept"}}).handle,
				// Log messages go only to a client that asks for them.
				//lint:ignore SA1019 the cells' output streams as MCP log messages, which SEP-2577 keeps working through its deprecation window (see streamOutput)
				LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
					t.Errorf("a log message the client did not ask for: %+v", r.Params)
				},
				ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
					mu.Lock()
					defer mu.Unlock()
					if done {
						t.Errorf("a notification after the result: %+v", r.Params)
					}
					values = append(values, r.Params.Progress)
					if s, _ := r.Params.Meta[streamMetaKey].(string); s != "" {
						chunks = append(chunks, s+":"+r.Params.Message)
					} else if strings.HasPrefix(r.Params.Message, "cell running for") {
						heartbeats++
					} else {
						t.Errorf("notification %+v", r.Params)
					}
				},
			})
			h := ""
			if version == newVersion {
				h = createSession(t, cs)
			}
			code := `import sys, time
from mcptools.ap.tool_1 import Params, run
for i in range(3):
    sys.stdout.write(f"step {i}\n"); sys.stdout.flush(); time.sleep(0.3)
sys.stderr.write("to stderr\n"); sys.stderr.flush()
time.sleep(1.5)
print(run(Params(s="approved")), flush=True)
for i in range(3, 5):
    sys.stdout.write(f"step {i}\n"); sys.stdout.flush(); time.sleep(0.3)`
			p := &mcp.CallToolParams{Name: "execute_ipython_cell", Arguments: map[string]any{"code": code, "session": h}}
			p.SetProgressToken("tok")
			res, err := cs.CallTool(t.Context(), p)
			mu.Lock()
			done = true
			mu.Unlock()
			if err != nil || res.IsError {
				t.Fatalf("%v %v", err, res)
			}
			mu.Lock()
			defer mu.Unlock()
			want := []string{"stdout:step 0\n", "stdout:step 1\n", "stdout:step 2\n", "stderr:to stderr\n", "stdout:tool-1: approved\n", "stdout:step 3\n", "stdout:step 4\n"}
			if strings.Join(chunks, "|") != strings.Join(want, "|") {
				t.Errorf("chunks %q\nwant   %q", chunks, want)
			}
			for i := 1; i < len(values); i++ {
				if values[i] <= values[i-1] {
					t.Errorf("progress values do not increase: %v", values)
					break
				}
			}
			if heartbeats == 0 {
				t.Errorf("no notification of the elapsed time in a quiet 1.5 s")
			}
		})
	}
}

// TestPolicyRememberedAsInputRequired: a 2026-07-28 client answers the
// approval policy's form (allow-session, allow-always with a widened
// rule, deny-always) in the rounds of input-required results, and the
// answers are remembered as through an elicitation request.
func TestPolicyRememberedAsInputRequired(t *testing.T) {
	t.Parallel()
	p, file := loadPolicy(t, "")
	srv := newServer(t, &Options{Workspace: sharedWorkspace(t), Approvals: ApprovalOptions{Mode: ApprovalElicit, Policy: p}})
	var mu sync.Mutex
	var asked []string
	cs := connect(t, srv, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			var m map[string]any
			metaOf(t, r.Params.Meta, approvalMetaKey, &m)
			cmd := m["command"].(string)
			mu.Lock()
			asked = append(asked, cmd)
			mu.Unlock()
			switch cmd {
			case "echo a":
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "allow-session"}}, nil
			case "echo c":
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "allow-always", "rule": "shell echo *"}}, nil
			case "echo bad":
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "deny-always"}}, nil
			}
			return &mcp.ElicitResult{Action: "decline"}, nil
		},
	})
	if v := cs.InitializeResult().ProtocolVersion; v != newVersion {
		t.Fatalf("negotiated %s", v)
	}
	out := run(t, cs, shellCell+`
for c in ['echo a', 'echo a', 'echo bad', 'echo c', 'echo d', 'echo bad']:
    sh(c)
`)
	mu.Lock()
	got := strings.Join(asked, "|")
	mu.Unlock()
	if got != "echo a|echo bad|echo c" {
		t.Errorf("asked %q", got)
	}
	if strings.Count(out, "ApprovalRejectedError") != 2 {
		t.Errorf("output:\n%s", out)
	}
	text, _ := os.ReadFile(file)
	for _, w := range []string{"deny shell echo bad", "allow shell echo *"} {
		if !strings.Contains(string(text), w) {
			t.Errorf("the policy lacks %q:\n%s", w, text)
		}
	}
}
