package mcpserver

import (
	"fmt"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// holdCalls is kernel code that opens raw connections to its own tool
// server and sends the headers of two tool calls of 16 MiB each (as many
// as a kernel may hold), then the first sent bytes of their bodies, and
// keeps the connections open (in a global, across cells).
const holdCalls = `import os, socket
_held = globals().setdefault("_held", [])
_path = os.environ["IPYBOX_TOOL_URL"][len("unix://"):]
for _ in range(2):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(_path)
    s.sendall(("POST /v1/tools/call HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer %%s\r\n"
               "Content-Type: application/json\r\nContent-Length: %%d\r\n\r\n" %% (os.environ["IPYBOX_TOOL_TOKEN"], 16 << 20)).encode())
    s.sendall(b'{"server":"go","tool":"tool-1","args":{"s":"' + b"x" * %d)
    _held.append(s)
print(len(_held))`

// TestAttackTenantHoldsToolCalls attacks item 9 of issue 34 end to end:
// principal alice's five kernels (sessions over HTTP, with her token) hold
// tool calls of 16 MiB that they declare and do not send (or stall after
// their first bytes); principal bob's tool call of 30 bytes, through his
// own kernel and a real MCP server, completes within two seconds. Before,
// alice's declared lengths took the process's whole budget before a byte
// came, and bob's call waited behind them until their 60 s body deadline.
func TestAttackTenantHoldsToolCalls(t *testing.T) {
	testenv.NeedsPython(t)
	bin := mcptest.Build(t)
	for _, sent := range []int{0, 4 << 10} {
		t.Run(fmt.Sprintf("%d bytes sent", sent), func(t *testing.T) {
			const aliceTok, bobTok = "alice-token-0123456789", "bob-token-0123456789"
			srv := newServer(t, &Options{Workspace: t.TempDir(),
				HTTP:    HTTPOptions{Principals: map[string]string{"alice": aliceTok, "bob": bobTok}},
				Servers: map[string]ipybox.ServerConfig{"go": {Command: bin}}})
			url := serveHTTP(t, srv)
			alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
			bob := connectHTTPAs(t, url, bobTok, newVersion, nil)
			hb := createSession(t, bob)
			runIn(t, bob, hb, "from mcptools.go.tool_1 import Params, run")
			for range 5 {
				h := createSession(t, alice)
				if got := runIn(t, alice, h, fmt.Sprintf(holdCalls, sent)); got != "2" {
					t.Fatalf("alice's kernel: %q", got)
				}
			}
			t0 := time.Now()
			got := runIn(t, bob, hb, "print(run(Params(s='hi')))")
			took := time.Since(t0)
			t.Logf("bob's call took %v", took.Round(time.Millisecond))
			if got != "tool-1: hi" || took > 2*time.Second {
				t.Errorf("bob's call: %q after %v; want its answer within 2 s", got, took.Round(time.Millisecond))
			}
		})
	}
}
