package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// startedClient connects to srv over the stdio path with a progress
// handler that closes started when a chunk of output says "started".
func startedClient(t *testing.T, srv *Server) (*mcp.ClientSession, <-chan struct{}) {
	t.Helper()
	started := make(chan struct{})
	var once bool
	cs := connect(t, srv, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		if !once && strings.Contains(r.Params.Message, "started") {
			once = true
			close(started)
		}
	}})
	return cs, started
}

const sleeper = "x = 41\nimport time\nprint('started', flush=True)\ntime.sleep(120)\nprint('not reached')"

// callAsync calls execute_ipython_cell with a progress token, in the
// background.
func callAsync(ctx context.Context, cs *mcp.ClientSession, args map[string]any) (<-chan *mcp.CallToolResult, <-chan error) {
	resc, errc := make(chan *mcp.CallToolResult, 1), make(chan error, 1)
	p := &mcp.CallToolParams{Name: "execute_ipython_cell", Arguments: args}
	p.SetProgressToken("cell")
	go func() { // bound: the call's ctx, or the cell's end
		res, err := cs.CallTool(ctx, p)
		resc <- res
		errc <- err
	}()
	return resc, errc
}

func waitStarted(t *testing.T, started <-chan struct{}) {
	t.Helper()
	select {
	case <-started:
	case <-time.After(90 * time.Second):
		t.Fatal("the cell did not start within 90s")
	}
}

// TestInterruptTool: interrupt stops a running cell; the kernel keeps its
// state, and both the cell's call and interrupt's say it was interrupted.
func TestInterruptTool(t *testing.T) {
	t.Parallel()
	srv := newServer(t, &Options{Workspace: sharedWorkspace(t)})
	cs, started := startedClient(t, srv)
	resc, errc := callAsync(t.Context(), cs, map[string]any{"code": sleeper})
	waitStarted(t, started)
	t0 := time.Now()
	ir := call(t, cs, "interrupt", map[string]any{})
	if got := text(ir); ir.IsError || !strings.Contains(got, "started") || !strings.Contains(got, "interrupted by the interrupt tool") {
		t.Errorf("interrupt: %q", got)
	}
	res, err := <-resc, <-errc
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 30*time.Second {
		t.Errorf("the cell ended %v after interrupt", d)
	}
	m := res.Meta[CellMetaKey].(map[string]any)
	if got := text(res); !res.IsError || !strings.Contains(got, "interrupted by the interrupt tool") || strings.Contains(got, "not reached") || m["error"].(map[string]any)["kind"] != "interrupted" {
		t.Errorf("the cell's result: %q %v", got, m)
	}
	if got := run(t, cs, "print(x + 1)"); got != "42" {
		t.Errorf("after the interrupt: %q", got)
	}
	if got := text(call(t, cs, "interrupt", map[string]any{})); !strings.Contains(got, "No cell runs") {
		t.Errorf("interrupt with nothing running: %q", got)
	}
}

// TestCancelInterruptsCell: notifications/cancelled for the call of a
// running cell (the go-sdk client sends it when the call's context ends;
// Claude Code when a person presses Esc) interrupts the cell; the kernel
// keeps its state and the next result says what happened.
func TestCancelInterruptsCell(t *testing.T) {
	t.Parallel()
	srv := newServer(t, &Options{Workspace: sharedWorkspace(t)})
	cs, started := startedClient(t, srv)
	ctx, cancel := context.WithCancel(t.Context())
	_, errc := callAsync(ctx, cs, map[string]any{"code": sleeper})
	waitStarted(t, started)
	t0 := time.Now()
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the cancelled call returned no error")
	}
	got := run(t, cs, "print(x + 1)")
	if d := time.Since(t0); d > 30*time.Second {
		t.Errorf("the next cell answered %v after the cancel", d)
	}
	if !strings.HasSuffix(got, "\n42") || !strings.Contains(got, "because the client cancelled its call; the kernel kept its state") || !strings.Contains(got, `Its last output: "started`) {
		t.Errorf("after the cancel: %q", got)
	}
}

// stubborn ignores KeyboardInterrupt: an interrupt does not stop it, so
// the kernel is restarted.
// It says "started" inside the try, so that the interrupt cannot land
// before it.
const stubborn = "x = 41\nimport time\nn = 0\nwhile True:\n    try:\n        n += 1\n        if n == 3:\n            print('started', flush=True)\n        time.sleep(0.1)\n    except KeyboardInterrupt:\n        pass"

// TestInterruptIgnoredSaysRestarted: a cell that ignores the interrupt of
// the interrupt tool, or of its cancelled call, has its kernel restarted;
// the results say that the state is lost, as for a timeout. (Before, they
// said "the kernel kept its state", and x was gone.)
func TestInterruptIgnoredSaysRestarted(t *testing.T) {
	t.Parallel()
	srv := newServer(t, &Options{Workspace: sharedWorkspace(t)})
	cs, started := startedClient(t, srv)
	resc, errc := callAsync(t.Context(), cs, map[string]any{"code": stubborn})
	waitStarted(t, started)
	ir := call(t, cs, "interrupt", map[string]any{})
	res, err := <-resc, <-errc
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*mcp.CallToolResult{ir, res} {
		m, _ := r.Meta[CellMetaKey].(map[string]any)
		e, _ := m["error"].(map[string]any)
		if got := text(r); strings.Contains(got, "kept its state") || !strings.Contains(got, "restarted and its state is lost") || e["kind"] != "interrupted" || e["restarted"] != true {
			t.Errorf("interrupt tool: %q %v", got, m)
		}
	}
	if got := run(t, cs, "print('x' in dir())"); got != "False" {
		t.Errorf("after the restart: %q", got)
	}

	cs2, started2 := startedClient(t, srv)
	ctx, cancel := context.WithCancel(t.Context())
	_, errc = callAsync(ctx, cs2, map[string]any{"code": stubborn})
	waitStarted(t, started2)
	cancel()
	<-errc
	if got := run(t, cs2, "print('x' in dir())"); strings.Contains(got, "kept its state") || !strings.Contains(got, "restarted and its state is lost") || !strings.HasSuffix(got, "False") {
		t.Errorf("after the cancel: %q", got)
	}
}

// TestMaxWaitAndCollect: a cell longer than max_wait answers "still
// running" with its cell id and its output so far; a call of other code
// meanwhile answers at once that it runs; collect_cell gets the rest and
// the result, and no output is lost.
func TestMaxWaitAndCollect(t *testing.T) {
	t.Parallel()
	srv := newServer(t, &Options{Workspace: sharedWorkspace(t)})
	cs := connect(t, srv, nil)
	code := "import time\nfor i in range(6):\n    print('step', i, flush=True)\n    time.sleep(1)\nprint('done')"
	res := call(t, cs, "execute_ipython_cell", map[string]any{"code": code, "max_wait": 1.5})
	m := res.Meta[CellMetaKey].(map[string]any)
	id, _ := m["cell"].(string)
	if got := text(res); res.IsError || m["running"] != true || !strings.HasPrefix(id, "cell_") || !strings.Contains(got, "step 0") || !strings.Contains(got, "still runs") {
		t.Fatalf("max_wait: %q %v", got, m)
	}
	t0 := time.Now()
	busy := call(t, cs, "execute_ipython_cell", map[string]any{"code": "print('other')"})
	if got := text(busy); !busy.IsError || !strings.Contains(got, "did not run") || !strings.Contains(got, id) || !strings.Contains(got, "collect_cell") {
		t.Errorf("a call while it runs: %q", got)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("the busy answer took %v", d)
	}
	var all strings.Builder
	all.WriteString(text(res))
	for range 20 {
		r := call(t, cs, "collect_cell", map[string]any{"wait": 2})
		all.WriteString(text(r))
		mm, ok := r.Meta[CellMetaKey].(map[string]any)
		if !ok {
			t.Fatalf("collect_cell: %q", text(r))
		}
		if mm["running"] != true {
			if got := text(r); r.IsError || !strings.HasSuffix(got, "done") || !strings.Contains(got, "step 0") {
				t.Errorf("the result: %q", got)
			}
			break
		}
	}
	for i := range 6 {
		if !strings.Contains(all.String(), "step "+string(rune('0'+i))) {
			t.Errorf("step %d was never shown: %q", i, all.String())
		}
	}
	if got := text(call(t, cs, "collect_cell", map[string]any{})); !strings.Contains(got, "No cell") {
		t.Errorf("collect with nothing left: %q", got)
	}
}

// TestMaxWaitOutputNeverDropped: a cell of the max_wait pattern prints
// more than max_output_chars between two answers, and less than the 64 KiB
// that are kept in memory before a file. Every line is in an answer or in
// the file the result names, also when it is interrupted. (Before, each
// "still running" answer and the result were cut to max_output_chars and
// no file was made: the lines in their middles were lost.)
func TestMaxWaitOutputNeverDropped(t *testing.T) {
	t.Parallel()
	ws := sharedWorkspace(t)
	srv := newServer(t, &Options{Workspace: ws})
	cs := connect(t, srv, nil)
	const n = 300 // 300 lines of 100 bytes: 30 KB
	for _, interrupt := range []bool{false, true} {
		code := fmt.Sprintf("import time\nfor i in range(%d):\n    print(f'line {i:04d} ' + 'x'*90, flush=True)\n    time.sleep(0.01)\n", n)
		if interrupt {
			code += "time.sleep(60)\n"
		}
		var all strings.Builder
		res := call(t, cs, "execute_ipython_cell", map[string]any{"code": code, "max_wait": 1})
		all.WriteString(text(res))
		for range 30 {
			m, _ := res.Meta[CellMetaKey].(map[string]any)
			if m == nil || m["running"] != true {
				break
			}
			if interrupt && strings.Contains(text(res), fmt.Sprintf("line %04d", n-1)) {
				res = call(t, cs, "interrupt", map[string]any{})
			} else {
				res = call(t, cs, "collect_cell", map[string]any{"wait": 1})
			}
			all.WriteString(text(res))
		}
		got := all.String()
		if m := spillPath.FindStringSubmatch(text(res)); m != nil {
			b, err := os.ReadFile(filepath.Join(ws, m[1]))
			if err != nil {
				t.Fatal(err)
			}
			got += string(b)
		}
		for i := range n {
			if !strings.Contains(got, fmt.Sprintf("line %04d ", i)) {
				t.Errorf("interrupt=%v: line %d is in no answer and in no file; the last answer: %q", interrupt, i, clipN(text(res), 600))
				break
			}
		}
	}
}

// TestUnansweredApprovalAnswersAtOnce: a 2026-07-28 client that leaves an
// approval unanswered (as go-sdk and Claude Code do after ten rounds) no
// longer makes the next call on the session wait for the approval
// timeout: it answers at once with the question and the ways on;
// collect_cell asks again; interrupt stops the cell; the kernel keeps its
// state.
func TestUnansweredApprovalAnswersAtOnce(t *testing.T) {
	t.Parallel()
	_, url := elicitServer(t, &Options{Approvals: ApprovalOptions{Timeout: 5 * time.Minute}})
	cs := connectHTTPAs(t, url, testToken, newVersion, &mcp.ClientOptions{
		ElicitationHandler: (&asker{}).handle,
		MultiRoundTrip:     &mcp.MultiRoundTripOptions{Disabled: true},
	})
	h := createSession(t, cs)
	res := call(t, cs, "execute_ipython_cell", map[string]any{"session": h, "code": "from mcptools.ap.tool_1 import Params, run\nx = 1\nrun(Params(s='never'))"})
	if !res.NeedsInput() {
		t.Fatalf("not an input-required result: %+v", res)
	}
	t0 := time.Now()
	busy := call(t, cs, "execute_ipython_cell", map[string]any{"session": h, "code": "print('other')"})
	got := text(busy)
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("the call on the waiting session took %v", d)
	}
	for _, want := range []string{"did not run", "waits for the client's approval of 1 call", `"s": "never"`, "collect_cell(session=", "interrupt(session=", "ApprovalTimeoutError"} {
		if !busy.IsError || !strings.Contains(got, want) {
			t.Errorf("the busy answer has no %q: %q", want, got)
		}
	}
	if got := text(call(t, cs, "list_sessions", map[string]any{})); !strings.Contains(got, "its cell waits for 1 approval(s) no call answers") {
		t.Errorf("list_sessions: %q", got)
	}
	again := call(t, cs, "collect_cell", map[string]any{"session": h})
	if !again.NeedsInput() || len(again.InputRequests) != 1 {
		t.Errorf("collect_cell did not ask again: %+v", again)
	}
	ir := call(t, cs, "interrupt", map[string]any{"session": h})
	if got := text(ir); !strings.Contains(got, "interrupted by the interrupt tool") {
		t.Errorf("interrupt: %q", got)
	}
	if got := runIn(t, cs, h, "print(x)"); got != "1" {
		t.Errorf("after the interrupt: %q", got)
	}
}

// TestLegacyCancelDuringApprovalInterrupts: a 2025-11-25 client asked by
// an elicitation request that gives up on the call (its request timeout
// sends notifications/cancelled) interrupts the cell: the next call runs
// at once, with the note, instead of answering that the cell waits.
func TestLegacyCancelDuringApprovalInterrupts(t *testing.T) {
	t.Parallel()
	_, url := elicitServer(t, &Options{Approvals: ApprovalOptions{Timeout: 5 * time.Minute}})
	gone := make(chan struct{})
	cs := connectHTTPAs(t, url, testToken, legacyVersion, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			select { // a person who never answers
			case <-ctx.Done():
			case <-gone:
			}
			return nil, errors.New("no answer")
		},
	})
	t.Cleanup(func() { close(gone) }) // before the client's Close
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_ipython_cell", Arguments: map[string]any{"code": "y = 7\n!echo approved"}}); err == nil {
		t.Fatal("the call returned without an answer")
	}
	t0 := time.Now()
	got := text(call(t, cs, "execute_ipython_cell", map[string]any{"code": "print(y * 6)"}))
	if !strings.HasSuffix(got, "42") || !strings.Contains(got, "because the client cancelled its call") {
		t.Errorf("after the cancel: %q", got)
	}
	if d := time.Since(t0); d > 30*time.Second {
		t.Errorf("the next call took %v", d)
	}
}
