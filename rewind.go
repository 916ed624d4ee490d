package ipybox

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/ipybox/ipybox/internal/defaults"
	"github.com/ipybox/ipybox/internal/kernel"
)

// maxRewindDepth bounds Options.RewindDepth (3): each kept boundary is a
// stopped copy of the kernel process, which costs the memory the kernel
// has changed since.
const maxRewindDepth = defaults.MaxRewindDepth

// rewindState is an Executor's kept cell boundaries: before each cell (of
// Stream and Execute; silent housekeeping cells excluded), a copy-on-write
// fork of the kernel, stopped, waiting on its lifeline. Guarded by
// Executor.sem (held by the cell or the rewind).
type rewindState struct {
	mu     sync.Mutex
	points []*checkpoint // oldest first
	note   string        // for the next Result
}

type checkpoint struct {
	proc *lifelined
	cell string // the first line of the cell it was taken before
	at   time.Time
}

func (c *checkpoint) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.proc.Kill(ctx)
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
}

// checkpointBefore keeps the boundary before the cell code. A failure is
// logged, not the cell's: the cell runs, and cannot be undone. A kernel
// death that the checkpoint's cell was first to see is returned, for the
// cell's Result.Restarted.
func (e *Executor) checkpointBefore(ctx context.Context, code string) (died *kernel.DiedError) {
	depth := min(e.opts.RewindDepth, maxRewindDepth)
	if depth <= 0 || e.opts.Sandbox != nil || e.opts.Container != nil || e.opts.Gateway != nil || runtime.GOOS != "linux" {
		return nil
	}
	if !e.k.Alive() {
		// The cell restarts a dead kernel and reports its death: a fork
		// cell first would restart it and take the report.
		return nil
	}
	spec, info, remove, err := e.k.PrepareSpec()
	var p *lifelined
	if err == nil {
		if p, err = forkKernel(ctx, e.k, spec, true); err != nil {
			remove()
		}
	}
	if err != nil {
		e.log.Warn("rewind: keeping the cell boundary failed; this cell cannot be undone", "err", err)
		errors.As(err, &died)
		return died
	}
	p.conn, p.remove = info, remove
	first, _, _ := strings.Cut(strings.TrimSpace(code), "\n")
	if len(first) > 80 {
		first = first[:80] + "..."
	}
	r := &e.rewind
	r.mu.Lock()
	r.points = append(r.points, &checkpoint{proc: p, cell: first, at: time.Now()})
	var old []*checkpoint
	if n := len(r.points) - depth; n > 0 {
		old = append(old, r.points[:n]...)
		r.points = append([]*checkpoint(nil), r.points[n:]...)
	}
	r.mu.Unlock()
	for _, c := range old {
		c.drop()
	}
	return nil
}

// takeNote returns the note for the next Result, once.
func (e *Executor) takeNote() string {
	e.rewind.mu.Lock()
	defer e.rewind.mu.Unlock()
	n := e.rewind.note
	e.rewind.note = ""
	return n
}

// dropCheckpoints ends every kept boundary (Close, Reset).
func (e *Executor) dropCheckpoints() {
	e.rewind.mu.Lock()
	pts := e.rewind.points
	e.rewind.points = nil
	e.rewind.mu.Unlock()
	for _, c := range pts {
		c.drop()
	}
}

// Rewind returns the session to its state before its last cells cells:
// the kernel is replaced by the copy kept at that boundary, so everything
// in memory comes back (a deleted variable, a mutated list), and the next
// Result's Note says so. Files, installed packages and MCP servers are not
// rewound. It needs Options.RewindDepth (the boundaries kept, at most
// maxRewindDepth) on an unsandboxed kernel; past the boundaries kept it
// fails and says how far it can go. It refuses with ErrBusy while a cell
// runs.
func (e *Executor) Rewind(ctx context.Context, cells int) (*RewindReport, error) {
	if e.opts.Sandbox != nil || e.opts.Container != nil || e.opts.Gateway != nil || runtime.GOOS != "linux" {
		return nil, errors.New("ipybox: rewind: only an unsandboxed kernel on Linux keeps cell boundaries; a sandboxed, container or gateway session cannot be rewound yet (fork it before a risky step instead)")
	}
	if e.opts.RewindDepth <= 0 {
		return nil, errors.New("ipybox: rewind: this Executor keeps no cell boundaries; set Options.RewindDepth (1 to 3, unsandboxed kernels)")
	}
	select {
	case e.sem <- struct{}{}:
	default:
		return nil, ErrBusy
	}
	defer e.release()
	e.saved.fresh = false
	r := &e.rewind
	r.mu.Lock()
	n := len(r.points)
	if cells < 1 || cells > n {
		r.mu.Unlock()
		keep := min(e.opts.RewindDepth, maxRewindDepth)
		if n == 0 {
			return nil, fmt.Errorf("ipybox: rewind: %d cells asked; this session can undo no cell now: it keeps the last %d boundaries, and none was kept since its start, its reset, its wake or the last rewind", cells, keep)
		}
		return nil, fmt.Errorf("ipybox: rewind: %d cells asked; this session can undo 1 to %d cells now (it keeps the last %d boundaries)", cells, n, keep)
	}
	cp := r.points[n-cells]
	newer := append([]*checkpoint(nil), r.points[n-cells+1:]...)
	r.points = append([]*checkpoint(nil), r.points[:n-cells]...)
	r.mu.Unlock()
	for _, c := range newer {
		c.drop()
	}
	if err := e.k.RestartWith(ctx, &wakeLauncher{cp: cp}); err != nil {
		err = cp.proc.failed(err)
		cp.drop()
		return nil, fmt.Errorf("ipybox: rewind: %w", executorErr(err))
	}
	rep := &RewindReport{Cells: cells, Before: cp.cell, At: cp.at, Left: n - cells}
	r.mu.Lock()
	r.note = fmt.Sprintf("this session was rewound %d cell(s): its namespace is as it was before %q (kept at %s); files, installed packages and MCP servers were not rewound", cells, cp.cell, cp.at.Format("15:04:05"))
	r.mu.Unlock()
	return rep, nil
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
