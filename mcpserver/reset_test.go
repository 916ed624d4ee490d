package mcpserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestResetSwapsPooledKernel: with a kernel ready in the warm pool, reset
// swaps it in for the session's (sandboxed: its connection file, in
// another run folder, differs; in a container: its host name), and the
// session keeps what is its own: a module in its package folder imports
// after the swap, and the old kernel's run folder goes. With the pool
// empty, reset restarts the kernel in place.
func TestResetSwapsPooledKernel(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	for _, backend := range []string{"sandbox", "container"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			o := &Options{Workspace: t.TempDir(), Sessions: SessionOptions{Pool: 1, PoolMax: 1}}
			who := "import sys\nprint([a for a in sys.argv if a.endswith('.json')][0])"
			switch backend {
			case "sandbox":
				testenv.NeedsTool(t, "bwrap")
				o.Sandbox, o.Sessions.SandboxZygote = ipybox.DefaultSandbox(), true
				o.RewindDepth = 1 // cell boundaries, which a new kernel cannot rewind to
			case "container":
				testenv.NeedsDocker(t)
				o.Container = &ipybox.ContainerConfig{}
				who = "import socket\nprint(socket.gethostname())"
			}
			srv := newServer(t, o)
			url := serveHTTP(t, srv)
			cs := connectHTTP(t, url, nil)
			before := run(t, cs, "x = 41\n"+who)
			if backend == "sandbox" {
				if _, err := os.Stat(before); err != nil {
					t.Fatalf("the kernel's connection file %q is not at the same path on the host: %v", before, err)
				}
				// A module in the session's own package folder, as pip would leave it.
				if got := run(t, cs, "import sys, pathlib\nd = [p for p in sys.path if '/.ipybox/packages/' in p][0]\npathlib.Path(d, 'keptmod.py').write_text(\"VALUE = 'kept'\\n\")\nprint('ok')"); got != "ok" {
					t.Fatalf("writing the module: %q", got)
				}
			}
			testenv.WaitFor(t, 120*time.Second, "the pool to fill", func() bool { return srv.factory.warm.Ready() == 1 })
			boundaries := func() []string {
				m, _ := filepath.Glob(filepath.Join(o.Workspace, ".ipybox", "snapshots", "*", "rewind"))
				return m
			}
			if backend == "sandbox" && len(boundaries()) == 0 {
				t.Fatal("no cell boundary kept before the reset")
			}
			res := call(t, cs, "reset", map[string]any{})
			if res.IsError || !strings.Contains(text(res), "started in advance") {
				t.Fatalf("reset with a kernel ready: %q, want a swap", text(res))
			}
			if b := boundaries(); len(b) != 0 {
				t.Errorf("the old kernel's cell boundaries came along: %v", b)
			}
			if got := run(t, cs, "print('x' in globals())"); got != "False" {
				t.Errorf("x after the swap: %q, want it gone", got)
			}
			after := run(t, cs, who)
			t.Logf("kernel before and after: %s, %s", before, after)
			if after == before {
				t.Errorf("the kernel is still %s: no swap", before)
			}
			if backend == "sandbox" {
				checkResetSandbox(t, srv, url, cs, before)
			}
		})
	}
}

// checkResetSandbox checks, after a swap, that the session's package
// module came along and the old kernel's run folder went, then resets with
// no kernel ready.
func checkResetSandbox(t *testing.T, srv *Server, url string, cs *mcp.ClientSession, before string) {
	t.Helper()
	if got := run(t, cs, "import keptmod\nprint(keptmod.VALUE)"); got != "kept" {
		t.Errorf("the session's package after the swap: %q", got)
	}
	testenv.WaitFor(t, 30*time.Second, "the old kernel's run folder to go", func() bool {
		_, err := os.Stat(before)
		return os.IsNotExist(err)
	})
	// No kernel ready (another session takes the refilled one; the pool
	// refills in the background): reset restarts in place.
	other := connectHTTP(t, url, nil)
	testenv.WaitFor(t, 60*time.Second, "the pool to refill", func() bool { return srv.factory.warm.Ready() == 1 })
	run(t, other, "pass")
	t.Logf("pool ready after the other session's start: %d", srv.factory.warm.Ready())
	if srv.factory.warm.Ready() == 0 {
		res := call(t, cs, "reset", map[string]any{})
		if res.IsError || !strings.Contains(text(res), "restarted") {
			t.Errorf("reset with no kernel ready: %q, want a restart in place", text(res))
		}
		if got := run(t, cs, "import keptmod\nprint(keptmod.VALUE)"); got != "kept" {
			t.Errorf("after a restart in place: %q", got)
		}
	}
}
