package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// durableClient connects to b speaking 2026-07-28, whose sessions have
// handles.
func durableClient(t *testing.T, b *mcpBinary) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: b.url, DisableStandaloneSSE: true, HTTPClient: b.httpClient()},
		&mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// newHandle calls create_session.
func newHandle(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_session", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("create_session: %v %v", err, res)
	}
	var out struct{ Session string }
	b, _ := json.Marshal(res.StructuredContent)
	if json.Unmarshal(b, &out) != nil || out.Session == "" {
		t.Fatalf("create_session: %s", b)
	}
	return out.Session
}

// runIn runs code in session h.
func runIn(t *testing.T, cs *mcp.ClientSession, h, code string) string {
	t.Helper()
	out, isErr := callText(t, cs, "execute_ipython_cell", map[string]any{"code": code, "session": h})
	if isErr {
		t.Fatalf("cell %q in %s: %s", code, h, out)
	}
	return out
}

// TestMCPDurableRestart restarts the binary with real signals on one
// workspace and one token. SIGTERM hibernates every session, and the
// restarted server restores each at its first call. SIGKILL saves
// nothing at the end, but with --checkpoint cell each session comes back
// as it was after its last completed cell.
func TestMCPDurableRestart(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	for _, how := range []string{"sigterm", "sigkill", "gateway-sigkill", "enterprise-gateway-sigkill"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			args := []string{"--workspace", ws, "--no-sandbox", "--pool", "0", "--no-fork-server"}
			var j *testenv.Jupyter
			switch how {
			case "sigkill":
				args = append(args, "--checkpoint", "cell")
			case "gateway-sigkill", "enterprise-gateway-sigkill":
				// No snapshot: the kernels run on in the Jupyter Server
				// (or Enterprise Gateway 3.3.0, its local process proxy),
				// and the restarted front end reattaches to them.
				if how == "gateway-sigkill" {
					j = testenv.JupyterServer(t, nil)
				} else {
					j = testenv.EnterpriseGateway(t)
				}
				tok := filepath.Join(t.TempDir(), "gateway-token")
				if err := os.WriteFile(tok, []byte(j.Token+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				args = []string{"--workspace", ws, "--pool", "0", "--gateway-url", j.URL, "--gateway-token-file", tok,
					"--mcp-config", writeMCPConfig(t, map[string]any{"startgo": map[string]any{"command": mcptest.Build(t)}})}
			}
			b := startHTTP(t, args...)
			cs := durableClient(t, b)
			h1, h2 := newHandle(t, cs), newHandle(t, cs)
			runIn(t, cs, h1, "import json as j\nv = {'n': 1}\ndef f(): return v['n'] + 1")
			runIn(t, cs, h2, "w = 'two'")
			runIn(t, cs, h1, "v['n'] = 41")
			if how != "sigterm" {
				// The checkpoint of the last cell runs behind its result;
				// the next cell waits for it.
				runIn(t, cs, h1, "print(v)")
				runIn(t, cs, h2, "print(w)")
				b.cmd.Process.Signal(syscall.SIGKILL)
			} else {
				b.cmd.Process.Signal(syscall.SIGTERM)
			}
			select {
			case <-b.exited:
			case <-time.After(30 * time.Second):
				t.Fatalf("ipybox mcp did not exit after %s\n%s", how, b.stderr)
			}
			if how == "sigterm" && b.err != nil {
				t.Errorf("exit after SIGTERM: %v\n%s", b.err, b.stderr)
			}
			cs.Close()

			b2 := startHTTPCmd(t, exec.Command(os.Args[0], append([]string{"mcp", "--http", "127.0.0.1:0", "--auth-token-file", tokenFileOf(t, b)}, args...)...))
			b2.token = b.token
			cs2 := durableClient(t, b2)
			got := runIn(t, cs2, h1, "print(f(), j.dumps(1))")
			want := "names came back"
			if j != nil {
				want = "reattached"
			}
			if !strings.HasSuffix(got, "42 1") || !strings.Contains(got, want) {
				t.Errorf("the first session after %s and a restart: %q", how, got)
			}
			if j != nil {
				// The kernel's tool calls reach the new front end.
				if got := runIn(t, cs2, h1, "from mcptools.startgo.tool_1 import Params, run\nprint(run(Params(s='again')))"); got != "tool-1: again" {
					t.Errorf("a tool call after the reattach: %q", got)
				}
				if n := len(gatewayKernelIDs(t, j)); n != 2 {
					t.Errorf("the gateway runs %d kernels after the restart, want the 2 it ran", n)
				}
			}
			if got := runIn(t, cs2, h2, "print(w)"); !strings.HasSuffix(got, "two") {
				t.Errorf("the second session after %s and a restart: %q", how, got)
			}
		})
	}
}

// tokenFileOf writes b's token to a file, for a server started again with
// the same token.
func tokenFileOf(t *testing.T, b *mcpBinary) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(f, []byte(b.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// gatewayKernelIDs lists the kernels j runs.
func gatewayKernelIDs(t *testing.T, j *testenv.Jupyter) []string {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "GET", j.URL+"/api/kernels", nil)
	req.Header.Set("Authorization", "token "+j.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ks []struct{ ID string }
	if err := json.NewDecoder(resp.Body).Decode(&ks); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range ks {
		out = append(out, k.ID)
	}
	return out
}

// TestMCPGatewayCellInFlight: a cell running when its gateway front end
// is killed runs on in the kernel; the restarted front end's first call on
// the handle waits behind it, and sees what it assigned (docs/scale.md).
func TestMCPGatewayCellInFlight(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	j := testenv.JupyterServer(t, nil)
	tok := filepath.Join(t.TempDir(), "gateway-token")
	if err := os.WriteFile(tok, []byte(j.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--workspace", t.TempDir(), "--pool", "0", "--gateway-url", j.URL, "--gateway-token-file", tok}
	b := startHTTP(t, args...)
	cs := durableClient(t, b)
	h := newHandle(t, cs)
	runIn(t, cs, h, "v = 1")
	// The cell writes a marker as it starts; the kernel is the Jupyter
	// server's, on this machine.
	marker := filepath.Join(t.TempDir(), "cell-started")
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		code := fmt.Sprintf("open(%q, 'w').close()\nimport time\ntime.sleep(3)\nv = 2", marker)
		cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_ipython_cell", Arguments: map[string]any{"code": code, "session": h}})
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(marker); err == nil {
			break // the cell runs
		}
		if time.Now().After(deadline) {
			t.Fatal("the cell did not start")
		}
	}
	b.cmd.Process.Signal(syscall.SIGKILL)
	<-b.exited
	b2 := startHTTPCmd(t, exec.Command(os.Args[0], append([]string{"mcp", "--http", "127.0.0.1:0", "--auth-token-file", tokenFileOf(t, b)}, args...)...))
	b2.token = b.token
	if got := runIn(t, durableClient(t, b2), h, "print(v)"); !strings.HasSuffix(got, "2") {
		t.Errorf("after the front end died during a cell: %q, want what the cell assigned (2)", got)
	}
}

// TestMCPDurableStdio: over stdio too, SIGTERM saves the sessions of
// create_session before the exit's budget runs (the exit comes within
// 100 ms of the saves), and the next server on the workspace restores them.
func TestMCPDurableStdio(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	ws := t.TempDir()
	start := func() (*mcp.ClientSession, *exec.Cmd) {
		cmd := exec.Command(os.Args[0], "mcp", "--workspace", ws, "--pool", "0", "--no-sandbox")
		cmd.Env = append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1", "GORACE=atexit_sleep_ms=0")
		return goClient(t, &mcp.CommandTransport{Command: cmd}, nil), cmd
	}
	cs, cmd := start()
	h := newHandle(t, cs)
	runIn(t, cs, h, "v = {'n': 7}")
	exited := make(chan struct{})
	go func() { cmd.Process.Wait(); close(exited) }()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("ipybox mcp did not exit within 30s of SIGTERM")
	}
	cs2, _ := start()
	if got := runIn(t, cs2, h, "print(v['n'])"); !strings.HasSuffix(got, "7") || !strings.Contains(got, "names came back") {
		t.Errorf("after SIGTERM and a restart over stdio: %q", got)
	}
}
