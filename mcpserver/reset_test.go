package mcpserver

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestResetSwapsPooledKernel: with a kernel ready in the warm pool, reset
// swaps it in for the session's (its connection file, in another run
// folder, differs), and the session keeps what is its own: a module in
// its package folder imports after the swap, and the old kernel's run
// folder goes. With the pool empty, reset restarts the kernel in place.
func TestResetSwapsPooledKernel(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	srv := newServer(t, &Options{Workspace: t.TempDir(), Sandbox: ipybox.DefaultSandbox(), Sessions: SessionOptions{Pool: 1, PoolMax: 1, SandboxZygote: true}})
	cs := connectHTTP(t, serveHTTP(t, srv), nil)
	who := "import sys\nprint([a for a in sys.argv if a.endswith('.json')][0])"
	before := run(t, cs, "x = 41\n"+who)
	if !strings.HasSuffix(before, ".json") {
		t.Fatalf("connection file: %q", before)
	}
	if _, err := os.Stat(before); err != nil {
		t.Fatalf("the kernel's connection file is not at the same path on the host: %v", err)
	}
	// A module in the session's own package folder, as pip would leave it.
	if got := run(t, cs, `import sys, pathlib
d = [p for p in sys.path if "/.ipybox/packages/" in p][0]
pathlib.Path(d, "keptmod.py").write_text("VALUE = 'kept'\n")
print("ok")`); got != "ok" {
		t.Fatalf("writing the module: %q", got)
	}
	testenv.WaitFor(t, 60*time.Second, "the pool to fill", func() bool { return srv.factory.warm.Ready() == 1 })
	res := call(t, cs, "reset", map[string]any{})
	if res.IsError || !strings.Contains(text(res), "started in advance") {
		t.Fatalf("reset with a kernel ready: %q, want a swap", text(res))
	}
	after := run(t, cs, "print('x' in globals())\nimport keptmod\nprint(keptmod.VALUE)\n"+who)
	lines := strings.Split(after, "\n")
	if len(lines) != 3 || lines[0] != "False" || lines[1] != "kept" {
		t.Fatalf("after the swap: %q, want x gone and the session's package kept", after)
	}
	t.Logf("connection files: %s, then %s", before, lines[2])
	if lines[2] == before {
		t.Errorf("the kernel's connection file is still %s: no swap", before)
	}
	// The old kernel ends, in the background: its connection file's
	// folder goes with its executor.
	testenv.WaitFor(t, 30*time.Second, "the old kernel's run folder to go", func() bool {
		_, err := os.Stat(before)
		return os.IsNotExist(err)
	})
	// No kernel ready (the pool refills in the background; take it first
	// with a new session): reset restarts in place.
	other := connectHTTP(t, serveHTTP(t, srv), nil)
	testenv.WaitFor(t, 60*time.Second, "the pool to refill", func() bool { return srv.factory.warm.Ready() == 1 })
	run(t, other, "pass")
	t.Logf("pool ready after the other session's start: %d", srv.factory.warm.Ready())
	if srv.factory.warm.Ready() == 0 {
		res = call(t, cs, "reset", map[string]any{})
		if res.IsError || !strings.Contains(text(res), "restarted") {
			t.Errorf("reset with no kernel ready: %q, want a restart in place", text(res))
		}
		if got := run(t, cs, "import keptmod\nprint(keptmod.VALUE)"); got != "kept" {
			t.Errorf("after a restart in place: %q", got)
		}
	}
}
