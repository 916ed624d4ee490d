package mcpserver

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestWarmPoolAndForkServer: sessions take warm kernels; unsandboxed
// kernels are forked from the fork server; sessions share no state; a
// registration made after a warm kernel started still reaches it.
func TestWarmPoolAndForkServer(t *testing.T) {
	testenv.NeedsPython(t)
	srv := newServer(t, &Options{Workspace: t.TempDir(), Sessions: SessionOptions{Pool: 2}})
	deadline := time.Now().Add(60 * time.Second)
	for srv.factory.warm.Ready() < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if srv.factory.warm.Ready() != 2 {
		t.Fatalf("the pool has %d warm kernels, want 2", srv.factory.warm.Ready())
	}
	url := serveHTTP(t, srv)
	a := connectHTTP(t, url, nil)
	run(t, a, "secret = 'only in a'")
	// A registration after the warm kernels started.
	if out := call(t, a, "register_mcp_server", map[string]any{"server_name": "go", "server_params": map[string]any{"command": mcptest.Build(t)}}); out.IsError {
		t.Fatal(text(out))
	}
	b := connectHTTP(t, url, nil)
	if got := run(t, b, "print('secret' in dir())"); got != "False" {
		t.Errorf("session b sees a's state: %q", got)
	}
	if got := run(t, b, "from mcptools.go.tool_1 import Params, run\nprint(run(Params(s='b')))"); got != "tool-1: b" {
		t.Errorf("the registration did not reach a warm kernel: %q", got)
	}
	// Forked: a kernel's parent is the fork server.
	forked := 0
	for _, p := range testenv.Descendants(os.Getpid()) {
		if strings.Contains(p.Cmdline, kernel.ZygoteMarker) {
			forked++
		}
	}
	if forked < 3 { // the fork server and two kernels
		t.Errorf("%d processes of the fork server; want it and the sessions' kernels", forked)
	}
}

// TestMaxSessions: connections are accepted past the limit, which counts
// kernels; the first cell of one session too many gets an error that says
// why, not a hang; when a session ends, a new one gets its kernel. Each
// principal has a limit of its own too.
func TestMaxSessions(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	srv := newServer(t, &Options{
		Workspace: t.TempDir(),
		Sessions: SessionOptions{
			MaxSessions:             3,
			MaxSessionsPerPrincipal: 2,
		},
		HTTP: HTTPOptions{
			Principals: map[string]string{"bob": "bob-token-0123456789"},
		},
	})
	url := serveHTTP(t, srv)
	a := connectHTTP(t, url, nil)
	b := connectHTTP(t, url, nil)
	c := connectHTTP(t, url, nil)
	run(t, a, "1")
	run(t, b, "1")
	res := call(t, c, "execute_ipython_cell", map[string]any{"code": "1"})
	if !res.IsError || !strings.Contains(text(res), "--max-sessions-per-principal") {
		t.Fatalf("a third kernel of one principal: %q", text(res))
	}
	bob := connectHTTPAs(t, url, "bob-token-0123456789", newVersion, nil)
	h := createSession(t, bob)
	runIn(t, bob, h, "1")
	h2 := createSession(t, bob)
	res = call(t, bob, "execute_ipython_cell", map[string]any{"code": "1", "session": h2})
	if !res.IsError || !strings.Contains(text(res), "--max-sessions)") {
		t.Fatalf("a fourth kernel: %q", text(res))
	}
	a.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		res := call(t, c, "execute_ipython_cell", map[string]any{"code": "print('in')"})
		if !res.IsError {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no kernel after a session ended: %q", text(res))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestElicitationBoundedByCell: an unanswered approval question waits no
// longer than the cell's timeout.
func TestElicitationBoundedByCell(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	srv := newServer(t, &Options{
		Workspace: t.TempDir(),
		Servers:   map[string]ipybox.ServerConfig{"go": {Command: mcptest.Build(t)}},
		Approvals: ApprovalOptions{
			Mode: ApprovalElicit,
		},
	})
	var mu sync.Mutex
	asked := 0
	cs := connectHTTP(t, serveHTTP(t, srv), &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			mu.Lock()
			asked++
			mu.Unlock()
			<-ctx.Done() // a person who never answers
			return nil, ctx.Err()
		},
	})
	t0 := time.Now()
	res := call(t, cs, "execute_ipython_cell", map[string]any{"code": "from mcptools.go.tool_1 import Params, run\nrun(Params(s='x'))", "timeout": 3})
	d := time.Since(t0)
	if d > 20*time.Second {
		t.Errorf("the cell waited %v for an answer; want about its 3 s timeout", d)
	}
	if !res.IsError || !strings.Contains(text(res), "ApprovalTimeoutError") && !strings.Contains(text(res), "timed out") {
		t.Errorf("result: %s", short(text(res)))
	}
	mu.Lock()
	defer mu.Unlock()
	if asked != 1 {
		t.Errorf("asked %d times, want 1", asked)
	}
}
