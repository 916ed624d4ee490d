//go:build linux

package mcpserver

import (
	"encoding/json"
	"strings"
	"testing"

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
