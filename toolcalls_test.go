package ipybox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/cellctl"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

func testmcpStdio(t *testing.T) ipybox.ServerConfig {
	return ipybox.ServerConfig{Command: mcptest.Build(t)}
}

// register registers cfg as name and fails the test on error.
func register(t *testing.T, ex *ipybox.Executor, name string, cfg ipybox.ServerConfig) []ipybox.ToolModule {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	mods, err := ex.RegisterMCPServer(ctx, name, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return mods
}

// collect runs code through Stream, answers approval requests with decide
// (nil accepts all), and returns the requests, the result and the error.
// Each seen function sees every event first, as it arrives.
func collect(t *testing.T, ex *ipybox.Executor, code string, opts *ipybox.ExecOptions, decide func(*ipybox.ApprovalRequest), seen ...func(ipybox.Event)) ([]*ipybox.ApprovalRequest, []ipybox.Event, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var reqs []*ipybox.ApprovalRequest
	var events []ipybox.Event
	for ev, err := range ex.Stream(ctx, code, opts) {
		if err != nil {
			return reqs, events, err
		}
		events = append(events, ev)
		for _, f := range seen {
			f(ev)
		}
		if r, ok := ev.(*ipybox.ApprovalRequest); ok {
			reqs = append(reqs, r)
			if decide == nil {
				r.Accept()
			} else {
				decide(r)
			}
		}
	}
	return reqs, events, nil
}

func resultText(events []ipybox.Event) string {
	for _, ev := range events {
		if r, ok := ev.(*ipybox.Result); ok {
			return r.Text
		}
	}
	return "<no result>"
}

func TestToolCallsOverAllTransports(t *testing.T) {
	t.Parallel()
	ex := start(t, nil)
	servers := map[string]ipybox.ServerConfig{
		"gostdio": testmcpStdio(t),
		"gohttp":  {URL: mcptest.StartHTTP(t, "http", nil)},
		"gosse":   {URL: mcptest.StartHTTP(t, "sse", nil)},
	}
	for name, cfg := range servers {
		t.Run(name, func(t *testing.T) {
			mods := register(t, ex, name, cfg)
			var tool1 string
			for _, m := range mods {
				if m.Tool == "tool-1" {
					tool1 = m.Name
				}
			}
			if tool1 == "" {
				t.Fatalf("no module for tool-1 in %+v", mods)
			}
			code := fmt.Sprintf(`from mcptools.%[1]s.%[2]s import Params, run
from mcptools.%[1]s.tool_3 import Params as P3, run as run3
r = run(Params(s="hi"))
r3 = run3(P3(name="n", count=2))
print(type(r).__name__, r)
print(type(r3).__name__, r3.name, r3.inner.count, r3.inner.tags, type(r3.inner).__name__)`, name, tool1)
			reqs, events, err := collect(t, ex, code, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := resultText(events), "str tool-1: hi\nResult n 2 ['a', 'b'] Inner"; got != want {
				t.Errorf("text = %q, want %q", got, want)
			}
			if len(reqs) != 2 || reqs[0].Server != name || reqs[0].Tool != "tool-1" || argOf(reqs[0], "s") != "hi" || reqs[1].Tool != "tool_3" {
				t.Errorf("approval requests = %+v", reqs)
			}
		})
	}
}

func TestEverythingOverAllTransports(t *testing.T) {
	t.Parallel()
	bin := testenv.NPMBin(t, "mcp-server-everything")
	ex := start(t, nil)
	for name, cfg := range map[string]ipybox.ServerConfig{
		"evstdio": {Command: bin, Args: []string{"stdio"}},
		"evhttp":  {URL: mcptest.StartEverything(t, "streamableHttp") + "/mcp"},
		"evsse":   {URL: mcptest.StartEverything(t, "sse") + "/sse"},
	} {
		t.Run(name, func(t *testing.T) {
			register(t, ex, name, cfg)
			code := "from mcptools." + name + ".echo import Params, run\nfrom mcptools." + name + " import get_structured_content as g\n" +
				"r = g.run(g.Params(location='Chicago'))\nprint(run(Params(message='via " + name + "')), type(r).__name__, isinstance(r.humidity, (int, float)))"
			reqs, events, err := collect(t, ex, code, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := resultText(events), "Echo: via "+name+" Result True"; got != want {
				t.Errorf("text = %q, want %q", got, want)
			}
			if len(reqs) != 2 || reqs[0].Server != name || reqs[0].Tool != "get-structured-content" || argOf(reqs[0], "location") != "Chicago" {
				t.Errorf("requests = %+v", reqs)
			}
		})
	}
}

func TestEverythingToolsFromKernel(t *testing.T) {
	t.Parallel()
	bin := testenv.NPMBin(t, "mcp-server-everything")
	ex := start(t, &ipybox.Options{Approver: ipybox.ApproveAll})
	register(t, ex, "everything", ipybox.ServerConfig{Command: bin, Args: []string{"stdio"}})
	res := run(t, ex, `from mcptools.everything.echo import Params, run
from mcptools.everything import get_structured_content as gsc
print(run(Params(message="hello")))
r = gsc.run(gsc.Params(location="New York"))
print(type(r).__name__, r.temperature > -100, isinstance(r.conditions, str))`)
	if !strings.Contains(res.Text, "hello") || !strings.Contains(res.Text, "Result True True") {
		t.Errorf("text = %q", res.Text)
	}
	// The image tool: the caller gets the image, which displays and saves.
	imgs := filepath.Join(ex.Workspace(), "images") // Options.ImagesDir's default
	res = run(t, ex, `from mcptools.everything import get_tiny_image as gti
r = gti.run(gti.Params())
print(type(r).__name__, len(r.images), r.images[0].mime_type)
r.images[0].save("tiny.png")
display(r.images[0])`)
	if !strings.Contains(res.Text, "ToolResult 1 image/png") {
		t.Errorf("text = %q", res.Text)
	}
	if len(res.Images) != 1 || filepath.Dir(res.Images[0]) != imgs {
		t.Errorf("displayed image not saved in %s: %v", imgs, res.Images)
	}
	if b, err := os.ReadFile(filepath.Join(ex.Workspace(), "tiny.png")); err != nil || !strings.HasPrefix(string(b), "\x89PNG") {
		t.Errorf("saved image: %v", err)
	}
}

func TestApprovals(t *testing.T) {
	ex := start(t, nil)
	register(t, ex, "go", testmcpStdio(t))
	imports := "from mcptools.go.tool_1 import Params, run\n"

	// Rejecting raises ApprovalRejectedError, which names the rejection.
	_, _, err := collect(t, ex, imports+"run(Params(s='x'))", nil, func(r *ipybox.ApprovalRequest) { r.Reject("not today") })
	var pe *ipybox.PythonError
	if !errors.As(err, &pe) || pe.Name != "ApprovalRejectedError" || !strings.Contains(pe.Value, "not today") {
		t.Fatalf("rejected call: err = %v", err)
	}

	// Two calls, one request each; output streams around the approvals.
	code := imports + "print('before', flush=True)\na = run(Params(s='1'))\nprint('between', flush=True)\nb = run(Params(s='2'))\nprint(a, b)"
	// The approvals wait for the output printed before each call (a sync
	// marker on iopub), not for cellctl.SyncWait to pass: the time from
	// that output to the call's request is measured, which a held call
	// would make SyncWait long, whatever the load on the machine.
	var lastOutput time.Time
	var gaps []time.Duration
	reqs, events, err := collect(t, ex, code, nil, func(r *ipybox.ApprovalRequest) {
		gaps = append(gaps, time.Since(lastOutput))
		r.Accept()
	}, func(ev ipybox.Event) {
		if _, ok := ev.(*ipybox.Output); ok {
			lastOutput = time.Now()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range gaps {
		if d >= cellctl.SyncWait*3/4 {
			t.Errorf("approval %d came %v after the output before it: it waited for the sync timeout (%v)", i+1, d, cellctl.SyncWait)
		}
	}
	var order []string
	for _, ev := range events {
		switch ev := ev.(type) {
		case *ipybox.Output:
			order = append(order, strings.TrimSpace(ev.Text))
		case *ipybox.ApprovalRequest:
			order = append(order, "approve:"+argOf(ev, "s"))
		}
	}
	if got := strings.Join(order, ","); got != "before,approve:1,between,approve:2,tool-1: 1 tool-1: 2" {
		t.Errorf("event order = %s", got)
	}
	if len(reqs) != 2 {
		t.Errorf("%d requests, want 2", len(reqs))
	}
}

func TestNoApprovalWhenOff(t *testing.T) {
	t.Parallel()
	ex := start(t, &ipybox.Options{NoToolApproval: true})
	register(t, ex, "go", testmcpStdio(t))
	reqs, events, err := collect(t, ex, "from mcptools.go.tool_1 import Params, run\nrun(Params(s='free'))", nil, nil)
	if err != nil || len(reqs) != 0 || resultText(events) != "'tool-1: free'" {
		t.Errorf("err %v, %d requests, text %q", err, len(reqs), resultText(events))
	}
}

func TestExecuteUsesApprover(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	ex := start(t, &ipybox.Options{Approver: func(ctx context.Context, r *ipybox.ApprovalRequest) error {
		mu.Lock()
		seen = append(seen, r.Tool)
		mu.Unlock()
		if argOf(r, "s") == "bad" {
			return errors.New("bad input")
		}
		return nil
	}})
	register(t, ex, "go", testmcpStdio(t))
	res := run(t, ex, "from mcptools.go.tool_1 import Params, run\nrun(Params(s='good'))")
	if res.Text != "'tool-1: good'" {
		t.Errorf("text = %q", res.Text)
	}
	_, err := ex.Execute(context.Background(), "run(Params(s='bad'))", nil)
	if err == nil || !strings.Contains(err.Error(), "bad input") {
		t.Errorf("rejected by Approver: err = %v", err)
	}
	if len(seen) != 2 {
		t.Errorf("approver saw %v", seen)
	}
}

func TestTimeoutBudgetAndApproval(t *testing.T) {
	ex := start(t, &ipybox.Options{ApprovalTimeout: 700 * time.Millisecond})
	register(t, ex, "go", testmcpStdio(t))
	run(t, ex, "from mcptools.go.tool_2 import Params, run\nimport time")

	// A 4 s budget survives a 2.5 s approval wait and a 2 s sleep: the
	// wait is not counted (it is bounded by the time left, though). The
	// cell has 1.5 s to reach the approval, ample on a loaded machine.
	// (ApprovalTimeout is 0.7 s here, so this case gets its own executor.)
	ex2 := start(t, nil)
	register(t, ex2, "go", testmcpStdio(t))
	run(t, ex2, "from mcptools.go.tool_2 import Params, run\nimport time")
	slow := func(r *ipybox.ApprovalRequest) { time.AfterFunc(2500*time.Millisecond, func() { r.Accept() }) }
	if _, _, err := collect(t, ex2, "run(Params())\ntime.sleep(2)", &ipybox.ExecOptions{Timeout: 4 * time.Second}, slow); err != nil {
		t.Errorf("4 s budget with a 2.5 s approval and a 2 s sleep: %v", err)
	}
	// An approval cannot outlast what is left of the budget: a 5 s
	// budget, an approval never answered (whatever time the cell took to
	// ask counts: the budget is not meant to expire before it asks).
	unanswered := func(*ipybox.ApprovalRequest) {}
	if _, _, err := collect(t, ex2, "run(Params())", &ipybox.ExecOptions{Timeout: 5 * time.Second}, unanswered); err == nil || !strings.Contains(err.Error(), "ApprovalTimeoutError") {
		t.Errorf("5 s budget with an unanswered approval: err = %v, want ApprovalTimeoutError", err)
	}

	// A 0.2 s budget fails after an instant approval and sleep(0.5).
	_, _, err := collect(t, ex, "run(Params())\ntime.sleep(0.5)", &ipybox.ExecOptions{Timeout: 200 * time.Millisecond}, nil)
	if !errors.Is(err, ipybox.ErrTimeout) {
		t.Errorf("0.2 s budget, sleep 0.5: err = %v", err)
	}
	// The tool's own run time counts.
	_, _, err = collect(t, ex, "run(Params(delay=0.5))", &ipybox.ExecOptions{Timeout: 200 * time.Millisecond}, nil)
	if !errors.Is(err, ipybox.ErrTimeout) {
		t.Errorf("0.2 s budget, tool takes 0.5 s: err = %v", err)
	}
	// An approval that hits ApprovalTimeout raises ApprovalTimeoutError ...
	never := func(*ipybox.ApprovalRequest) {}
	_, _, err = collect(t, ex, "run(Params())", &ipybox.ExecOptions{Timeout: 5 * time.Second}, never)
	var pe *ipybox.PythonError
	if !errors.As(err, &pe) || pe.Name != "ApprovalTimeoutError" {
		t.Errorf("unanswered approval: err = %v", err)
	}
	// ... and the cell's own timeout still holds afterwards.
	begin := time.Now()
	_, _, err = collect(t, ex, "try:\n    run(Params())\nexcept Exception:\n    pass\ntime.sleep(5)", &ipybox.ExecOptions{Timeout: time.Second}, never)
	if !errors.Is(err, ipybox.ErrTimeout) {
		t.Errorf("budget after an approval timeout: err = %v", err)
	}
	if d := time.Since(begin); d > 4*time.Second {
		t.Errorf("budget after an approval timeout took %v (0.7 s wait + 1 s budget)", d)
	}
}

func TestCancelWhileApprovalPending(t *testing.T) {
	ex := start(t, nil)
	register(t, ex, "go", testmcpStdio(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	begin := time.Now()
	var err error
	for ev, e := range ex.Stream(ctx, "from mcptools.go.tool_2 import Params, run\nrun(Params())", nil) {
		if _, ok := ev.(*ipybox.ApprovalRequest); ok {
			cancel() // leave the request unanswered
		}
		if e != nil {
			err = e
		}
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v", err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	if got := run(t, ex, "1 + 1").Text; got != "2" {
		t.Errorf("after cancel: %q", got)
	}
}

func TestStopIteratingRejectsAndInterrupts(t *testing.T) {
	ex := start(t, nil)
	register(t, ex, "go", testmcpStdio(t))
	begin := time.Now()
	for ev := range ex.Stream(context.Background(), "from mcptools.go.tool_2 import Params, run\nrun(Params())\nimport time\ntime.sleep(30)", nil) {
		if _, ok := ev.(*ipybox.ApprovalRequest); ok {
			break
		}
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("stopping took %v", d)
	}
	if got := run(t, ex, "'alive'").Text; got != "'alive'" {
		t.Errorf("after stopping: %q", got)
	}
}

func TestResetStopsStdioServers(t *testing.T) {
	t.Parallel()
	ex := start(t, &ipybox.Options{NoToolApproval: true})
	register(t, ex, "go", testmcpStdio(t))
	pid := run(t, ex, "from mcptools.go.pid import Params, run\nrun(Params())").Text
	if err := ex.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := 0
	fmt.Sscanf(strings.Trim(pid, "'"), "%d", &n)
	if n == 0 {
		t.Fatalf("pid = %q", pid)
	}
	if err := processGone(n, 3*time.Second); err != nil {
		t.Errorf("stdio server after Reset: %v", err)
	}
	pid2 := run(t, ex, "from mcptools.go.pid import Params, run\nrun(Params())").Text
	if pid2 == pid || pid2 == "" {
		t.Errorf("server not restarted: %q then %q", pid, pid2)
	}
}

func processGone(pid int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if !testenv.Alive(pid) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("process %d still running after %v", pid, within)
}

func TestRegistrationPersists(t *testing.T) {
	ws := t.TempDir()
	t.Setenv("IPYBOX_TEST_BIN_ARG", "unused")
	ex := start(t, &ipybox.Options{WorkDir: ws})
	cfg := testmcpStdio(t)
	cfg.Env = map[string]string{"TOKEN": "${IPYBOX_TEST_BIN_ARG}"}
	register(t, ex, "go", cfg)
	b, err := os.ReadFile(filepath.Join(ws, ".ipybox", "servers.json"))
	if err != nil || !strings.Contains(string(b), "${IPYBOX_TEST_BIN_ARG}") || strings.Contains(string(b), "unused") {
		t.Errorf("servers.json keeps placeholders, not values: %s (%v)", b, err)
	}
	ex.Close()
	ex2 := start(t, &ipybox.Options{WorkDir: ws, NoToolApproval: true})
	if got := ex2.MCPServers(); len(got) != 1 || got[0] != "go" {
		t.Errorf("servers after restart: %v", got)
	}
	if got := run(t, ex2, "from mcptools.go.tool_1 import Params, run\nrun(Params(s='back'))").Text; got != "'tool-1: back'" {
		t.Errorf("call after restart: %q", got)
	}
}

func TestRegisterErrors(t *testing.T) {
	t.Parallel()
	ex := start(t, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		cfg  ipybox.ServerConfig
		want string
	}{
		{"../x", testmcpStdio(t), "../x"},
		{"class", testmcpStdio(t), "keyword"},
		{"ok", ipybox.ServerConfig{Command: "/nonexistent/server"}, "/nonexistent/server"},
		{"ok", ipybox.ServerConfig{URL: "http://h/${IPYBOX_TEST_MISSING_VAR}"}, "IPYBOX_TEST_MISSING_VAR"},
		{"ok", ipybox.ServerConfig{}, "command"},
	} {
		_, err := ex.RegisterMCPServer(ctx, tc.name, tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("RegisterMCPServer(%q, %+v): err = %v, want it to mention %q", tc.name, tc.cfg, err, tc.want)
		}
	}
	if got := ex.MCPServers(); len(got) != 0 {
		t.Errorf("failed registrations were kept: %v", got)
	}
	if _, err := os.Stat(filepath.Join(ex.Workspace(), "mcptools", "ok")); !os.IsNotExist(err) {
		t.Errorf("failed registration wrote modules: %v", err)
	}
}

// TestRegisterDoesNotWaitForACell: a registration while a cell runs
// returns without waiting for it, and the next cell imports the new
// modules, also when a server is registered again under the same name
// (the kernel drops its cached imports first).
func TestRegisterDoesNotWaitForACell(t *testing.T) {
	t.Parallel()
	ex := start(t, nil)
	register(t, ex, "go", testmcpStdio(t))
	run(t, ex, "import mcptools.go.tool_1 as m1\nfirst = m1")
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		var once sync.Once
		for ev, err := range ex.Stream(context.Background(), "import time\nprint('running', flush=True)\ntime.sleep(120)", nil) {
			if err != nil {
				done <- err
				return
			}
			if o, ok := ev.(*ipybox.Output); ok && strings.Contains(o.Text, "running") {
				once.Do(func() { close(started) })
			}
		}
		done <- nil
	}()
	select {
	case <-started:
	case <-time.After(60 * time.Second):
		t.Fatal("the cell did not start")
	}
	register(t, ex, "go", testmcpStdio(t))
	select {
	case err := <-done:
		t.Fatalf("the registration returned only after the 120 s cell ended (%v)", err)
	default: // it did not wait for the cell
	}
	ex.Interrupt()
	select {
	case err := <-done:
		var pe *ipybox.PythonError
		if !errors.As(err, &pe) || pe.Name != "KeyboardInterrupt" {
			t.Errorf("the interrupted cell: %v, want KeyboardInterrupt", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the interrupted cell did not end")
	}
	// The re-registration regenerated the modules: the next cell must
	// import them afresh, not reuse the cached module object.
	if got := run(t, ex, "import mcptools.go.tool_1 as m1\nprint(m1 is first)").Text; got != "False" {
		t.Errorf("after re-registering, the cached module was kept: %q", got)
	}
}

// argOf returns the string argument name of a tool call's request, or "".
func argOf(r *ipybox.ApprovalRequest, name string) string {
	var args map[string]any
	json.Unmarshal(r.Args, &args)
	s, _ := args[name].(string)
	return s
}
