package mcpserver

import (
	"fmt"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestAttack8ResetWhileHibernated: a session hibernates (its kernel saved
// its namespace and stopped), then its client calls reset. reset finds no
// kernel and answers that the first cell runs in a fresh one. Held when
// the next cell indeed sees none of the state from before the reset
// (hostile code's monkeypatches included); broken when the wake restores
// the snapshot saved before the reset.
func TestAttack8ResetWhileHibernated(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	for _, pool := range []int{0, 1} {
		t.Run(fmt.Sprintf("pool%d", pool), func(t *testing.T) {
			srv := newServer(t, &Options{Workspace: t.TempDir(), Sandbox: ipybox.DefaultSandbox(), Durability: DurabilityOptions{HibernateAfter: time.Second}, Sessions: SessionOptions{Pool: pool, PoolMax: pool, SandboxZygote: true}})
			cs := connectHTTPAs(t, serveHTTP(t, srv), testToken, newVersion, nil)
			h := createSession(t, cs)
			runIn(t, cs, h, "planted = 'poison'\nimport builtins\nbuiltins.planted_builtin = 1")
			waitHibernated(t, srv, cs, h, 30*time.Second)
			res := call(t, cs, "reset", map[string]any{"session": h})
			t.Logf("reset of a hibernated session: %q", text(res))
			got := runIn(t, cs, h, "print('planted' in globals(), hasattr(__import__('builtins'), 'planted_builtin'))")
			t.Logf("after the reset: %q", got)
			if strings.Contains(got, "True") {
				t.Errorf("BROKEN: reset answered %q, but the next cell restored the namespace saved before it: %q", text(res), got)
			}
		})
	}
}

// TestAttack8ConcurrentResetsIsolation: two sessions of one principal,
// each with a module of its own in its package folder, reset at the same
// time, again and again, while the pool (2) has kernels ready. Held when
// each keeps its own module, never gets the other's, and no kernel can
// read the other session's package folder.
func TestAttack8ConcurrentResetsIsolation(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	srv := newServer(t, &Options{Workspace: t.TempDir(), Sandbox: ipybox.DefaultSandbox(), Sessions: SessionOptions{Pool: 2, PoolMax: 2, SandboxZygote: true}})
	cs := connectHTTPAs(t, serveHTTP(t, srv), testToken, newVersion, nil)
	hs := []string{createSession(t, cs), createSession(t, cs)}
	names := []string{"mod_a", "mod_b"}
	for i, h := range hs {
		runIn(t, cs, h, fmt.Sprintf(`import os, sys, pathlib
root = pathlib.Path(os.environ["PYTHONUSERBASE"])
sp = [p for p in sys.path if p.startswith(str(root)) and p.endswith("site-packages")][0]
pathlib.Path(sp, %q).write_text('WHO = %q\n')`, names[i]+".py", names[i]))
	}
	probe := `import os, importlib, sys
importlib.invalidate_caches()
for m in ("mod_a", "mod_b"):
    sys.modules.pop(m, None)
out = []
for m in ("mod_a", "mod_b"):
    try:
        out.append(m + "=" + importlib.import_module(m).WHO)
    except ImportError:
        out.append(m + "=none")
base = os.path.join(os.getcwd(), ".ipybox", "packages")
try:
    others = [d for d in os.listdir(base) if os.path.join(base, d) != os.environ["PYTHONUSERBASE"]]
    readable = []
    for d in others:
        try:
            for r, ds, fs in os.walk(os.path.join(base, d)):
                readable += [f for f in fs if f.startswith("mod_")]
        except OSError:
            pass
    out.append("others=%d readable=%s" % (len(others), readable))
except OSError as e:
    out.append("packages dir: " + type(e).__name__)
print(" ".join(out))`
	swaps := 0
	for round := range 4 {
		testenv.WaitFor(t, 90*time.Second, "the pool to fill", func() bool { return srv.factory.warm.Ready() == 2 })
		var wg sync.WaitGroup
		res := make([]string, 2)
		for i, h := range hs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := call(t, cs, "reset", map[string]any{"session": h})
				res[i] = text(r)
			}()
		}
		wg.Wait()
		for i, h := range hs {
			if strings.Contains(res[i], "started in advance") {
				swaps++
			}
			got := runIn(t, cs, h, probe)
			t.Logf("round %d, session %d: %s", round, i, got)
			want, other := names[i]+"="+names[i], names[1-i]+"=none"
			if !strings.Contains(got, want) || !strings.Contains(got, other) {
				t.Errorf("BROKEN: round %d, session %d after concurrent resets: %q, want %s and %s", round, i, got, want, other)
			}
			if strings.Contains(got, "readable=[") && !strings.Contains(got, "readable=[]") {
				t.Errorf("BROKEN: session %d reads another session's package folder: %q", i, got)
			}
		}
	}
	t.Logf("%d of 8 resets swapped", swaps)
}

// TestAttack8ResetRaces: reset races close_session, and reset races a
// running cell of the same session (a second call in flight: no swap,
// and the in-place reset waits for or interrupts nothing it must not).
// Held when no call hangs, a closed session stays closed, and after the
// server closes no package or snapshot folder and no kernel remains.
func TestAttack8ResetRaces(t *testing.T) {
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	srv := newServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox(), Sessions: SessionOptions{Pool: 2, PoolMax: 2, SandboxZygote: true}})
	cs := connectHTTPAs(t, serveHTTP(t, srv), testToken, newVersion, nil)
	for round := range 3 {
		h := createSession(t, cs)
		runIn(t, cs, h, "x = 1")
		testenv.WaitFor(t, 90*time.Second, "the pool to fill", func() bool { return srv.factory.warm.Ready() >= 1 })
		var wg sync.WaitGroup
		var rr, cr string
		wg.Add(2)
		go func() { defer wg.Done(); rr = text(call(t, cs, "reset", map[string]any{"session": h})) }()
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(round) * 5 * time.Millisecond)
			cr = text(call(t, cs, "close_session", map[string]any{"session": h}))
		}()
		wg.Wait()
		t.Logf("round %d: reset %q; close %q", round, short(rr), short(cr))
		res := call(t, cs, "execute_ipython_cell", map[string]any{"code": "print(1)", "session": h})
		if !res.IsError {
			t.Errorf("BROKEN: the closed session still runs cells: %q", text(res))
		}
	}
	// Reset while a cell of the same session runs.
	h := createSession(t, cs)
	runIn(t, cs, h, "x = 1")
	testenv.WaitFor(t, 90*time.Second, "the pool to fill", func() bool { return srv.factory.warm.Ready() >= 1 })
	cell := make(chan string, 1)
	go func() {
		cell <- text(call(t, cs, "execute_ipython_cell", map[string]any{"code": "import time\nfor i in range(40): time.sleep(0.1)\nprint('cell done', x)", "session": h}))
	}()
	time.Sleep(1 * time.Second)
	start := time.Now()
	rr := text(call(t, cs, "reset", map[string]any{"session": h}))
	t.Logf("reset during a cell (%v): %q; the cell: %q", time.Since(start).Round(time.Millisecond), short(rr), short(<-cell))
	if strings.Contains(rr, "started in advance") {
		t.Errorf("reset swapped the kernel while a cell ran in the old one")
	}
	if got := runIn(t, cs, h, "print('x' in globals())"); got != "False" {
		t.Errorf("after the reset: %q", got)
	}
	call(t, cs, "close_session", map[string]any{"session": h})
	if err := srv.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	for _, kind := range []string{"packages", "snapshots"} {
		ents, _ := os.ReadDir(filepath.Join(ws, ".ipybox", kind))
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if len(names) > 0 {
			t.Errorf("after Close, .ipybox/%s still holds %v", kind, names)
		}
	}
	if k := kernels(t, os.Getpid()); len(k) > 0 {
		t.Errorf("kernel processes after Close: %v", k)
	}
}

// TestAttack8ResetSeveralPrincipals: a client with two principals' tokens
// asks for a pool; each principal resets. Held when no reset swaps in a
// kernel started in another principal's folder (the pool is off with
// several), and after the reset neither kernel imports or reads the
// other's package.
func TestAttack8ResetSeveralPrincipals(t *testing.T) {
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	const aliceTok, bobTok = "alice-token-0123456789", "bob-token-0123456789ab"
	srv := newServer(t, &Options{Workspace: t.TempDir(), Sandbox: ipybox.DefaultSandbox(), HTTP: HTTPOptions{Principals: map[string]string{"alice": aliceTok, "bob": bobTok}}, Sessions: SessionOptions{Pool: 1, PoolMax: 1, SandboxZygote: true}})
	url := serveHTTP(t, srv)
	cs := []*mcp.ClientSession{connectHTTPAs(t, url, aliceTok, legacyVersion, nil), connectHTTPAs(t, url, bobTok, legacyVersion, nil)}
	names := []string{"mod_alice", "mod_bob"}
	roots := make([]string, 2)
	for i, c := range cs {
		roots[i] = run(t, c, fmt.Sprintf(`import os, sys, pathlib
root = pathlib.Path(os.environ["PYTHONUSERBASE"])
sp = [p for p in sys.path if p.startswith(str(root)) and p.endswith("site-packages")][0]
pathlib.Path(sp, %q).write_text('WHO = %q\n')
print(sp)`, names[i]+".py", names[i]))
	}
	for i, c := range cs {
		r := text(call(t, c, "reset", map[string]any{}))
		if strings.Contains(r, "started in advance") {
			t.Errorf("BROKEN: principal %d's reset swapped in a pooled kernel with several principals: %q", i, r)
		}
	}
	for i, c := range cs {
		got := run(t, c, fmt.Sprintf(`import importlib, os
out = []
for m in %q, %q:
    try:
        out.append(m + "=" + importlib.import_module(m).WHO)
    except ImportError:
        out.append(m + "=none")
try:
    out.append("other=" + str(os.listdir(%q)))
except OSError as e:
    out.append("other=" + type(e).__name__)
print(" ".join(out))`, names[0], names[1], roots[1-i]))
		t.Logf("principal %d after reset: %s", i, got)
		if !strings.Contains(got, names[i]+"="+names[i]) || strings.Contains(got, names[1-i]+"="+names[1-i]) || strings.Contains(got, names[1-i]+".py") {
			t.Errorf("BROKEN: principal %d: %q", i, got)
		}
	}
}
