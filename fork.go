package ipybox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ipybox/ipybox/internal/defaults"
	"github.com/ipybox/ipybox/internal/jupyter"
	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/pyruntime"
	"github.com/ipybox/ipybox/internal/safefs"
)

// The ways a fork is made (ForkInfo.Method).
const (
	// forkProcess: a copy-on-write fork of the live kernel process, made by
	// the kernel itself between cells. Everything in memory comes along.
	forkProcess = "process"
	// forkSnapshot: the source's namespace saved with Snapshot and loaded
	// into a fresh kernel of the same backend with Restore; what cannot be
	// saved (open files, threads, ...) is named in Restore.
	forkSnapshot = "snapshot"
)

// ForkInfo says how a fork was made.
type ForkInfo struct {
	// Source is the session (Options.SessionID) of the Executor forked.
	Source string
	// Method is "process" (a copy-on-write fork of the live kernel
	// process, made by the kernel itself between cells: everything in
	// memory comes along) or "snapshot" (the source's namespace saved with
	// Snapshot and loaded into a fresh kernel of the same backend with
	// Restore; what cannot be saved is named in Restore).
	Method string
	// Restore is what came back, for forkSnapshot (nil for forkProcess).
	Restore *RestoreReport
	// Note is the sentence a fork's first result can start with.
	Note string
}

// forkNote is f's Note.
func forkNote(f *ForkInfo) string {
	if f.Method == forkProcess {
		return "this session is a fork of " + f.Source + ": a copy-on-write copy of its kernel process; every name came along; files are shared, not forked"
	}
	n := "this session is a fork of " + f.Source + ", made through a snapshot (its backend cannot fork a process)"
	if f.Restore != nil {
		n += restoreCounts(f.Restore)
	}
	return n + "; files are shared, not forked"
}

// restoreCounts words what a restore through a snapshot brought back, for
// a note: how many names came back, and the first of those that did not,
// with why.
func restoreCounts(r *RestoreReport) string {
	n := fmt.Sprintf(": %d names came back, %d did not", r.RestoredCount, r.MissingCount)
	for i, m := range r.Missing {
		if i == 20 {
			break
		}
		n += "; " + m.Name + " (" + m.Reason + ")"
	}
	return n
}

// ForkInfo returns how this Executor was forked, or nil if it was not.
func (e *Executor) ForkInfo() *ForkInfo { return e.forked }

// ErrBusy is returned by Fork and Rewind while the session runs a cell.
var ErrBusy = errors.New("ipybox: the session is running a cell; fork or rewind it when the cell has ended (or interrupt it)")

// Fork makes n new Executors (1 to defaults.MaxForks) whose kernels hold this one's
// namespace: variables, imports, definitions. Each is an Executor in its
// own right, with its own tool server and token, session id, run folder
// and kernel process, and it is closed on its own: closing the source does
// not end its forks, nor the reverse. Their options are this Executor's,
// with a new SessionID and package and snapshot folders of their own;
// prepare, when not nil, is called on each fork's Options (i from 0) before
// it starts, to set its SessionID, PackageDir or SnapshotDir.
//
// An unsandboxed kernel (directly started or from a Zygote) is forked as a
// process, copy-on-write (forkProcess); a sandboxed or container kernel
// through a snapshot (forkSnapshot: Options.SnapshotDir must be set; the
// last Snapshot is reused while no cell has run since, or else one is
// saved within the last Snapshot's MaxBytes); a gateway kernel cannot be
// forked. Files are not forked: a fork shares the
// workspace with its source. Fork refuses with ErrBusy while a cell runs;
// a cell sent while the forks prepare runs before their copies are made.
func (e *Executor) Fork(ctx context.Context, n int, prepare func(i int, o *Options) error) ([]*Executor, error) {
	if n < 1 || n > defaults.MaxForks {
		return nil, fmt.Errorf("ipybox: fork: count %d; make 1 to %d forks at a time", n, defaults.MaxForks)
	}
	if e.opts.Gateway != nil {
		return nil, errors.New("ipybox: fork: a gateway kernel runs on another machine, and ipybox cannot copy its process or its snapshot; start a new session instead")
	}
	opts := make([]*Options, n)
	for i := range opts {
		o := e.opts
		o.SessionID, o.PackageDir, o.SnapshotDir = "", "", ""
		if e.snapshotDir != "" {
			o.SnapshotDir = siblingDir(e.snapshotDir)
		}
		if prepare != nil {
			if err := prepare(i, &o); err != nil {
				return nil, fmt.Errorf("ipybox: fork: %w", err)
			}
		}
		opts[i] = &o
	}
	if e.opts.Sandbox != nil || e.opts.Container != nil || runtime.GOOS != "linux" {
		// Adopting a process fork needs Linux (a pidfd).
		return e.forkSnapshot(ctx, opts)
	}
	// Busy now is refused; the forks' cells take the session in turn
	// (forkProcess), once each fork is ready to copy it.
	select {
	case e.sem <- struct{}{}:
		e.release()
	default:
		return nil, ErrBusy
	}
	return e.forkProcess(ctx, opts)
}

// siblingDir names a new folder beside dir.
func siblingDir(dir string) string {
	return filepath.Join(filepath.Dir(dir), "fork-"+jupyter.NewID()[:16])
}

// forkProcess starts the forks at once. The source is held (e.sem) only
// while their fork cells run, back to back (forkTurns): while the forks
// prepare their tool servers, run folders and kernel options, the
// source's cells run, and the forks copy the state after them. So the
// source's next cell waits for the forks' copies only, not for their
// preparation, nor for their kernels to start.
func (e *Executor) forkProcess(ctx context.Context, opts []*Options) ([]*Executor, error) {
	turns := newForkTurns(e, len(opts))
	defer turns.end()
	return startAll(ctx, opts, func(ctx context.Context, o *Options) (*Executor, error) {
		o.Python = e.k.Python()
		l := &forkLauncher{src: e, turns: turns}
		f, err := start(ctx, o, func(next kernel.Launcher) kernel.Launcher {
			if h := forkPreparing.Load(); h != nil {
				(*h)()
			}
			if next == nil {
				next = kernel.DirectLauncher{}
			}
			l.next = next
			return l
		})
		if err != nil {
			if !l.used {
				turns.skip() // it failed before its turn
			}
			if l.proc != nil {
				err = l.proc.failed(err)
			}
			return nil, err
		}
		f.forked = &ForkInfo{Source: e.session, Method: forkProcess}
		f.forked.Note = forkNote(f.forked)
		return f, nil
	})
}

// forkTurns lets the forks of one Fork copy one state: each, once
// prepared, waits for the others to be prepared (or to have failed); then
// their fork cells run one at a time while the source is held, and the
// source is released after the last.
type forkTurns struct {
	src     *Executor
	ready   chan struct{} // closed when every fork is prepared or failed
	mu      sync.Mutex    // held by the fork cell that runs
	waiting int           // forks not yet prepared; guarded by mu
	left    int           // fork cells not yet run; guarded by mu
	held    bool          // whether the source is held; guarded by mu
}

func newForkTurns(src *Executor, n int) *forkTurns {
	return &forkTurns{src: src, ready: make(chan struct{}), waiting: n, left: n}
}

// arrive counts a fork as prepared (or failed), with mu held.
func (t *forkTurns) arrive() {
	if t.waiting--; t.waiting == 0 {
		close(t.ready)
	}
}

// done counts a fork cell as run (or never to run), with mu held, and
// releases the source after the last.
func (t *forkTurns) done() {
	if t.left--; t.left == 0 && t.held {
		t.held = false
		t.src.release()
	}
}

// take waits for every fork to be prepared, then for this fork's turn, and
// holds the source (waiting for a cell of its that runs). It returns with
// mu held, also on an error: give ends the turn.
func (t *forkTurns) take(ctx context.Context) error {
	t.mu.Lock()
	t.arrive()
	t.mu.Unlock()
	select {
	case <-t.ready:
	case <-ctx.Done():
		t.mu.Lock()
		return fmt.Errorf("waiting for the other forks to be ready: %w", ctx.Err())
	}
	t.mu.Lock()
	if t.held {
		return nil
	}
	select {
	case t.src.sem <- struct{}{}:
		t.held = true
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the source's running cell to end: %w", ctx.Err())
	}
}

// give ends the turn that take began.
func (t *forkTurns) give() {
	t.done()
	t.mu.Unlock()
}

// skip counts a fork that failed before its turn.
func (t *forkTurns) skip() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.arrive()
	t.done()
}

// end releases the source if a fork left it held (bound: every start has
// returned).
func (t *forkTurns) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held {
		t.held = false
		t.src.release()
	}
}

// startAll runs start for each of opts at once; on any error it closes the
// ones that started and returns the first error.
func startAll(ctx context.Context, opts []*Options, start func(context.Context, *Options) (*Executor, error)) ([]*Executor, error) {
	out := make([]*Executor, len(opts))
	errs := make([]error, len(opts))
	var wg sync.WaitGroup
	for i, o := range opts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = start(ctx, o)
		}()
	}
	wg.Wait() // bound: each start is bounded by ctx and InitTimeout
	if err := errors.Join(errs...); err != nil {
		for _, f := range out {
			if f != nil {
				f.Close()
			}
		}
		return nil, &forkError{msg: "ipybox: fork: " + strings.ReplaceAll(err.Error(), "ipybox: ", ""), err: err}
	}
	return out, nil
}

// forkError is a failed fork's error, worded once ("ipybox: fork: ..."),
// that still matches what it wraps.
type forkError struct {
	msg string
	err error
}

func (e *forkError) Error() string { return e.msg }
func (e *forkError) Unwrap() error { return e.err }

// forkSnapshot saves the source's namespace and restores it into a fresh
// kernel of the same backend per fork.
func (e *Executor) forkSnapshot(ctx context.Context, opts []*Options) ([]*Executor, error) {
	if e.snapshotDir == "" {
		return nil, errors.New("ipybox: fork: a sandboxed or container kernel (or any kernel off Linux) is forked through a snapshot, and this Executor has no Options.SnapshotDir; set one")
	}
	saved, err := e.saveForFork(ctx)
	if err != nil {
		return nil, fmt.Errorf("ipybox: fork: %w", err)
	}
	return startAll(ctx, opts, func(ctx context.Context, o *Options) (*Executor, error) {
		if o.SnapshotDir == "" {
			return nil, errors.New("a fork through a snapshot needs Options.SnapshotDir of its own")
		}
		f, err := Start(ctx, o)
		if err != nil {
			return nil, err
		}
		rep, err := f.restoreFrom(ctx, e.snapshotDir, saved.bytes)
		if err != nil {
			f.Close()
			return nil, err
		}
		f.forked = &ForkInfo{Source: e.session, Method: forkSnapshot, Restore: rep}
		f.forked.Note = forkNote(f.forked)
		return f, nil
	})
}

// saveForFork returns the source's snapshot for its forks: the one the
// last Snapshot saved, when no cell has run since (an ipybox mcp fork
// saves within its budgets first), or else a new one, within the last
// Snapshot's MaxBytes. Like a process fork, it refuses with ErrBusy while
// a cell runs.
func (e *Executor) saveForFork(ctx context.Context) (savedSnapshot, error) {
	select {
	case e.sem <- struct{}{}:
	default:
		return savedSnapshot{}, ErrBusy
	}
	defer e.release()
	if !e.saved.fresh {
		if _, err := e.snapshotLocked(ctx, SnapshotOptions{MaxBytes: e.saved.max}); err != nil {
			return savedSnapshot{}, err
		}
	}
	return e.saved, nil
}

// restoreFrom copies the snapshot files of src into the Executor's own
// snapshot folder (the host copies bytes and reads none: invariant 13),
// at most limit bytes in all, what the save measured: the source's kernel
// writes src, and may have grown it since (a file appended to, one added,
// a sparse file that the measure counts as nothing), which the host must
// not copy count times. Then it restores them in its kernel.
func (e *Executor) restoreFrom(ctx context.Context, src string, limit int64) (*RestoreReport, error) {
	ents, err := safefs.ReadDirBeneath(src, ".")
	if err != nil {
		return nil, err
	}
	left := limit
	for _, ent := range ents {
		if !ent.Type().IsRegular() {
			continue
		}
		n, err := copyBeneath(src, e.snapshotDir, ent.Name(), left)
		if err != nil {
			return nil, fmt.Errorf("copy the snapshot: %w", err)
		}
		if left -= n; left < 0 {
			return nil, fmt.Errorf("copy the snapshot: it holds more than the %d bytes it held when it was saved (kernel code of the source wrote to it since); fork again", limit)
		}
	}
	return e.Restore(ctx)
}

// copyBeneath copies the regular file name from one folder to another,
// following no link on either side, and at most max+1 bytes of it; it
// returns how many it copied. What the caller listed as a regular file
// may be a FIFO by the time it is opened (the source's kernel writes
// from): safefs.OpenRegular neither waits on one nor reads it.
func copyBeneath(from, to, name string, max int64) (int64, error) {
	in, err := safefs.OpenRegular(from, name)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	safefs.Remove(to, name)
	out, err := safefs.CreateExclusive(to, name, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.CopyN(out, in, max+1)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, errors.Join(err, out.Close())
}

// forkLauncher starts a fork's first kernel by forking the source's live
// kernel; a restart of the fork (a death, Reset) starts a fresh kernel with
// next, as any restart does.
type forkLauncher struct {
	src   *Executor
	turns *forkTurns // one fork cell at a time in the source's kernel
	next  kernel.Launcher
	used  bool
	proc  *lifelined // the copy it made, if it made one
}

// Start implements kernel.Launcher.
func (l *forkLauncher) Start(ctx context.Context, spec *kernel.Spec) (kernel.Process, error) {
	if l.used {
		return l.next.Start(ctx, spec)
	}
	l.used = true
	err := l.turns.take(ctx)
	defer l.turns.give()
	if err != nil {
		return nil, fmt.Errorf("fork: %w", err)
	}
	p, err := forkKernel(ctx, l.src.k, spec, false)
	if err != nil {
		return nil, err // not a nil *lifelined in an interface
	}
	l.proc = p
	return p, nil
}

// forkPreparing, when set, is called as a fork prepares, before its fork
// cell (tests only: fork_export_test.go).
var forkPreparing atomic.Pointer[func()]

// forkNewApp makes the copy start a new kernel app, as it does for an
// ipykernel it cannot rebind (tests only: export_test.go).
var forkNewApp atomic.Bool

// forkMIME is the display a fork cell reports the new kernel's pid in.
const forkMIME = "application/x-ipybox-fork+json"

// forkKernel asks the kernel k to fork itself into a kernel for spec, and
// adopts the fork. The fork gets a lifeline of its own, a pipe of this
// process that it opens by its /proc path: it dies with this process, and
// not with its source. It sets itself up on spec's connection, running
// spec's init code itself (it is kernel.Prepared). With wait (a kept
// boundary), it keeps the source's random state, and binds its
// connection but serves it only once a line comes down its lifeline
// (wakeLauncher). The caller serialises cells of k.
func forkKernel(ctx context.Context, k *kernel.Kernel, spec *kernel.Spec, wait bool) (*lifelined, error) {
	if len(spec.Args) < 2 || spec.Args[0] != "-c" {
		return nil, errors.New("fork: the spec does not launch ipykernel")
	}
	l, err := newLifelined()
	if err != nil {
		return nil, fmt.Errorf("fork: lifeline: %w", err)
	}
	req, _ := json.Marshal(map[string]any{
		"argv": spec.Args[2:], "env": spec.Env, "cwd": spec.Dir, "wait": wait, "keep_random": wait,
		"init":     spec.InitCode,
		"lifeline": fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), l.r.Fd()),
		"report":   fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), l.repW.Fd()),
		"new_app":  forkNewApp.Load(),
	})
	code := fmt.Sprintf("__import__('ipybox_runtime._fork', fromlist=['_']).request(%s)\n", pyruntime.Quote(string(req)))
	res, err := k.Execute(ctx, code, &kernel.ExecOptions{Silent: true})
	pid := 0
	if err == nil {
		pid, err = forkPid(res)
	}
	if err == nil && res.Restarted != nil {
		// The kernel had died, and the fork cell ran in a fresh one: a
		// copy of that holds none of the source's names, and the death is
		// the caller's to report (a kept boundary's cell reports it).
		err = fmt.Errorf("the kernel had died before the fork cell: %w", res.Restarted)
	}
	var p kernel.HostProcess
	if err == nil {
		p, err = kernel.Adopt(pid)
	}
	if err != nil {
		l.closePipes()                          // a fork that started dies at its lifeline's end
		return nil, fmt.Errorf("fork: %w", err) // the kernel's own error: a caller in this package looks for *kernel.DiedError
	}
	l.HostProcess = p
	return l, nil
}

// forkPid reads the fork cell's report.
func forkPid(res *kernel.Result) (int, error) {
	for _, d := range res.Displays {
		raw, ok := d.Data[forkMIME]
		if !ok {
			continue
		}
		var rep struct {
			Pid int `json:"pid"`
		}
		b, _ := json.Marshal(raw)
		if err := json.Unmarshal(b, &rep); err != nil || rep.Pid <= 0 {
			return 0, fmt.Errorf("the kernel's fork report %s is malformed", b)
		}
		return rep.Pid, nil
	}
	return 0, errors.New("the kernel sent no fork report (is ipybox_runtime importable in it?)")
}

// lifelined is an adopted fork with the pipe whose end it watches: Kill
// closes the pipe too, so the fork ends even if the signal missed it. It
// is kernel.Prepared: it runs ipybox's init code itself, and a kept
// boundary binds a connection of its own (conn, in a folder that remove
// deletes at Kill).
type lifelined struct {
	kernel.HostProcess
	r, w *os.File
	rep  *os.File // where the copy writes why it failed to become a kernel
	repW *os.File // its other end, which the copy opens by its /proc path
	once sync.Once
	conn *jupyter.ConnectionInfo

	repMu   sync.Mutex
	repRead bool
	repText string
	remove  func()
}

// newLifelined makes the pipes of a fork to come: its lifeline and its
// failure report.
func newLifelined() (*lifelined, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	rep, repW, err := os.Pipe()
	if err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	return &lifelined{r: r, w: w, rep: rep, repW: repW}, nil
}

func (l *lifelined) closePipes() {
	l.w.Close()
	l.r.Close()
	l.rep.Close()
	l.repW.Close()
}

// maxForkReport bounds what a copy's failure report adds to an error.
const maxForkReport = 2000

// failed adds to err, a failed start of the copy, what the copy reported
// if it failed to become a kernel (its traceback's last lines), so that
// the error says why and not only that the connection or process was
// lost. The report is written before the copy exits, so it is there by
// the time its start fails.
func (l *lifelined) failed(err error) error {
	if msg := l.report(); msg != "" {
		return fmt.Errorf("%w; the copy failed: %s", err, msg)
	}
	return err
}

// report reads the copy's failure report, once (Kill reads it before it
// closes the pipe): "" if it wrote none.
func (l *lifelined) report() string {
	l.repMu.Lock()
	defer l.repMu.Unlock()
	if !l.repRead {
		l.repRead = true
		buf := make([]byte, maxForkReport)
		n := readNow(l.rep, buf)
		l.repText = strings.Join(strings.Fields(strings.ToValidUTF8(string(buf[:n]), "?")), " ")
	}
	return l.repText
}

// Connection implements kernel.Prepared.
func (l *lifelined) Connection() *jupyter.ConnectionInfo { return l.conn }

// Kill implements kernel.Process.
func (l *lifelined) Kill(ctx context.Context) error {
	err := l.HostProcess.Kill(ctx)
	l.once.Do(func() {
		l.report()
		l.closePipes()
		if l.remove != nil {
			l.remove()
		}
	})
	return err
}
