//go:build linux

package ipybox_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestRewindSnapshot rewinds a sandboxed and a container kernel, whose
// boundaries are snapshots: a cell that deleted a variable and mutated a
// list is undone, the report and the note say it went through a snapshot
// and name what did not come back (an open file), a rewind past the
// boundaries kept says how far it can go, and the boundaries' folders
// are gone after Close.
func TestRewindSnapshot(t *testing.T) {
	testenv.NeedsPython(t)
	for _, backend := range []string{"sandbox", "container"} {
		t.Run(backend, func(t *testing.T) {
			o := snapshotOpts(t.TempDir(), "s")
			if backend == "sandbox" {
				testenv.NeedsTool(t, "bwrap")
				o.Sandbox = ipybox.DefaultSandbox()
			} else {
				// A workspace of root's under root, written through an
				// idmapped mount, as TestForkConfined's: under root, a
				// snapshot folder in a workspace of another user's is not
				// writable to the container's kernel (Snapshot fails
				// there too).
				testenv.NeedsDocker(t)
				o.Container = &ipybox.ContainerConfig{}
			}
			o.RewindDepth = 2
			ex := start(t, o)
			ctx := context.Background()
			frun(t, ex, "xs = [1, 2]\nv = 'keep'\nfh = open('/dev/null')")
			frun(t, ex, "del v\nxs.append(3)")
			t0 := time.Now()
			rep, err := ex.Rewind(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("rewind took %v", time.Since(t0))
			if rep.Method != "snapshot" || rep.Restore == nil || rep.Left != 1 {
				t.Fatalf("report %+v", rep)
			}
			res, err := ex.Execute(ctx, "print(xs, v, 'fh' in dir())", nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(res.Text); got != "[1, 2] keep False" {
				t.Fatalf("after rewind: %q", got)
			}
			if !strings.Contains(res.Note, "rewound 1 cell") || !strings.Contains(res.Note, "snapshot") || !strings.Contains(res.Note, "fh (") {
				t.Fatalf("note %q", res.Note)
			}
			// Boundaries now: before the first cell, before "print".
			_, err = ex.Rewind(ctx, 3)
			if err == nil || !strings.Contains(err.Error(), "1 to 2 cells") {
				t.Fatalf("rewind past the bound: %v", err)
			}
			area := filepath.Join(ex.SnapshotDir(), "rewind")
			if ents, err := os.ReadDir(area); err != nil || len(ents) != 2 {
				t.Fatalf("the boundaries' folder holds %v (%v), want 2 boundaries", ents, err)
			}
			rep, err = ex.Rewind(ctx, 2)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Cells != 2 || rep.Left != 0 {
				t.Errorf("rewind of 2: %+v, want 2 cells undone and none left", rep)
			}
			if got := frun(t, ex, "print('xs' in dir())"); got != "False" {
				t.Fatalf("rewound before the first cell: %q", got)
			}
			frun(t, ex, "y = 1")
			if err := ex.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(area); !os.IsNotExist(err) {
				t.Fatalf("the boundaries' folder is still there after Close: %v", err)
			}
			if _, err := os.Stat(ex.SnapshotDir()); err != nil {
				t.Fatalf("the snapshot folder went with Close: %v", err)
			}
		})
	}
}

// TestRewindSnapshotSaveFails: a cell whose boundary cannot be saved (the
// snapshot limit leaves no room; the boundaries' folder replaced by a link
// out of the snapshot folder by kernel code) still runs, and a rewind of
// it says that it cannot be undone and why; the host follows no link the
// kernel planted, and removes nothing outside the snapshot folder.
func TestRewindSnapshotSaveFails(t *testing.T) {
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	o := snapshotOpts(ws, "s")
	o.RewindDepth = 2
	o.Sandbox = ipybox.DefaultSandbox()
	ex := start(t, o)
	ctx := context.Background()
	frun(t, ex, "x = 1")
	if _, err := ex.Snapshot(ctx, &ipybox.SnapshotOptions{MaxBytes: 10}); err == nil {
		t.Fatal("a snapshot within 10 bytes was saved")
	}
	if got := frun(t, ex, "x += 1\nprint(x)"); got != "2" {
		t.Fatalf("the cell whose boundary failed: %q", got)
	}
	_, err := ex.Rewind(ctx, 1)
	if err == nil || !strings.Contains(err.Error(), "cannot be undone") {
		t.Fatalf("rewind of a cell whose boundary failed: %v", err)
	}
	if _, err := ex.Rewind(ctx, 2); err != nil {
		t.Fatalf("the boundary before it: %v", err)
	}
	if got := frun(t, ex, "print('x' in dir())"); got != "False" {
		t.Fatalf("after rewinding 2, before the first cell: %q", got)
	}

	// Kernel code swaps the boundaries' folder for a link to a folder of
	// the workspace.
	if _, err := ex.Snapshot(ctx, nil); err != nil { // the limit back to none
		t.Fatal(err)
	}
	victim := filepath.Join(ws, "victim")
	os.MkdirAll(filepath.Join(victim, "3"), 0o755)
	os.WriteFile(filepath.Join(victim, "3", "keep"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(victim, "keep"), []byte("x"), 0o644)
	area := filepath.Join(ex.SnapshotDir(), "rewind")
	frun(t, ex, "import shutil, os\nshutil.rmtree("+strconv.Quote(area)+")\nos.symlink("+strconv.Quote(victim)+", "+strconv.Quote(area)+")")
	if got := frun(t, ex, "print('ran')"); got != "ran" {
		t.Fatalf("the cell after the link: %q", got)
	}
	if _, err := ex.Rewind(ctx, 1); err == nil || !strings.Contains(err.Error(), "cannot be undone") {
		t.Fatalf("rewind through a planted link: %v", err)
	}
	if err := ex.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"keep", "3/keep"} {
		if _, err := os.Stat(filepath.Join(victim, p)); err != nil {
			t.Fatalf("the host removed %s through the kernel's link: %v", p, err)
		}
	}
	if _, err := os.Lstat(area); !os.IsNotExist(err) {
		t.Fatalf("the planted link is still there after Close: %v", err)
	}
}

// TestRewindSnapshotNeedsFolder: a sandboxed kernel keeps its boundaries
// as snapshots, and Start refuses RewindDepth without a SnapshotDir,
// naming the fix.
func TestRewindSnapshotNeedsFolder(t *testing.T) {
	_, err := ipybox.Start(t.Context(), &ipybox.Options{WorkDir: t.TempDir(), RewindDepth: 1, Sandbox: ipybox.DefaultSandbox()})
	if err == nil || !strings.Contains(err.Error(), "set SnapshotDir") {
		t.Fatalf("Start: %v", err)
	}
}

// TestRewindSnapshotReportsDeath: a sandboxed kernel that dies between
// cells is reported in the next cell's Result.Restarted, though the
// boundary's save cell ran first (and found it dead); that cell cannot be
// undone, and says so.
func TestRewindSnapshotReportsDeath(t *testing.T) {
	testenv.NeedsTool(t, "bwrap")
	o := snapshotOpts(t.TempDir(), "s")
	o.RewindDepth = 2
	o.Sandbox = ipybox.DefaultSandbox()
	ex := start(t, o)
	ctx := context.Background()
	frun(t, ex, "import os, threading, time\nthreading.Thread(target=lambda: (time.sleep(0.3), os.kill(os.getpid(), 9))).start()")
	time.Sleep(time.Second)
	res, err := ex.Execute(ctx, "print('after')", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Restarted == nil || strings.TrimSpace(res.Text) != "after" {
		t.Fatalf("the kernel's death was not reported: %+v", res)
	}
	if _, err := ex.Rewind(ctx, 1); err == nil || !strings.Contains(err.Error(), "cannot be undone") {
		t.Fatalf("rewind of the cell after the death: %v", err)
	}
}
