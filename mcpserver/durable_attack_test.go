package mcpserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// snapshotPath is the snapshot file of session h of srv.
func snapshotPath(t *testing.T, srv *Server, ws, h string) string {
	t.Helper()
	x := srv.sessions.store.get(h)
	if x == nil {
		t.Fatalf("no session %s", h)
	}
	x.mu.Lock()
	snap := x.snap
	x.mu.Unlock()
	if !folderName(snap) {
		t.Fatalf("session %s has no snapshot folder (%q)", h, snap)
	}
	return filepath.Join(ws, ".ipybox", "snapshots", snap, ipybox.SnapshotFile)
}

// shutdown hibernates srv's sessions, as SIGTERM does.
func shutdown(t *testing.T, srv *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// TestHostileSnapshot: a truncated snapshot, one that is not a snapshot,
// and one whose unpickling kills its kernel (kernel code planted an
// object whose reduce calls os._exit) each cost their own session its
// state, with a message that says so, and nothing else: the server serves
// on, the session runs on in a fresh kernel, and a session beside them
// comes back whole.
func TestHostileSnapshot(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	ws := t.TempDir()
	srv := newServer(t, &Options{Workspace: ws, Sessions: SessionOptions{NoZygote: true}})
	cs := connectHTTPAs(t, serveHTTP(t, srv), testToken, newVersion, nil)
	hs := map[string]string{}
	for _, name := range []string{"truncated", "garbage", "killer", "bystander"} {
		hs[name] = createSession(t, cs)
	}
	runIn(t, cs, hs["truncated"], "v = list(range(1000))")
	runIn(t, cs, hs["garbage"], "v = 1")
	runIn(t, cs, hs["killer"], "import os\nclass K:\n    def __reduce__(self):\n        return (os._exit, (3,))\nk = K()\nv = 1")
	runIn(t, cs, hs["bystander"], "v = 'intact'")
	paths := map[string]string{}
	for name, h := range hs {
		paths[name] = snapshotPath(t, srv, ws, h)
	}
	shutdown(t, srv)

	b, err := os.ReadFile(paths["truncated"])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(paths["truncated"], b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(paths["garbage"], []byte(strings.Repeat("\x80\x05 not a snapshot at all ", 8)), 0o600); err != nil {
		t.Fatal(err)
	}

	srv2 := newServer(t, &Options{Workspace: ws, Sessions: SessionOptions{NoZygote: true}})
	cs2 := connectHTTPAs(t, serveHTTP(t, srv2), testToken, newVersion, nil)
	for name, want := range map[string]string{"truncated": "truncated", "garbage": "not an ipybox snapshot", "killer": "could not be restored"} {
		got := runIn(t, cs2, hs[name], "print('v' in globals())")
		if !strings.Contains(got, "state was lost") || !strings.Contains(got, want) || !strings.HasSuffix(got, "False") {
			t.Errorf("%s snapshot: the first result is %q, want a note with %q, then a fresh kernel", name, got, want)
		}
		if got := runIn(t, cs2, hs[name], "v = 2\nprint(v)"); got != "2" {
			t.Errorf("%s: the session after the failed restore: %q", name, got)
		}
	}
	if got := runIn(t, cs2, hs["bystander"], "print(v)"); !strings.HasSuffix(got, "intact") || !strings.Contains(got, "names came back") {
		t.Errorf("the session beside them: %q", got)
	}
}

// TestSnapshotBudget: a value past the session's budget is left out and
// named, and what fits comes back; once the workspace's budget is taken,
// a hibernation saves nothing, and the next result says why and what to
// do.
func TestSnapshotBudget(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	ws := t.TempDir()
	o := &Options{Workspace: ws, Sessions: SessionOptions{NoZygote: true}, Durability: DurabilityOptions{SnapshotBytes: 300 << 10, SnapshotWorkspaceBytes: 300 << 10}}
	srv := newServer(t, o)
	cs := connectHTTPAs(t, serveHTTP(t, srv), testToken, newVersion, nil)
	a, b := createSession(t, cs), createSession(t, cs)
	runIn(t, cs, a, "fits = bytes(250_000)\nhuge = bytes(400_000)\nk = 1")
	runIn(t, cs, b, "k = 2")
	x := srv.sessions.store.get(a)
	if !x.hibernate(t.Context(), "test", false) {
		t.Fatal("session a did not hibernate")
	}
	y := srv.sessions.store.get(b)
	if !y.hibernate(t.Context(), "test", false) {
		t.Fatal("session b did not hibernate")
	}
	got := runIn(t, cs, a, "print(len(fits), k, 'huge' in globals())")
	if !strings.Contains(got, "huge (over the snapshot's size limit") || !strings.HasSuffix(got, "250000 1 False") {
		t.Errorf("a session past its budget: %q", got)
	}
	got = runIn(t, cs, b, "print('k' in globals())")
	if !strings.Contains(got, "could not be saved") || !strings.Contains(got, "--snapshot-workspace-budget") || !strings.HasSuffix(got, "False") {
		t.Errorf("a session past the workspace's budget: %q", got)
	}
}

// TestSnapshotReplace: a sandboxed or containerised kernel cannot see
// another session's snapshot folder, nor write a snapshot there: the
// folders of .ipybox/snapshots but its own are hidden. The victim's handle restores
// its own state.
func TestSnapshotReplace(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	for _, backend := range []string{"sandbox", "container"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			o := &Options{Workspace: t.TempDir(), Sessions: SessionOptions{NoZygote: true}}
			if backend == "sandbox" {
				testenv.NeedsTool(t, "bwrap")
				o.Sandbox = ipybox.DefaultSandbox()
			} else {
				testenv.NeedsDocker(t)
				o.Container = &ipybox.ContainerConfig{}
			}
			snapshotReplace(t, o)
		})
	}
}

func snapshotReplace(t *testing.T, o *Options) {
	ws := o.Workspace
	srv := newServer(t, o)
	cs := connectHTTPAs(t, serveHTTP(t, srv), testToken, newVersion, nil)
	victim, attacker := createSession(t, cs), createSession(t, cs)
	runIn(t, cs, victim, "secret = 'victim'")
	runIn(t, cs, attacker, "secret = 'attacker'")
	vpath := snapshotPath(t, srv, ws, victim)
	x := srv.sessions.store.get(victim)
	if !x.hibernate(t.Context(), "test", false) {
		t.Fatal("the victim did not hibernate")
	}
	rel, _ := filepath.Rel(ws, vpath)
	// The attacker knows the victim's folder (as if it guessed the random
	// name), saves its own namespace, and tries to put it there: by a
	// copy, by a link, by listing the folder.
	code := `import os, shutil
rel = ` + pyString(rel) + `
out = []
out.append(sorted(os.listdir(".ipybox/snapshots")) if os.path.isdir(".ipybox/snapshots") else "none")
for attempt in ("write", "mkdir", "link"):
    try:
        if attempt == "write":
            open(rel, "wb").write(b"IPYBOX-SNAPSHOT 1\n")
        elif attempt == "mkdir":
            os.makedirs(os.path.dirname(rel), exist_ok=True)
            open(rel, "wb").write(b"IPYBOX-SNAPSHOT 1\n")
        else:
            os.symlink("/etc/passwd", rel)
        out.append(attempt + " succeeded")
    except OSError as e:
        out.append(attempt + " refused")
print(out)`
	got := runIn(t, cs, attacker, code)
	t.Logf("the attacker saw: %s", got)
	if strings.Contains(got, "succeeded") || strings.Contains(got, filepath.Base(filepath.Dir(vpath))) {
		t.Errorf("the attacker reached the victim's snapshot: %s", got)
	}
	if got := runIn(t, cs, victim, "print(secret)"); !strings.HasSuffix(got, "victim") {
		t.Errorf("the victim after the attempt: %q", got)
	}
}

// pyString quotes s for Python.
func pyString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// TestShutdownWaitsForBudget: at a shutdown every session saves at once,
// and the saves in flight hold room in the workspace's budget; a save that
// finds none left by them waits for one to end, rather than failing. Here
// the budget holds two sessions' worth: all five are saved.
func TestShutdownWaitsForBudget(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	ws := t.TempDir()
	o := &Options{Workspace: ws, Sessions: SessionOptions{NoZygote: true}, Durability: DurabilityOptions{SnapshotBytes: 1 << 20, SnapshotWorkspaceBytes: 2 << 20}}
	srv := newServer(t, o)
	cs := connectHTTPAs(t, serveHTTP(t, srv), testToken, newVersion, nil)
	var hs []string
	for i := range 5 {
		h := createSession(t, cs)
		runIn(t, cs, h, "v = "+strings.Repeat("9", i+1))
		hs = append(hs, h)
	}
	shutdown(t, srv)
	srv2 := newServer(t, o)
	cs2 := connectHTTPAs(t, serveHTTP(t, srv2), testToken, newVersion, nil)
	for i, h := range hs {
		if got := runIn(t, cs2, h, "print(v)"); !strings.HasSuffix(got, strings.Repeat("9", i+1)) || !strings.Contains(got, "names came back") {
			t.Errorf("session %d after the shutdown: %q", i, got)
		}
	}
}

// TestGatewaySecondFrontEnd: two front ends on one state folder and one
// gateway serve the same handle. The second reattaches to the kernel the
// first started, state intact; the kernel's tool calls follow the front
// end that served the last call. A local session, by contrast, is run by
// one process at a time: the other's call gets an error that says where
// it runs.
func TestGatewaySecondFrontEnd(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	for _, kind := range []string{"gateway", "enterprise-gateway"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var j *testenv.Jupyter
			if kind == "gateway" {
				j = testenv.JupyterServer(t, nil)
			} else {
				j = testenv.EnterpriseGateway(t) // Enterprise Gateway 3.3.0, local process proxy
			}
			ws := t.TempDir()
			o := func() *Options {
				return &Options{Workspace: ws, Gateway: &ipybox.GatewayConfig{URL: j.URL, Token: j.Token}}
			}
			a, b := newServer(t, o()), newServer(t, o())
			ca := connectHTTPAs(t, serveHTTP(t, a), testToken, newVersion, nil)
			cb := connectHTTPAs(t, serveHTTP(t, b), testToken, newVersion, nil)
			h := createSession(t, ca)
			const url = "print(os.environ['IPYBOX_TOOL_URL'])"
			urlA := runIn(t, ca, h, "import os\nv = 41\n"+url)
			got := runIn(t, cb, h, "v += 1\nprint(v)\n"+url)
			if !strings.Contains(got, "42\n") || !strings.Contains(got, "reattached") {
				t.Errorf("the second front end: %q", got)
			}
			if strings.HasSuffix(got, urlA) {
				t.Errorf("the kernel's tool calls still go to the first front end (%s) after the second served it", urlA)
			}
			// Back to the first: the same kernel, pointed at a's tool server
			// again.
			if got := runIn(t, ca, h, "print(v)\n"+url); got != "42\n"+urlA {
				t.Errorf("the first front end again: %q, want 42 and %s", got, urlA)
			}
			if ks := gatewayKernels(t, j); len(ks) != 1 {
				t.Errorf("the gateway runs %d kernels, want the one", len(ks))
			}
		})
	}
	t.Run("local", func(t *testing.T) {
		t.Parallel()
		ws := t.TempDir()
		a, b := newServer(t, &Options{Workspace: ws, Sessions: SessionOptions{NoZygote: true}}), newServer(t, &Options{Workspace: ws, Sessions: SessionOptions{NoZygote: true}})
		ca := connectHTTPAs(t, serveHTTP(t, a), testToken, newVersion, nil)
		cb := connectHTTPAs(t, serveHTTP(t, b), testToken, newVersion, nil)
		h := createSession(t, ca)
		runIn(t, ca, h, "v = 1")
		res := call(t, cb, "execute_ipython_cell", map[string]any{"code": "print(v)", "session": h})
		if !res.IsError || !strings.Contains(text(res), "running in another ipybox mcp process") {
			t.Errorf("a local session held by another process: %q", text(res))
		}
	})
}

// TestHibernateImplicit: the implicit session of a 2025-11-25 connection
// hibernates when idle too, and its next call restores it.
func TestHibernateImplicit(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	srv := newServer(t, &Options{Workspace: t.TempDir(), Durability: DurabilityOptions{HibernateAfter: time.Second}, Sessions: SessionOptions{NoZygote: true}})
	cs := connectHTTP(t, serveHTTP(t, srv), nil)
	run(t, cs, "k = 5")
	for deadline := time.Now().Add(30 * time.Second); srv.KernelCount() != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the implicit session did not hibernate")
		}
	}
	if got := run(t, cs, "print(k)"); !strings.HasSuffix(got, "5") || !strings.Contains(got, "names came back") {
		t.Errorf("after the hibernation: %q", got)
	}
}

// TestShutdownInterruptsCell: Shutdown interrupts a running cell, then
// saves its session as the interrupt left it; an idle session beside it
// is not interrupted (a late signal would stop its save).
func TestShutdownInterruptsCell(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	ws := t.TempDir()
	srv := newServer(t, &Options{Workspace: ws, Sessions: SessionOptions{NoZygote: true}})
	cs := connectHTTPAs(t, serveHTTP(t, srv), testToken, newVersion, nil)
	busy, idle := createSession(t, cs), createSession(t, cs)
	runIn(t, cs, idle, "w = 'idle'")
	runIn(t, cs, busy, "v = 1")
	done := make(chan struct{})
	marker := filepath.Join(ws, "v-is-2")
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		code := fmt.Sprintf("import time\nv = 2\nopen(%q, 'w').close()\ntime.sleep(60)", marker)
		cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_ipython_cell", Arguments: map[string]any{"code": code, "session": busy}})
	}()
	// The cell writes the marker once past `v = 2`.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the long cell did not reach its marker")
		}
	}
	if x := srv.sessions.store.get(busy); x == nil || !x.idleSince().IsZero() {
		t.Fatal("the session of the long cell is idle while the cell runs")
	}
	shutdown(t, srv)
	<-done
	srv2 := newServer(t, &Options{Workspace: ws, Sessions: SessionOptions{NoZygote: true}})
	cs2 := connectHTTPAs(t, serveHTTP(t, srv2), testToken, newVersion, nil)
	if got := runIn(t, cs2, busy, "print(v)"); !strings.HasSuffix(got, "2") || !strings.Contains(got, "names came back") {
		t.Errorf("the interrupted session after the restart: %q", got)
	}
	if got := runIn(t, cs2, idle, "print(w)"); !strings.HasSuffix(got, "idle") {
		t.Errorf("the idle session after the restart: %q", got)
	}
}
