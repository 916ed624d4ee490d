package ipybox

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ipybox/ipybox/internal/defaults"
	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/safefs"
)

// maxRewindDepth bounds Options.RewindDepth (3): each kept boundary is a
// stopped copy of the kernel process, which costs the memory the kernel
// has changed since, or a snapshot of its namespace on disk.
const maxRewindDepth = defaults.MaxRewindDepth

// rewindFolder is the folder of Options.SnapshotDir that holds the cell
// boundaries kept as snapshots, one folder each, named by a counter.
const rewindFolder = "rewind"

// The ways a boundary is kept (rewindMode).
const (
	rewindNone     = ""         // a gateway kernel: none
	rewindProcess  = "process"  // a copy-on-write fork of the kernel (unsandboxed, Linux)
	rewindSnapshot = "snapshot" // a snapshot of the namespace (sandbox, container, off Linux)
)

// rewindMode says how this Executor keeps its cell boundaries: as process
// forks where the kernel can be forked and adopted (an unsandboxed kernel
// on Linux, as Fork does), as snapshots where it cannot, and not at all on
// a gateway.
func rewindMode(o *Options) string {
	switch {
	case o.Gateway != nil:
		return rewindNone
	case o.Sandbox != nil || o.Container != nil || runtime.GOOS != "linux":
		return rewindSnapshot
	}
	return rewindProcess
}

// checkRewind refuses Options.RewindDepth where its boundaries cannot be
// kept: as snapshots, they need Options.SnapshotDir.
func checkRewind(o *Options, snapshotDir string) error {
	if o.RewindDepth > 0 && rewindMode(o) == rewindSnapshot && snapshotDir == "" {
		return errors.New("ipybox: Options.RewindDepth: a sandboxed or container kernel (or any kernel off Linux) keeps its cell boundaries as snapshots of its namespace, and this Executor has no Options.SnapshotDir to keep them in; set SnapshotDir, or RewindDepth 0")
	}
	return nil
}

// rewindArea names the folder of the snapshot folder that the cell
// boundaries take, when they are kept as snapshots: a Snapshot leaves it
// out of its measure and its emptying, as it is bounded on its own.
func (e *Executor) rewindArea() []string {
	if e.opts.RewindDepth > 0 && rewindMode(&e.opts) == rewindSnapshot {
		return []string{rewindFolder}
	}
	return nil
}

// rewindState is an Executor's kept cell boundaries, one before each cell
// (of Stream and Execute; silent housekeeping cells excluded). Guarded by
// Executor.sem (held by the cell or the rewind).
type rewindState struct {
	mu     sync.Mutex
	points []*checkpoint // oldest first
	note   string        // for the next Result
	seq    int           // names the snapshot boundaries' folders
}

// checkpoint is one cell boundary: a process (proc), a snapshot (dir), or
// one that could not be kept (lost says why; the cell after it cannot be
// undone).
type checkpoint struct {
	proc *lifelined
	base string // the snapshot folder, dir's base
	dir  string // the snapshot's folder beneath base
	lost string
	cell string // the first line of the cell it was taken before
	at   time.Time
}

func (c *checkpoint) drop() {
	switch {
	case c.proc != nil:
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.proc.Kill(ctx)
	case c.dir != "":
		safefs.RemoveAllBeneath(c.base, c.dir)
	}
}

// RewindReport says what a Rewind brought back.
type RewindReport struct {
	// Cells is how many cells were undone.
	Cells int
	// Before is the first line of the earliest cell undone: the namespace
	// is as it was before it ran.
	Before string
	// At is when that boundary was kept.
	At time.Time
	// Left is how many more cells can still be undone.
	Left int
	// Method is how the boundary was kept: "process" (a copy-on-write
	// fork of the kernel: everything in memory came back) or "snapshot"
	// (the namespace saved before the cell and loaded into a fresh
	// kernel: Restore names what did not come back).
	Method string
	// Restore is what came back, for a "snapshot" boundary (nil for
	// "process").
	Restore *RestoreReport
}

// checkpointBefore keeps the boundary before the cell code. A failure is
// logged, not the cell's: the cell runs, and cannot be undone (a rewind
// to it says why). A kernel death that the checkpoint's cell was first to
// see is returned, for the cell's Result.Restarted.
func (e *Executor) checkpointBefore(ctx context.Context, code string) (died *kernel.DiedError) {
	depth := min(e.opts.RewindDepth, maxRewindDepth)
	mode := rewindMode(&e.opts)
	if depth <= 0 || mode == rewindNone {
		return nil
	}
	first, _, _ := strings.Cut(strings.TrimSpace(code), "\n")
	if len(first) > 80 {
		first = first[:80] + "..."
	}
	cp := &checkpoint{cell: first, at: time.Now()}
	var err error
	switch {
	case !e.k.Alive():
		// The cell restarts a dead kernel and reports its death: a save or
		// fork cell first would restart it and take the report.
		err = errors.New("the kernel had died before the cell")
	case mode == rewindProcess:
		cp.proc, err = e.processBoundary(ctx)
	default:
		cp.base = e.snapshotDir
		cp.dir, err = e.snapshotBoundary(ctx)
	}
	if err != nil {
		e.log.Warn("rewind: keeping the cell boundary failed; this cell cannot be undone", "err", err)
		errors.As(err, &died)
		cp.lost = err.Error()
	}
	e.keepBoundary(cp, depth)
	return died
}

// keepBoundary adds cp to the boundaries kept, and drops the oldest past
// depth.
func (e *Executor) keepBoundary(cp *checkpoint, depth int) {
	r := &e.rewind
	r.mu.Lock()
	r.points = append(r.points, cp)
	var old []*checkpoint
	if n := len(r.points) - depth; n > 0 {
		old = append(old, r.points[:n]...)
		r.points = append([]*checkpoint(nil), r.points[n:]...)
	}
	r.mu.Unlock()
	for _, c := range old {
		c.drop()
	}
}

// processBoundary forks the kernel into a stopped copy, woken by a rewind.
func (e *Executor) processBoundary(ctx context.Context) (*lifelined, error) {
	spec, info, remove, err := e.k.PrepareSpec()
	if err != nil {
		return nil, err
	}
	p, err := forkKernel(ctx, e.k, spec, true)
	if err != nil {
		remove()
		return nil, err
	}
	p.conn, p.remove = info, remove
	return p, nil
}

// takeNote returns the note for the next Result, once.
func (e *Executor) takeNote() string {
	e.rewind.mu.Lock()
	defer e.rewind.mu.Unlock()
	n := e.rewind.note
	e.rewind.note = ""
	return n
}

// dropCheckpoints ends every kept boundary (Close, Reset), and removes
// the boundaries' folder whole: kernel code can write there too.
func (e *Executor) dropCheckpoints() {
	e.rewind.mu.Lock()
	pts := e.rewind.points
	e.rewind.points = nil
	e.rewind.mu.Unlock()
	for _, c := range pts {
		c.drop()
	}
	if len(e.rewindArea()) > 0 && e.snapshotDir != "" {
		safefs.RemoveAllBeneath(e.snapshotDir, rewindFolder)
	}
}

// snapshotBoundary has the kernel save its namespace in a new folder of
// the boundaries' (within the last Snapshot's MaxBytes, as a fork's save),
// and bounds that folder as a whole; it returns the new folder, beneath
// the snapshot folder. A kernel found dead is returned as a
// *kernel.DiedError in the error's chain.
func (e *Executor) snapshotBoundary(ctx context.Context) (string, error) {
	r := &e.rewind
	r.mu.Lock()
	r.seq++
	rel := filepath.Join(rewindFolder, strconv.Itoa(r.seq))
	r.mu.Unlock()
	// Bounded: kernel code can make a save hang (a __reduce__ that
	// sleeps), and the cell waits for it.
	ctx, cancel := context.WithTimeout(ctx, defaults.SnapshotSave)
	defer cancel()
	_, died, err := e.saveIn(ctx, rel, e.saved.max)
	if died != nil {
		err = fmt.Errorf("the kernel had died before the cell: %w", died)
	}
	if err == nil {
		err = e.boundRewindArea(rel)
	}
	if err != nil {
		safefs.RemoveAllBeneath(e.snapshotDir, rel)
		return "", fmt.Errorf("saving the namespace: %w", err)
	}
	return rel, nil
}

// boundRewindArea bounds the boundaries' folder as a whole, the new
// boundary rel in it: kernel code can write there, into a boundary kept
// earlier or beside them. What is no kept boundary's goes; past the
// snapshot limit once per boundary, or too many files, all of it goes,
// and the boundaries kept are lost.
func (e *Executor) boundRewindArea(rel string) error {
	r := &e.rewind
	keep := []string{filepath.Base(rel)}
	r.mu.Lock()
	for _, c := range r.points {
		if c.dir != "" {
			keep = append(keep, filepath.Base(c.dir))
		}
	}
	r.mu.Unlock()
	err := safefs.EmptyBeneath(e.snapshotDir, rewindFolder, keep...)
	var size int64
	if err == nil {
		size, err = safefs.SizeBeneath(e.snapshotDir, rewindFolder, maxSnapshotEntries)
	}
	if max := e.saved.max; err == nil && max > 0 && size > max*int64(len(keep)) {
		err = fmt.Errorf("they hold %d bytes, over %d for %d boundaries of at most %d (kernel code wrote to them)", size, max*int64(len(keep)), len(keep), max)
	}
	if err == nil {
		return nil
	}
	safefs.EmptyBeneath(e.snapshotDir, rewindFolder)
	lost := "its folder was emptied with the other boundaries': " + err.Error()
	r.mu.Lock()
	for _, c := range r.points {
		if c.dir != "" {
			c.dir, c.lost = "", lost
		}
	}
	r.mu.Unlock()
	return fmt.Errorf("the boundaries' folder was emptied: %w", err)
}

// Rewind returns the session to its state before its last cells cells,
// and the next Result's Note says so. Files, installed packages and MCP
// servers are not rewound. It needs Options.RewindDepth (the boundaries
// kept, at most maxRewindDepth); past the boundaries kept it fails and
// says how far it can go, and a cell whose boundary could not be kept
// cannot be undone (it says why). It refuses with ErrBusy while a cell
// runs, and a gateway kernel cannot be rewound.
//
// An unsandboxed kernel on Linux is replaced by the copy-on-write fork
// kept at that boundary (RewindReport.Method "process"), so everything in
// memory comes back (a deleted variable, a mutated list). A sandboxed or
// container kernel (or any off Linux) cannot be forked so: its boundary
// is a snapshot of its namespace, saved by the kernel before the cell in
// Options.SnapshotDir, and a rewind restarts the kernel fresh and loads
// it ("snapshot"): what a snapshot cannot keep (open files, sockets,
// threads) does not come back, and the report and the note name it.
func (e *Executor) Rewind(ctx context.Context, cells int) (*RewindReport, error) {
	mode := rewindMode(&e.opts)
	if mode == rewindNone {
		return nil, errors.New("ipybox: rewind: a gateway kernel runs on another machine, and ipybox can keep neither a copy of its process nor a snapshot of it; a gateway session cannot be rewound (start a new session instead)")
	}
	if e.opts.RewindDepth <= 0 {
		return nil, errors.New("ipybox: rewind: this Executor keeps no cell boundaries; set Options.RewindDepth (1 to 3; a sandboxed or container kernel needs Options.SnapshotDir too)")
	}
	select {
	case e.sem <- struct{}{}:
	default:
		return nil, ErrBusy
	}
	defer e.release()
	e.saved.fresh = false
	cp, left, err := e.takeBoundary(cells)
	if err != nil {
		return nil, err
	}
	defer cp.drop()
	rep := &RewindReport{Cells: cells, Before: cp.cell, At: cp.at, Left: left, Method: mode}
	if cp.proc != nil {
		if err := e.k.RestartWith(ctx, &wakeLauncher{cp: cp}); err != nil {
			return nil, fmt.Errorf("ipybox: rewind: %w", executorErr(cp.proc.failed(err)))
		}
		cp.proc = nil // it is the kernel now
	} else if rep.Restore, err = e.rewindSnapshot(ctx, cp); err != nil {
		return nil, err
	}
	e.rewind.mu.Lock()
	e.rewind.note = rewindNote(rep)
	e.rewind.mu.Unlock()
	return rep, nil
}

// takeBoundary takes the boundary before the last cells cells out of
// those kept, with the ones newer than it dropped, and returns it and how
// many are left before it; or it says how far a rewind can go.
func (e *Executor) takeBoundary(cells int) (*checkpoint, int, error) {
	r := &e.rewind
	r.mu.Lock()
	n := len(r.points)
	if cells < 1 || cells > n {
		r.mu.Unlock()
		keep := min(e.opts.RewindDepth, maxRewindDepth)
		if n == 0 {
			return nil, 0, fmt.Errorf("ipybox: rewind: %d cells asked; this session can undo no cell now: it keeps the last %d boundaries, and none was kept since its start, its reset, its wake or the last rewind", cells, keep)
		}
		return nil, 0, fmt.Errorf("ipybox: rewind: %d cells asked; this session can undo 1 to %d cells now (it keeps the last %d boundaries)", cells, n, keep)
	}
	cp := r.points[n-cells]
	if cp.lost != "" {
		r.mu.Unlock()
		return nil, 0, fmt.Errorf("ipybox: rewind: %d cells asked; the boundary before %q was not kept, so that cell cannot be undone (%s); a rewind of other cells may still work", cells, cp.cell, cp.lost)
	}
	newer := append([]*checkpoint(nil), r.points[n-cells+1:]...)
	r.points = append([]*checkpoint(nil), r.points[:n-cells]...)
	r.mu.Unlock()
	for _, c := range newer {
		c.drop()
	}
	return cp, n - cells, nil
}

// rewindSnapshot restarts the kernel fresh and loads cp's snapshot into
// it; the caller holds e.sem, and drops cp.
func (e *Executor) rewindSnapshot(ctx context.Context, cp *checkpoint) (*RestoreReport, error) {
	if err := e.k.Restart(ctx); err != nil {
		return nil, fmt.Errorf("ipybox: rewind: restarting the kernel: %w", executorErr(err))
	}
	e.forgetMu.Lock()
	e.forget = nil // a fresh kernel has imported nothing
	e.forgetMu.Unlock()
	rep, err := e.restoreIn(ctx, cp.dir)
	if errors.Is(err, ErrNoSnapshot) {
		err = errors.New("its snapshot is gone (kernel code removed it)")
	}
	if err != nil {
		return nil, fmt.Errorf("ipybox: rewind: the kernel was restarted, and loading the snapshot of the boundary before %q failed, so its namespace is empty: %w", cp.cell, err)
	}
	return rep, nil
}

// rewindNote is the note the next Result carries after a rewind, worded as
// a fork's (forkNote) for a boundary kept as a snapshot: the names that
// did not come back, and why (kernel code chooses them: a person's view
// escapes them).
func rewindNote(rep *RewindReport) string {
	n := fmt.Sprintf("this session was rewound %d cell(s): its namespace is as it was before %q (kept at %s)", rep.Cells, rep.Before, rep.At.Format("15:04:05"))
	if rep.Restore != nil {
		n += ", through a snapshot (its backend cannot fork a process): the kernel was restarted and the namespace saved before that cell loaded" + restoreCounts(rep.Restore)
	}
	return n + "; files, installed packages and MCP servers were not rewound"
}

// wakeLauncher starts a kernel by waking a kept boundary, a kernel already
// bound to a connection of its own (kernel.Prepared): a line down its
// lifeline, and the kernel package connects to it.
type wakeLauncher struct{ cp *checkpoint }

// Start implements kernel.Launcher.
func (l *wakeLauncher) Start(ctx context.Context, spec *kernel.Spec) (kernel.Process, error) {
	if _, err := l.cp.proc.w.Write([]byte("\n")); err != nil {
		return nil, fmt.Errorf("wake the kept boundary: %w", err)
	}
	return l.cp.proc, nil
}
