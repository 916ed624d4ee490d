package mcpserver

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// durableCells make state of every kind, and an open file that cannot be
// saved.
const durableCells = `import numpy as np
x = np.arange(5)
def f():
    return int(x.sum()) + k
k = 32
class P:
    def __init__(self, v):
        self.v = v
p = P("kept")
fh = open("durable-test.txt", "w")`

// durableCheck prints what durableCells made: "42 kept False".
const durableCheck = `print(f(), p.v, "fh" in globals())`

// sessionInfos calls list_sessions.
func sessionInfos(t *testing.T, cs *mcp.ClientSession) []sessionInfo {
	t.Helper()
	res := call(t, cs, "list_sessions", map[string]any{})
	var out listOut
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("list_sessions: %s", b)
	}
	return out.Sessions
}

// waitHibernated waits until session h is hibernated, and fails t after d.
func waitHibernated(t *testing.T, srv *Server, cs *mcp.ClientSession, h string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		for _, s := range sessionInfos(t, cs) {
			if s.Session == h && s.Hibernated && !s.Kernel && srv.KernelCount() == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("session not hibernated after %v: %+v, %d kernels", d, sessionInfos(t, cs), srv.KernelCount())
		}
	}
}

// TestHibernateIdle: a session idle for HibernateAfter hibernates, on
// every backend. A local kernel saves its namespace and stops (no kernel
// process is left), a gateway one is detached from and runs on; the next
// call brings the state back, and its result says what came back and
// what did not (the open file).
func TestHibernateIdle(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	for _, backend := range []string{"local", "sandbox", "container", "gateway"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			o := &Options{Workspace: ws, Durability: DurabilityOptions{HibernateAfter: time.Second}, Sessions: SessionOptions{NoZygote: true}}
			var j *testenv.Jupyter
			switch backend {
			case "sandbox":
				testenv.NeedsTool(t, "bwrap")
				o.Sandbox = ipybox.DefaultSandbox()
			case "container":
				testenv.NeedsDocker(t)
				o.Container = &ipybox.ContainerConfig{}
			case "gateway":
				j = testenv.JupyterServer(t, nil)
				o.Gateway = &ipybox.GatewayConfig{URL: j.URL, Token: j.Token}
			}
			srv := newServer(t, o)
			cs := connectHTTPAs(t, serveHTTP(t, srv), testToken, newVersion, nil)
			h := createSession(t, cs)
			runIn(t, cs, h, durableCells)
			var kernelID string
			if j != nil {
				kernelID = gatewayKernels(t, j)[0]["id"].(string)
			}
			waitHibernated(t, srv, cs, h, 30*time.Second)
			if backend == "local" || backend == "sandbox" {
				if k := kernels(t, os.Getpid()); len(k) != 0 {
					// Other tests run in parallel: only this server's
					// count is exact.
					t.Logf("kernel processes of the test binary while hibernated: %v", k)
				}
			}
			if j != nil {
				if ks := gatewayKernels(t, j); len(ks) != 1 || ks[0]["id"] != kernelID {
					t.Errorf("gateway kernels while detached: %v, want %s alone", ks, kernelID)
				}
			}
			res := call(t, cs, "execute_ipython_cell", map[string]any{"code": durableCheck, "session": h})
			got := text(res)
			if res.IsError || !strings.Contains(got, "42 kept") {
				t.Fatalf("after the hibernation: %q", got)
			}
			switch backend {
			case "gateway":
				if !strings.Contains(got, "42 kept True") || !strings.Contains(got, "reattached") {
					t.Errorf("a gateway session's kernel keeps everything, the open file too: %q", got)
				}
			default:
				for _, want := range []string{"hibernated at", "names came back", "fh (an open file", "imported again: np = numpy", "42 kept False"} {
					if !strings.Contains(got, want) {
						t.Errorf("the first result after the restore lacks %q: %q", want, got)
					}
				}
			}
			// The note comes once.
			if got := runIn(t, cs, h, "print('again')"); got != "again" {
				t.Errorf("the second result: %q", got)
			}
		})
	}
}

// TestShutdownRestart: Shutdown hibernates the sessions of
// create_session, and a server started on the same workspace accepts
// their handles: the first call restores each, from any connection with
// the same token; another token's call gets the unknown session's answer.
func TestShutdownRestart(t *testing.T) {
	testenv.CheckGoroutines(t)
	testenv.NeedsPython(t)
	ws := t.TempDir()
	principals := map[string]string{"alice": "alice-token-0123456789", "bob": "bob-token-0123456789"}
	srv := newServer(t, &Options{Workspace: ws, HTTP: HTTPOptions{Principals: principals}, Sessions: SessionOptions{NoZygote: true}})
	cs := connectHTTPAs(t, serveHTTP(t, srv), principals["alice"], newVersion, nil)
	h1, h2 := createSession(t, cs), createSession(t, cs)
	runIn(t, cs, h1, durableCells)
	runIn(t, cs, h2, "y = 'second'")
	h3 := createSession(t, cs) // never ran a cell
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	// The state folder holds digests, not handles.
	ents, _ := os.ReadDir(filepath.Join(ws, ".ipybox", "sessions"))
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(ws, ".ipybox", "sessions", e.Name()))
		for _, h := range []string{h1, h2, h3} {
			if strings.Contains(e.Name()+string(b), h) {
				t.Errorf("the state folder holds a handle in clear: %s", e.Name())
			}
		}
	}

	srv2 := newServer(t, &Options{Workspace: ws, HTTP: HTTPOptions{Principals: principals}, Sessions: SessionOptions{NoZygote: true}})
	url := serveHTTP(t, srv2)
	bob := connectHTTPAs(t, url, principals["bob"], newVersion, nil)
	if res := call(t, bob, "execute_ipython_cell", map[string]any{"code": "1", "session": h1}); !res.IsError || !strings.Contains(text(res), "unknown session") {
		t.Errorf("another principal's call on a stored handle: %q", text(res))
	}
	alice := connectHTTPAs(t, url, principals["alice"], newVersion, nil)
	if n := len(sessionInfos(t, alice)); n != 3 {
		t.Errorf("list_sessions after the restart lists %d sessions, want 3", n)
	}
	if got := runIn(t, alice, h1, durableCheck); !strings.Contains(got, "42 kept False") || !strings.Contains(got, "ipybox mcp stopped") {
		t.Errorf("the first session after the restart: %q", got)
	}
	if got := runIn(t, alice, h2, "print(y)"); !strings.Contains(got, "second") {
		t.Errorf("the second session after the restart: %q", got)
	}
	if got := runIn(t, alice, h3, "print('fresh')"); got != "fresh" {
		t.Errorf("a session without a kernel after the restart: %q", got)
	}
	if res := call(t, alice, "close_session", map[string]any{"session": h2}); res.IsError {
		t.Fatalf("close_session: %s", text(res))
	}
	srv2.Close()
	srv3 := newServer(t, &Options{Workspace: ws, HTTP: HTTPOptions{Principals: principals}, Sessions: SessionOptions{NoZygote: true}})
	a3 := connectHTTPAs(t, serveHTTP(t, srv3), principals["alice"], newVersion, nil)
	if res := call(t, a3, "execute_ipython_cell", map[string]any{"code": "1", "session": h2}); !res.IsError || !strings.Contains(text(res), "unknown session") {
		t.Errorf("a closed session after a restart: %q", text(res))
	}
	// Close (no Shutdown) kept h1's last snapshot: the one restored
	// above, saved again by nothing since.
	if got := runIn(t, a3, h1, "print(k)"); !strings.Contains(got, "32") {
		t.Errorf("after a Close and a restart: %q", got)
	}
}

// TestCheckpointCell: with CheckpointCell, every completed cell is saved
// before its result, so that a server stopped without a save (Close, as
// after SIGKILL) comes back as it was after the last cell.
func TestCheckpointCell(t *testing.T) {
	testenv.CheckGoroutines(t)
	testenv.NeedsPython(t)
	ws := t.TempDir()
	srv := newServer(t, &Options{Workspace: ws, Durability: DurabilityOptions{Checkpoint: CheckpointCell}, Sessions: SessionOptions{NoZygote: true}})
	cs := connectHTTPAs(t, serveHTTP(t, srv), testToken, newVersion, nil)
	h := createSession(t, cs)
	runIn(t, cs, h, "a = 1")
	runIn(t, cs, h, "a += 1\nimport threading\nth = threading.Thread(target=print)")
	// The next result says what the checkpoint could not keep.
	if got := runIn(t, cs, h, "a += 1"); !strings.Contains(got, "th (a thread") {
		t.Errorf("the result after a checkpoint that left a thread out: %q", got)
	}
	// The last cell's checkpoint was saved before its result.
	srv.Close()
	srv2 := newServer(t, &Options{Workspace: ws, Sessions: SessionOptions{NoZygote: true}})
	cs2 := connectHTTPAs(t, serveHTTP(t, srv2), testToken, newVersion, nil)
	if got := runIn(t, cs2, h, "print(a)"); !strings.HasSuffix(got, "3") || !strings.Contains(got, "th (a thread") {
		t.Errorf("after the restart: %q, want 3 and the thread named", got)
	}
}

// TestCheckpointBeforeResult: under CheckpointCell a cell's result is
// sent once its checkpoint is saved, so that a server stopped right after
// the result without a save (Close, as after SIGKILL) brings the cell
// back. The save used to start after the result: `zz = 100` answered,
// then gone after the restart.
func TestCheckpointBeforeResult(t *testing.T) {
	testenv.CheckGoroutines(t)
	testenv.NeedsPython(t)
	ws := t.TempDir()
	srv := newServer(t, &Options{Workspace: ws, Durability: DurabilityOptions{Checkpoint: CheckpointCell}, Sessions: SessionOptions{NoZygote: true}})
	cs := connectHTTPAs(t, serveHTTP(t, srv), testToken, newVersion, nil)
	h := createSession(t, cs)
	runIn(t, cs, h, "zz = 99")
	runIn(t, cs, h, "zz = 100\nbig = list(range(200000))")
	srv.Close() // at once: no wait for a save behind the result
	srv2 := newServer(t, &Options{Workspace: ws, Sessions: SessionOptions{NoZygote: true}})
	cs2 := connectHTTPAs(t, serveHTTP(t, srv2), testToken, newVersion, nil)
	got := runIn(t, cs2, h, "print(zz, len(big))")
	if !strings.HasSuffix(got, "100 200000") {
		t.Errorf("after the restart: %q, want 100 200000", got)
	}
	// The note says the server ended without hibernating it, not that
	// it hibernated when "ipybox mcp stopped".
	if !strings.Contains(got, "stopped without hibernating: ipybox mcp was killed or crashed after its last call, at ") || strings.Contains(got, "ipybox mcp stopped") {
		t.Errorf("the restore note after a stop without a save: %q", got)
	}
}
