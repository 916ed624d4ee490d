package ipybox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/testenv"
)

// snapshotCells make a namespace of every kind: values, a shared object,
// functions and classes of cells, an instance, a module, and what cannot
// be saved.
const snapshotCells = `import numpy as np, threading, json as j
def f(x):
    return x + y
y = 3
class C:
    def __init__(self):
        self.v = 5
    def m(self):
        return f(self.v)
c = C()
a = np.arange(12).reshape(3, 4)
b = a
fh = open("snapshot-test.txt", "w")
t = threading.Thread(target=lambda: None)
g = (i for i in range(3))
held = [fh]
lam = lambda z: z * y
small = [{"i": i} for i in range(1000)]
`

// checkRestored runs cells in ex that check what snapshotCells made.
const checkRestored = `print(c.m(), b is a, a.sum(), lam(2), len(small), j.dumps([1]), np.__name__)
print(sorted(n for n in ("fh", "t", "g", "held") if n in globals()))`

func snapshotOpts(ws, name string) *ipybox.Options {
	return &ipybox.Options{WorkDir: ws, SnapshotDir: filepath.Join(ws, ".ipybox", "snapshots", name), PackageDir: filepath.Join(ws, ".ipybox", "packages", name)}
}

// TestSnapshotRestore saves a namespace in one executor and restores it
// in a fresh one given the same folder, for each local backend: what came
// back works (functions see the restored globals, a shared object is one
// object), modules are imported again, and what could not be saved is
// named with its reason.
func TestSnapshotRestore(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	for _, backend := range []string{"local", "sandbox", "container"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			o := snapshotOpts(ws, "s1")
			switch backend {
			case "sandbox":
				testenv.NeedsTool(t, "bwrap")
				o.Sandbox = ipybox.DefaultSandbox()
			case "container":
				testenv.NeedsDocker(t)
				o.Container = &ipybox.ContainerConfig{}
			}
			ex := start(t, o)
			run(t, ex, snapshotCells)
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			rep, err := ex.Snapshot(ctx, nil)
			if err != nil {
				t.Fatalf("Snapshot: %v", err)
			}
			t.Logf("saved %d names, %d bytes, in %v; unsaved %v", rep.SavedCount, rep.Bytes, rep.Took, rep.Unsaved)
			unsaved := map[string]string{}
			for _, u := range rep.Unsaved {
				unsaved[u.Name] = u.Reason
			}
			for name, want := range map[string]string{"fh": "open file", "t": "thread", "g": "generator", "held": "open file"} {
				if !strings.Contains(unsaved[name], want) {
					t.Errorf("unsaved[%s] = %q, want a reason about %s", name, unsaved[name], want)
				}
			}
			if !slices.Contains(rep.Imports, [2]string{"np", "numpy"}) {
				t.Errorf("imports %v lack np", rep.Imports)
			}
			if rep.Bytes <= 0 {
				t.Errorf("Bytes = %d", rep.Bytes)
			}
			ex.Close()

			ex2 := start(t, o)
			rr, err := ex2.Restore(ctx)
			if err != nil {
				t.Fatalf("Restore: %v", err)
			}
			if rr.RestoredCount != rep.SavedCount || rr.MissingCount != rep.UnsavedCount {
				t.Errorf("restored %d names and missed %d; saved %d and left out %d", rr.RestoredCount, rr.MissingCount, rep.SavedCount, rep.UnsavedCount)
			}
			if got, want := run(t, ex2, checkRestored).Text, "8 True 66 6 1000 [1] numpy\n[]"; got != want {
				t.Errorf("after the restore: %q, want %q", got, want)
			}
		})
	}
}

// TestSnapshotNone: a folder without a snapshot restores nothing, and an
// executor without a folder cannot snapshot.
func TestSnapshotNone(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	ex := start(t, snapshotOpts(ws, "empty"))
	if _, err := ex.Restore(t.Context()); !errors.Is(err, ipybox.ErrNoSnapshot) {
		t.Errorf("Restore of an empty folder: %v, want ErrNoSnapshot", err)
	}
	plain := start(t, nil)
	if _, err := plain.Snapshot(t.Context(), nil); !errors.Is(err, ipybox.ErrNoSnapshotDir) {
		t.Errorf("Snapshot without a folder: %v, want ErrNoSnapshotDir", err)
	}
	if _, err := os.Stat(ex.SnapshotDir()); err != nil {
		t.Errorf("the snapshot folder was not made: %v", err)
	}
}

// TestGatewayDetachAttach: a gateway kernel needs no snapshot. An
// Executor detaches from it, and it runs on with its state; a new Executor
// attaches to it by its id, finds the state, and the kernel's tool calls
// reach the new Executor's tool server (the old one is gone). An id the
// gateway no longer has is ErrNoKernel.
func TestGatewayDetachAttach(t *testing.T) {
	t.Parallel()
	j := testenv.JupyterServer(t, nil)
	g := &ipybox.GatewayConfig{URL: j.URL, Token: j.Token}
	ws := t.TempDir()
	ex := start(t, &ipybox.Options{Gateway: g, NoToolApproval: true, WorkDir: ws})
	run(t, ex, "x = 41\ndef inc(v):\n    return v + 1")
	register(t, ex, "go", testmcpStdio(t))
	before := run(t, ex, "import os\nprint(os.environ['IPYBOX_TOOL_URL'])").Text
	id := ex.KernelID()
	if id == "" {
		t.Fatal("no kernel id")
	}
	if err := ex.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if _, err := ex.Execute(t.Context(), "1", nil); !errors.Is(err, ipybox.ErrClosed) {
		t.Errorf("Execute after Detach: %v, want ErrClosed", err)
	}
	ga := *g
	ga.KernelID = id
	ex2 := start(t, &ipybox.Options{Gateway: &ga, NoToolApproval: true, WorkDir: ws})
	if got := ex2.KernelID(); got != id {
		t.Errorf("attached to %q, want %q", got, id)
	}
	if got := run(t, ex2, "print(inc(x))").Text; got != "42" {
		t.Errorf("state after the attach: %q", got)
	}
	after := run(t, ex2, "print(os.environ['IPYBOX_TOOL_URL'])").Text
	if after == before {
		t.Errorf("the kernel still points at the old tool server %s", before)
	}
	if got := run(t, ex2, "from mcptools.go.tool_1 import Params, run\nprint(run(Params(s='1')))").Text; got != "tool-1: 1" {
		t.Errorf("a tool call after the attach: %q", got)
	}
	ex2.Close()
	gb := *g
	gb.KernelID = id // Close deleted it
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if ex3, err := ipybox.Start(ctx, &ipybox.Options{Gateway: &gb}); !errors.Is(err, kernel.ErrNoKernel) {
		if ex3 != nil {
			ex3.Close()
		}
		t.Errorf("attach to a deleted kernel: %v, want ErrNoKernel", err)
	}
	local := start(t, nil)
	if err := local.Detach(); err == nil {
		t.Error("Detach of a local kernel succeeded")
	}
	if got := run(t, local, "print(1)").Text; got != "1" {
		t.Errorf("a local executor after a refused Detach: %q", got)
	}
}

// TestSnapshotHangBounded: kernel code can make a save hang (a value whose
// pickling sleeps); Snapshot ends with its context all the same, and the
// kernel is left usable.
func TestSnapshotHangBounded(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	ex := start(t, snapshotOpts(ws, "hang"))
	run(t, ex, "import time\nclass Slow:\n    def __reduce__(self):\n        time.sleep(3600)\nslow = Slow()")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	t0 := time.Now()
	_, err := ex.Snapshot(ctx, nil)
	if err == nil {
		t.Fatal("a save that cannot finish reported success")
	}
	if d := time.Since(t0); d > 20*time.Second {
		t.Errorf("Snapshot returned %v after its 3s context", d)
	}
	if got := run(t, ex, "print(6 * 7)").Text; strings.TrimSpace(got) != "42" {
		t.Errorf("the kernel after the hung save: %q", got)
	}
}
