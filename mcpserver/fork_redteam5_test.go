//go:build linux

package mcpserver

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/safefs"
	"github.com/ipybox/ipybox/internal/testenv"
)

// countForks is kernel code that counts the fork cells its kernel runs
// (ipybox_runtime._fork.request), and still forks.
const countForks = `import ipybox_runtime._fork as _F
forks_made = 0
_orig_request = _F.request
def _counting(data):
    global forks_made
    forks_made += 1
    return _orig_request(data)
_F.request = _counting`

// TestRedteam5ForkPastKernelLimits: the client asks fork_session for more
// sessions than the kernel limits leave (--max-sessions-per-principal,
// --max-sessions). The call must be refused before any kernel is made:
// a fork started first and refused at its slot afterwards is a kernel
// past the limit for as long as it takes to start (a sandboxed or
// container fork is a whole new sandbox or container with its own
// --memory), and a client repeating the call (on every session it holds,
// at once) keeps 8 times its limit in kernels running. The source's
// kernel counts the fork cells it ran: none may have run.
func TestRedteam5ForkPastKernelLimits(t *testing.T) {
	testenv.CheckGoroutines(t)
	testenv.NeedsPython(t)
	for _, c := range []struct {
		name string
		opts SessionOptions
		ask  int
	}{
		{"per principal", SessionOptions{MaxSessions: 8, MaxSessionsPerPrincipal: 2}, 4},
		{"server", SessionOptions{MaxSessions: 2, MaxSessionsPerPrincipal: -1}, 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := newServer(t, &Options{Workspace: t.TempDir(), HTTP: HTTPOptions{NoAuth: true}, Sessions: c.opts})
			cs := connectHTTPAs(t, serveHTTP(t, srv), "", newVersion, nil)
			h := createSession(t, cs)
			runIn(t, cs, h, countForks)
			res := call(t, cs, "fork_session", map[string]any{"session": h, "count": c.ask})
			if !res.IsError {
				t.Errorf("fork_session of %d past the limit: %s", c.ask, text(res))
			} else if !strings.Contains(text(res), "limit") {
				t.Errorf("the refusal does not name the limit: %q", text(res))
			}
			if got := runIn(t, cs, h, "print(forks_made)"); strings.TrimSpace(got) != "0" {
				t.Errorf("the source's kernel forked %s times for a call that was refused (kernels past the limit while they started)", got)
			}
			// One fork fits: it is made, and it counts.
			res = call(t, cs, "fork_session", map[string]any{"session": h, "count": 1})
			if res.IsError {
				t.Fatalf("a fork within the limit: %s", text(res))
			}
			var out struct{ Sessions []string }
			b, _ := json.Marshal(res.StructuredContent)
			if err := json.Unmarshal(b, &out); err != nil || len(out.Sessions) != 1 {
				t.Fatalf("structured %s", b)
			}
			if got := srv.sessions.kernelCount(); got != 2 {
				t.Errorf("kernels counted after one fork: %d, want 2", got)
			}
			if res := call(t, cs, "fork_session", map[string]any{"session": h, "count": 1}); !res.IsError {
				t.Errorf("a fork past a full limit: %s", text(res))
			}
			if got := runIn(t, cs, h, "print(forks_made)"); strings.TrimSpace(got) != "1" {
				t.Errorf("fork cells run: %s, want 1", got)
			}
			call(t, cs, "close_session", map[string]any{"session": out.Sessions[0]})
		})
	}
}

// TestRedteam5ForkOtherPrincipal: two principals. Bob, holding Alice's
// handle, cannot fork or rewind her session (the answer is the one for an
// unknown handle), nor use, list or close the forks she makes; her forks
// are hers (their records name her) and run in her folder; his forks of
// his own session run in his.
func TestRedteam5ForkOtherPrincipal(t *testing.T) {
	testenv.CheckGoroutines(t)
	testenv.NeedsPython(t)
	const aliceTok, bobTok = "alice-token-0123456789", "bob-token-0123456789"
	ws := t.TempDir()
	srv := newServer(t, &Options{Workspace: ws, RewindDepth: 1, HTTP: HTTPOptions{Principals: map[string]string{"alice": aliceTok, "bob": bobTok}}})
	url := serveHTTP(t, srv)
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	bob := connectHTTPAs(t, url, bobTok, newVersion, nil)
	h := createSession(t, alice)
	runIn(t, alice, h, "secret = 'alice'")
	runIn(t, alice, h, "secret = 'changed'")
	unknown := text(call(t, bob, "execute_ipython_cell", map[string]any{"code": "1", "session": handlePrefix + strings.Repeat("A", 26)}))
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"fork_session", map[string]any{"session": h}},
		{"fork_session", map[string]any{"session": h, "count": 8}},
		{"rewind_session", map[string]any{"session": h}},
	} {
		if res := call(t, bob, c.tool, c.args); !res.IsError || text(res) != unknown {
			t.Errorf("bob's %s of alice's handle %v: %q", c.tool, c.args, text(res))
		}
	}
	if got := runIn(t, alice, h, "print(secret)"); !strings.Contains(got, "changed") {
		t.Errorf("alice's session after bob's rewind: %q", got)
	}
	forksOf := func(cs *mcp.ClientSession, h string) []string {
		t.Helper()
		res := call(t, cs, "fork_session", map[string]any{"session": h})
		if res.IsError {
			t.Fatalf("fork_session: %s", text(res))
		}
		var out struct{ Sessions []string }
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &out); err != nil || len(out.Sessions) != 1 {
			t.Fatalf("structured %s", b)
		}
		return out.Sessions
	}
	af := forksOf(alice, h)[0]
	if x := srv.sessions.store.get(af); x == nil || x.principal != "alice" {
		t.Errorf("alice's fork belongs to %v", x)
	}
	for _, tool := range []string{"execute_ipython_cell", "fork_session", "rewind_session", "close_session", "reset"} {
		args := map[string]any{"session": af}
		if tool == "execute_ipython_cell" {
			args["code"] = "print(secret)"
		}
		if res := call(t, bob, tool, args); !res.IsError || text(res) != unknown {
			t.Errorf("bob's %s of alice's fork: %q", tool, text(res))
		}
	}
	if res := call(t, bob, "list_sessions", map[string]any{}); strings.Contains(text(res), af) || strings.Contains(text(res), h) {
		t.Errorf("bob lists alice's sessions: %q", text(res))
	}
	if got := runIn(t, alice, af, "import os; print(secret, os.getcwd())"); !strings.Contains(got, "changed "+filepath.Join(ws, "alice")) {
		t.Errorf("alice's fork: %q", got)
	}
	bh := createSession(t, bob)
	runIn(t, bob, bh, "mine = 'bob'")
	bf := forksOf(bob, bh)[0]
	if got := runIn(t, bob, bf, "import os; print(mine, os.getcwd(), 'secret' in globals())"); !strings.Contains(got, "bob "+filepath.Join(ws, "bob")+" False") {
		t.Errorf("bob's fork: %q", got)
	}
	for _, c := range []struct {
		cs *mcp.ClientSession
		h  string
	}{{alice, af}, {bob, bf}} {
		call(t, c.cs, "close_session", map[string]any{"session": c.h})
	}
}

// grower is kernel code that runs body (with path, the snapshot folder)
// in a thread of its own just after each save.
func grower(body string) string {
	return `import os, threading, time, ipybox_runtime._snapshot as S
_save = S.save
def save(path, limit):
    r = _save(path, limit)
    def grow():
        time.sleep(0.05)
        ` + body + `
    threading.Thread(target=grow, daemon=True).start()
    return r
S.save = save`
}

// TestRedteam5ForkSnapshotBudget: a sandboxed session is forked through
// a snapshot, which the host then copies into each fork's folder. Kernel
// code holds more than the session's snapshot budget (--snapshot-budget),
// which a save (a hibernation) refuses: a fork must not save it anyway
// and copy it count times. Other variants add to the snapshot folder from
// a thread of the source's kernel after the save, before the host copies
// it (a 48 MiB file; a sparse file of 256 MiB, which the budget's measure
// counts as nothing): the host must copy no more than what it measured.
// The source's own folder is left out of the measure: its kernel writes
// it as it likes (TestAttackSnapshotBudgetOthersFolders).
func TestRedteam5ForkSnapshotBudget(t *testing.T) {
	testenv.CheckGoroutines(t)
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	const per = 1 << 20
	ws := t.TempDir()
	srv := newServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox(), HTTP: HTTPOptions{NoAuth: true},
		Durability: DurabilityOptions{SnapshotBytes: per, SnapshotWorkspaceBytes: 64 << 20}})
	cs := connectHTTPAs(t, serveHTTP(t, srv), "", newVersion, nil)
	snaps := filepath.Join(ws, ".ipybox", "snapshots")
	largest := func(except string) (string, int64) {
		ents, _ := os.ReadDir(snaps)
		name, most := "", int64(0)
		for _, e := range ents {
			if e.Name() == except {
				continue
			}
			n, _ := safefs.Size(filepath.Join(snaps, e.Name()), 1000)
			if n > most {
				name, most = e.Name(), n
			}
		}
		return name, most
	}
	for _, c := range []struct{ name, code string }{
		{"over the budget", "import os\nblob = os.urandom(3 << 20)"},
		{"a file added after the save", grower("with open(os.path.join(path, 'padding'), 'wb') as f:\n            for _ in range(48): f.write(os.urandom(1 << 20))")},
		{"a sparse file added after the save", grower("with open(os.path.join(path, 'hole'), 'wb') as f:\n            f.truncate(256 << 20)")},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := createSession(t, cs)
			defer call(t, cs, "close_session", map[string]any{"session": h})
			runIn(t, cs, h, c.code)
			res := call(t, cs, "fork_session", map[string]any{"session": h, "count": 2})
			if !res.IsError {
				var out struct{ Sessions []string }
				b, _ := json.Marshal(res.StructuredContent)
				json.Unmarshal(b, &out)
				for _, f := range out.Sessions {
					defer call(t, cs, "close_session", map[string]any{"session": f})
				}
			}
			t.Logf("fork_session: error %v: %.300s", res.IsError, text(res))
			if name, n := largest(srv.sessions.store.get(h).snap); n > per+(64<<10) {
				t.Errorf("a fork's snapshot folder (%s) holds %d bytes after fork_session, past the session's budget of %d", name, n, per)
			}
		})
	}
}
