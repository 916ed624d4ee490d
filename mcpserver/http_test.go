package mcpserver

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestElicitApproval runs --approval elicit with two HTTP sessions: one
// client answers elicitations (accepts the first call, declines the
// second), the other cannot be asked, so its calls are rejected.
func TestElicitApproval(t *testing.T) {
	ws := sharedWorkspace(t)
	srv := newServer(t, &Options{
		Workspace: ws,
		// Registered at start: each session learns it.
		Servers: map[string]ipybox.ServerConfig{"elicit_go": {Command: mcptest.Build(t)}},
		Approvals: ApprovalOptions{
			Mode:       ApprovalElicit,
			AllowTools: []string{"elicit_go.tool_3"},
		},
	})
	url := serveHTTP(t, srv)

	var mu sync.Mutex
	var asked []string
	answers := []string{"accept", "decline", "accept"}
	cs := connectHTTP(t, url, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, r.Params.Message)
			a := "cancel"
			if len(asked) <= len(answers) {
				a = answers[len(asked)-1]
			}
			return &mcp.ElicitResult{Action: a, Content: map[string]any{}}, nil
		},
	})
	code := "from mcptools.elicit_go.tool_1 import Params, run\nprint(run(Params(s=%q)))"

	got := run(t, cs, fmt.Sprintf(code, "first"))
	if got != "tool-1: first" {
		t.Errorf("accepted call: %q", got)
	}
	res := call(t, cs, "execute_ipython_cell", map[string]any{"code": "print('before')\n" + fmt.Sprintf(code, "second")})
	if !res.IsError || !strings.Contains(text(res), "ApprovalRejectedError") || !strings.Contains(text(res), "declined by the user") || !strings.Contains(text(res), "before") {
		t.Errorf("declined call: %q", text(res))
	}
	// An allowed tool runs without asking.
	got = run(t, cs, "from mcptools.elicit_go.tool_3 import Params, run\nprint(run(Params(name='n', count=2)).inner.count)")
	if got != "2" {
		t.Errorf("allowed tool: %q", got)
	}
	// Shell commands are asked about too.
	if got := run(t, cs, "!echo shell-ran"); got != "shell-ran" {
		t.Errorf("shell: %q", got)
	}
	mu.Lock()
	if len(asked) != 3 || !strings.Contains(asked[0], "tool-1 of server elicit_go") || !strings.Contains(asked[0], `"s": "first"`) || !strings.Contains(asked[2], "echo shell-ran") {
		t.Errorf("elicitations: %q", asked)
	}
	mu.Unlock()

	// A client without elicitation support.
	plain := connectHTTP(t, url, nil)
	res = call(t, plain, "execute_ipython_cell", map[string]any{"code": fmt.Sprintf(code, "third")})
	if !res.IsError || !strings.Contains(text(res), "does not support elicitation") {
		t.Errorf("client without elicitation: %q", text(res))
	}
}

// TestHTTPSessions checks that HTTP sessions have kernels of their own,
// share registrations, and leave no kernel behind when they end.
func TestHTTPSessions(t *testing.T) {
	ws := sharedWorkspace(t)
	testenv.CheckGoroutines(t)
	base := len(kernels(t, os.Getpid()))
	srv := newServer(t, &Options{Workspace: ws})
	url := serveHTTP(t, srv)

	t.Run("isolated", func(t *testing.T) {
		a, b := connectHTTP(t, url, nil), connectHTTP(t, url, nil)
		var wg sync.WaitGroup
		outs := make([]string, 2)
		for i, cs := range []*mcp.ClientSession{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res := call(t, cs, "execute_ipython_cell", map[string]any{"code": fmt.Sprintf("import os, time\nv = %d\ntime.sleep(0.5)\nprint(v, os.getpid())", i)})
				outs[i] = text(res)
			}()
		}
		wg.Wait()
		fa, fb := strings.Fields(outs[0]), strings.Fields(outs[1])
		if len(fa) != 2 || len(fb) != 2 || fa[0] != "0" || fb[0] != "1" || fa[1] == fb[1] {
			t.Fatalf("outputs %q %q: want own values and different kernel pids", outs[0], outs[1])
		}
		// A server registered in one session is usable in the other.
		res := call(t, a, "register_mcp_server", map[string]any{"server_name": "shared_go", "server_params": map[string]any{"command": mcptest.Build(t)}})
		if res.IsError {
			t.Fatal(text(res))
		}
		if got := run(t, b, "from mcptools.shared_go.tool_1 import Params, run\nprint(run(Params(s='from b')))"); got != "tool-1: from b" {
			t.Errorf("registered in a, called in b: %q", got)
		}
		if got := run(t, b, "print(v)"); got != "1" {
			t.Errorf("b's state: %q", got)
		}
		a.Close()
		b.Close()
		waitKernels(t, os.Getpid(), base, 15*time.Second)
	})

	t.Run("close during a cell", func(t *testing.T) {
		cs := connectHTTP(t, url, nil)
		run(t, cs, "print('up')")
		done := make(chan error, 1)
		running := filepath.Join(ws, fmt.Sprintf(".running-%d", time.Now().UnixNano()))
		t.Cleanup(func() { os.Remove(running) })
		go func() {
			_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_ipython_cell", Arguments: map[string]any{"code": fmt.Sprintf("import time; open(%q, 'w').close(); time.sleep(60)", running)}})
			done <- err
		}()
		testenv.WaitFile(t, running, 30*time.Second) // the cell runs
		// The go-sdk client's Close waits for its calls before it sends
		// DELETE; a client that gives up sends it at once.
		t0 := time.Now()
		req, _ := http.NewRequest(http.MethodDelete, url, nil)
		req.Header.Set("Mcp-Session-Id", cs.ID())
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if d := time.Since(t0); resp.StatusCode != http.StatusNoContent || d > 10*time.Second {
			t.Errorf("DELETE: status %d after %v", resp.StatusCode, d)
		}
		waitKernels(t, os.Getpid(), base, 10*time.Second)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the running call did not end")
		}
		cs.Close()
		http.DefaultClient.CloseIdleConnections()
	})

	t.Run("20 sessions", func(t *testing.T) {
		sem := make(chan struct{}, 4)
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
				hc := &http.Client{Transport: testenv.Bearer{Token: testToken}}
				cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, DisableStandaloneSSE: true, HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: legacyVersion})
				if err != nil {
					t.Error(err)
					return
				}
				defer cs.Close()
				res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "execute_ipython_cell", Arguments: map[string]any{"code": fmt.Sprintf("print(%d)", i)}})
				if err != nil || res.IsError || text(res) != fmt.Sprint(i) {
					t.Errorf("session %d: %v %v", i, err, res)
				}
			}()
		}
		wg.Wait()
		waitKernels(t, os.Getpid(), base, 20*time.Second)
		if n := srv.SessionCount(); n != 0 {
			t.Errorf("%d sessions left", n)
		}
	})
}

// TestIdleSessionTimeout checks that an idle HTTP session ends and its
// kernel stops.
func TestIdleSessionTimeout(t *testing.T) {
	ws := sharedWorkspace(t)
	base := len(kernels(t, os.Getpid()))
	srv := newServer(t, &Options{Workspace: ws, HTTP: HTTPOptions{SessionIdleTimeout: 1500 * time.Millisecond}})
	url := serveHTTP(t, srv)
	cs := connectHTTP(t, url, nil)
	if got := run(t, cs, "print('up')"); got != "up" {
		t.Fatal(got)
	}
	waitKernels(t, os.Getpid(), base+1, time.Second)
	waitKernels(t, os.Getpid(), base, 15*time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_ipython_cell", Arguments: map[string]any{"code": "1"}}); err == nil {
		t.Error("the timed-out session still answers")
	}
}

// TestAuthAndHost checks the bearer token and DNS-rebinding protection.
func TestAuthAndHost(t *testing.T) {
	t.Parallel()
	srv := newServer(t, &Options{Workspace: t.TempDir(), HTTP: HTTPOptions{AuthToken: "s3cret"}})
	url := serveHTTP(t, srv)
	body := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	for _, tc := range []struct {
		name, auth, host, origin string
		want                     int
		method, auth2            string
	}{
		{"no token", "", "", "", http.StatusUnauthorized, "", ""},
		{"wrong token", "Bearer nope", "", "", http.StatusUnauthorized, "", ""},
		{"prefix of the token", "Bearer s3cre", "", "", http.StatusUnauthorized, "", ""},
		{"empty token", "Bearer ", "", "", http.StatusUnauthorized, "", ""},
		{"other scheme", "Basic s3cret", "", "", http.StatusUnauthorized, "", ""},
		{"rebinding host", "Bearer s3cret", "evil.example.com", "", http.StatusForbidden, "", ""},
		{"cross-site origin", "Bearer s3cret", "", "https://evil.example.com", http.StatusForbidden, "", ""},
		{"null origin", "Bearer s3cret", "", "null", http.StatusForbidden, "", ""},
		{"right token", "Bearer s3cret", "", "", http.StatusOK, "", ""},
		{"lowercase scheme", "bearer s3cret", "", "", http.StatusOK, "", ""},
		{"two Authorization headers", "Bearer nope", "", "", http.StatusUnauthorized, "", "Bearer s3cret"},
		// A GET opens the event stream that carries elicitations.
		{"cross-site origin, GET", "Bearer s3cret", "", "https://evil.example.com", http.StatusForbidden, "GET", ""},
	} {
		method := cmp.Or(tc.method, "POST")
		req, _ := http.NewRequest(method, url, strings.NewReader(body))

		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		if tc.auth2 != "" {
			req.Header.Add("Authorization", tc.auth2)
		}
		if tc.host != "" {
			req.Host = tc.host
		}
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
	http.DefaultClient.CloseIdleConnections()
}
