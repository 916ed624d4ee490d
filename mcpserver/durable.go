package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/defaults"
	"github.com/ipybox/ipybox/internal/escape"
	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/safefs"
)

// Durable sessions.
//
// A session that has no call for Options.Durability.HibernateAfter hibernates: its
// kernel saves its namespace in the session's snapshot folder
// (ipybox.Executor.Snapshot: the kernel writes it, inside its sandbox or
// container) and stops; the session then holds no process. Its next call
// takes a kernel (from the warm pool), moves the session's folders into
// that kernel's, has the kernel restore the namespace, and runs; the
// first cell's result says what came back and what did not. A gateway
// kernel is not saved: the session detaches from it, and it runs on with
// its state on the gateway, where the next call attaches to it again.
//
// Sessions of create_session are kept in the state folder (state.go): a
// server that stops with SIGTERM hibernates them first (Shutdown), and a
// server started on the same workspace accepts their handles. With
// CheckpointCell, a session's namespace is also saved after every cell
// that completes, before the cell's result is sent, so that a server
// killed with SIGKILL comes back as it was after the last cell whose
// result a client got.

// CheckpointMode says when a session's namespace is saved, beyond
// hibernation and shutdown.
type CheckpointMode string

// Checkpoint modes of Options.Durability.Checkpoint.
const (
	// CheckpointNone saves a namespace only when its session hibernates
	// (idle, or the server stops with SIGTERM).
	CheckpointNone CheckpointMode = "none"
	// CheckpointCell also saves it after every cell that completes.
	CheckpointCell CheckpointMode = "cell"
)

// Defaults of the durable sessions' options (internal/defaults holds
// them, for the CLI's flags too).
const (
	defaultHibernateAfter         = defaults.HibernateAfter
	defaultSessionExpiry          = defaults.SessionExpiry
	defaultSnapshotBytes          = defaults.SnapshotBytes
	defaultSnapshotWorkspaceBytes = defaults.SnapshotWorkspaceBytes
)

// rewindFolder is where an ipybox.Executor keeps its cell boundaries
// below its SnapshotDir (ipybox's rewind.go).
const rewindFolder = "rewind"

// maxSnapshotEntries bounds the entries the host counts in one snapshot
// folder (kernel code can fill it).
const maxSnapshotEntries = 10_000

// local reports whether the server's kernels run on this machine (a
// sandbox, a container, or none), where their state is saved in snapshot
// folders; a gateway's are not.
func (s *Server) local() bool { return s.opts.Gateway == nil }

// wake gives x an executor: a fresh one, whose kernel gets x's state back
// when x hibernated (or came from the state folder); for a gateway
// session, the kernel it ran on. Called with x.startMu held.
func (x *session) wake(ctx context.Context) (*ipybox.Executor, error) {
	s := x.s
	if x.durable() {
		if err := x.reload(ctx); err != nil {
			return nil, err
		}
	}
	var notes []string
	if s.local() {
		if n := x.confine(); n != "" {
			notes = append(notes, n)
		}
	}
	x.mu.Lock()
	asleep, kid := x.asleep, x.kernelID
	x.mu.Unlock()
	attach := ""
	if !s.local() && asleep != nil {
		attach = kid
	}
	ex, err := s.factory.startExecutor(ctx, x, attach)
	if errors.Is(err, kernel.ErrNoKernel) {
		notes = append(notes, fmt.Sprintf("[ipybox: this session's kernel is no longer on the gateway (deleted, or culled for idleness) since %s; its state was lost; this cell runs in a fresh kernel]", x.since(asleep)))
		asleep = nil
		ex, err = s.factory.startExecutor(ctx, x, "")
	}
	if err != nil {
		return nil, err
	}
	if s.local() {
		s.adopt(x, ex)
		if asleep != nil {
			notes = append(notes, x.restore(ctx, ex, asleep))
		}
	} else if asleep != nil && attach != "" {
		notes = append(notes, fmt.Sprintf("[ipybox: this session reattached to its kernel on the gateway, which kept its state while ipybox held no connection to it (since %s)]", x.since(asleep)))
	}
	x.mu.Lock()
	x.asleep = nil
	x.kernelID = ex.KernelID()
	x.warnings = append(notes, x.warnings...)
	x.mu.Unlock()
	return ex, nil
}

// since says since when a session slept.
func (x *session) since(sl *sleep) string {
	if sl == nil || sl.at.IsZero() {
		return "ipybox mcp last ran it"
	}
	return sl.at.Format("2006-01-02 15:04:05") + " (" + sl.why + ")"
}

// stopped says how a session's kernel stopped: "hibernated at T (why)",
// or, when no hibernation was recorded (the server was killed, or
// crashed), that, with the session's last call.
func (x *session) stopped(sl *sleep) string {
	if sl != nil && sl.why == whyKilled {
		return "stopped without hibernating: ipybox mcp was killed or crashed after its last call, at " + sl.at.Format("2006-01-02 15:04:05")
	}
	return "hibernated at " + x.since(sl)
}

// whyKilled marks a session whose record says it never hibernated: the
// server that ran it ended without a save (SIGKILL, a crash).
const whyKilled = "killed"

// asleepOf is the sleep of a session's record: when and why it
// hibernated (its save's time, not its last call's), or whyKilled.
func asleepOf(r *record) *sleep {
	sl := &sleep{at: r.Used, why: r.Asleep, detached: r.Kernel != "", lost: r.Lost}
	switch {
	case r.Asleep == "":
		sl.why = whyKilled
	case !r.Saved.IsZero():
		sl.at = r.Saved
	}
	return sl
}

// reload takes x's lock in the state folder (a local session: no other
// process may run it meanwhile) and reads its record again: another
// process may have run it since this one let it sleep, or closed it.
// Called with x.startMu held.
func (x *session) reload(ctx context.Context) error {
	s := x.s
	if s.local() && x.lockf == nil {
		f, err := s.durability.state.lock(ctx, x.key, lockWait)
		if err != nil {
			return err
		}
		x.lockf = f
	}
	r, err := s.durability.state.read(x.key)
	if err != nil {
		s.log.Warn("a session's record cannot be read; it starts afresh", "session", x.id, "err", err)
		return nil
	}
	if r == nil {
		x.mu.Lock()
		fresh := x.asleep == nil && x.pkg == "" && x.snap == "" && x.kernelID == ""
		x.mu.Unlock()
		if fresh {
			return nil // made here, not written yet
		}
		// Closed by another process since.
		s.wg.Add()
		go func() { defer s.wg.Done(); x.close() }()
		return errUnknownSession
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ex == nil {
		x.pkg, x.snap, x.kernelID, x.conf = r.Packages, r.Snapshot, r.Kernel, r.Confinement
		if x.asleep == nil && (r.Snapshot != "" || r.Kernel != "") {
			x.asleep = asleepOf(r)
		}
	}
	return nil
}

// restore has ex's kernel load x's snapshot, and returns the note for the
// session's next result.
func (x *session) restore(ctx context.Context, ex *ipybox.Executor, sl *sleep) string {
	s := x.s
	if sl.lost != "" && !snapshotExists(ex) {
		return fmt.Sprintf("[ipybox: this session %s, and its state could not be saved: %s; this cell runs in a fresh kernel]", x.stopped(sl), sl.lost)
	}
	t0 := time.Now()
	ctx, span := s.tel.StartRestore(ctx)
	rep, err := ex.Restore(ctx)
	switch {
	case errors.Is(err, ipybox.ErrNoSnapshot):
		s.tel.EndRestore(span, sessionID(ex), "no_snapshot", 0, 0)
	case err != nil:
		s.tel.EndRestore(span, sessionID(ex), "error", 0, 0)
	default:
		s.tel.EndRestore(span, sessionID(ex), "ok", rep.RestoredCount, rep.MissingCount)
	}
	var se *ipybox.SnapshotError
	switch {
	case errors.Is(err, ipybox.ErrNoSnapshot):
		return fmt.Sprintf("[ipybox: this session %s, without a snapshot of its state (a server stopped by SIGKILL or at its shutdown bound saves none; --checkpoint cell saves one after every cell); this cell runs in a fresh kernel]", x.stopped(sl))
	case err != nil:
		// The state is gone, and a half-restored namespace is worse than
		// an empty one: a fresh kernel, and no snapshot to try again.
		safefs.Empty(ex.SnapshotDir())
		why := err.Error()
		if errors.As(err, &se) {
			why = clipText(se.Reason, 500)
		}
		s.log.Warn("restoring a session failed; it starts afresh", "session", x.id, "err", clipText(err.Error(), 2000))
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.Sessions.StartTimeout)
		defer cancel()
		if rerr := ex.Reset(rctx); rerr != nil {
			s.log.Warn("resetting after a failed restore", "session", x.id, "err", rerr)
		}
		return fmt.Sprintf("[ipybox: this session %s, and its snapshot could not be restored (%s); its state was lost; this cell runs in a fresh kernel]", x.stopped(sl), why)
	}
	s.log.Info("session restored", "session", x.id, "names", rep.RestoredCount, "missing", rep.MissingCount, "took", time.Since(t0).Round(time.Millisecond))
	return restoreNote(x.stopped(sl), rep)
}

func snapshotExists(ex *ipybox.Executor) bool {
	_, err := os.Lstat(filepath.Join(ex.SnapshotDir(), ipybox.SnapshotFile))
	return err == nil
}

// restoreNote tells the agent what came back after a hibernation, and
// what did not. Names are the kernel's (kernel code chooses them): they
// are escaped, and the lists bounded.
func restoreNote(stopped string, rep *ipybox.RestoreReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "[ipybox: this session %s; its state was restored into a fresh kernel", stopped)
	if !rep.SavedAt.IsZero() {
		fmt.Fprintf(&b, " from the snapshot saved at %s", rep.SavedAt.Format("15:04:05"))
	}
	fmt.Fprintf(&b, ": %d names came back", rep.RestoredCount)
	if len(rep.Restored) > 0 {
		fmt.Fprintf(&b, " (%s)", nameList(rep.Restored, rep.RestoredCount, 20))
	}
	if len(rep.Imports) > 0 {
		imps := make([]string, 0, len(rep.Imports))
		for _, p := range rep.Imports {
			if p[0] == p[1] {
				imps = append(imps, p[0])
			} else {
				imps = append(imps, p[0]+" = "+p[1])
			}
		}
		fmt.Fprintf(&b, "; imported again: %s", nameList(imps, len(imps), 20))
	}
	if rep.MissingCount > 0 {
		fmt.Fprintf(&b, "; %d did not: ", rep.MissingCount)
		for i, m := range rep.Missing {
			if i == 20 {
				fmt.Fprintf(&b, "; and %d more", rep.MissingCount-20)
				break
			}
			if i > 0 {
				b.WriteString("; ")
			}
			fmt.Fprintf(&b, "%s (%s)", clipText(m.Name, 80), clipText(m.Reason, 200))
		}
		b.WriteString(". Make those again")
	}
	b.WriteString("]")
	return b.String()
}

// nameList shows the first n of names (total in all), escaped.
func nameList(names []string, total, n int) string {
	var parts []string
	for i, s := range names {
		if i == n {
			break
		}
		parts = append(parts, clipText(s, 80))
	}
	out := strings.Join(parts, ", ")
	if total > len(parts) {
		out += fmt.Sprintf(" and %d more", total-len(parts))
	}
	return out
}

// adopt makes ex's folders the session's: what the session's old folders
// hold (its packages, its snapshot) moves into ex's, which ex's kernel can
// reach, and the old ones go. The host moves files without reading them.
func (s *Server) adopt(x *session, ex *ipybox.Executor) {
	x.mu.Lock()
	oldPkg, oldSnap := x.pkg, x.snap
	x.mu.Unlock()
	newPkg, newSnap := filepath.Base(ex.PackageDir()), filepath.Base(ex.SnapshotDir())
	if ex.PackageDir() == "" {
		newPkg = ""
	}
	if ex.SnapshotDir() == "" {
		newSnap = ""
	}
	ipy := filepath.Join(x.t.dir, ".ipybox")
	for _, m := range []struct{ kind, old, new string }{{"packages", oldPkg, newPkg}, {"snapshots", oldSnap, newSnap}} {
		if !folderName(m.old) || m.old == m.new {
			continue
		}
		from := filepath.Join(m.kind, m.old)
		if m.kind == "snapshots" {
			// The old kernel's cell boundaries (a reset's swap adopts
			// before the old executor's Close removes them): a new kernel
			// cannot rewind to them.
			if err := safefs.RemoveAllBeneath(ipy, filepath.Join(from, rewindFolder)); err != nil {
				s.log.Warn("removing the old kernel's cell boundaries", "session", x.id, "err", err)
			}
		}
		if m.new != "" {
			if err := merge(ipy, from, filepath.Join(m.kind, m.new)); err != nil {
				s.log.Warn("moving a session's folder into its new kernel's", "session", x.id, "kind", m.kind, "err", err)
			}
		}
		if err := os.RemoveAll(filepath.Join(ipy, from)); err != nil {
			s.log.Warn("removing a session's old folder", "session", x.id, "kind", m.kind, "err", err)
		}
	}
	x.mu.Lock()
	x.pkg, x.snap = newPkg, newSnap
	x.mu.Unlock()
}

// merge moves what folder from holds into folder to, both below base,
// without following a link (kernel code writes both, and may swap a link
// or a FIFO in at any moment): an entry whose name to already has as a
// folder is merged into it (a fresh kernel makes its package folder's
// site-packages at its start).
func merge(base, from, to string) error {
	ents, err := safefs.ReadDirBeneath(base, from)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	var errs []error
	for _, e := range ents {
		f, t := filepath.Join(from, e.Name()), filepath.Join(to, e.Name())
		if e.IsDir() && safefs.IsDirBeneath(base, t) {
			errs = append(errs, merge(base, f, t))
			continue
		}
		errs = append(errs, safefs.Rename(base, f, t))
	}
	return errors.Join(errs...)
}

// hibernate saves x's namespace and stops its kernel (a gateway session
// detaches from its kernel instead), so that x holds no process; its next
// call restores it. why says why, for the note of that call. Unless
// force, a session with a call in flight is left alone; with force (the
// server stops), a running cell is interrupted first. It reports whether
// x hibernated.
func (x *session) hibernate(ctx context.Context, why string, force bool) bool {
	s := x.s
	x.mu.Lock()
	if x.sleeping || x.closed || x.ex == nil || !force && x.active > 0 {
		x.mu.Unlock()
		return false
	}
	x.sleeping = true
	x.mu.Unlock()
	x.startMu.Lock()
	defer x.startMu.Unlock()
	x.mu.Lock()
	x.sleeping = false
	ex := x.ex
	if x.closed || ex == nil || !force && x.active > 0 {
		x.mu.Unlock()
		return false
	}
	x.ex = nil
	busy := x.active > 0
	x.mu.Unlock()
	t0 := time.Now()
	sl := &sleep{at: t0, why: why}
	switch {
	case !s.local():
		sl.detached = true
		if err := ex.Detach(); err != nil {
			s.log.Warn("detaching from a gateway kernel", "session", x.id, "err", err)
		}
	default:
		// Only a session with something in flight is interrupted: the
		// signal is asynchronous (through a sandbox's init, a container),
		// and one that found no cell would stop the save instead.
		interrupted := force && busy
		if interrupted {
			ex.Interrupt()
		}
		rep, err := s.save(ctx, x, ex)
		if err != nil && interrupted && ctx.Err() == nil {
			// The interrupt came late, and stopped the save itself.
			rep, err = s.save(ctx, x, ex)
		}
		sl.saved = err == nil
		if err != nil {
			sl.lost = saveFailure(err)
			s.log.Warn("hibernating: the snapshot was not saved", "session", x.id, "err", clipText(err.Error(), 2000))
		} else {
			s.log.Info("snapshot saved", "session", x.id, "names", rep.SavedCount, "unsaved", rep.UnsavedCount, "bytes", rep.Bytes, "took", rep.Took.Round(time.Millisecond))
		}
		s.factory.closeExecutor(ex, true)
	}
	x.mu.Lock()
	x.asleep = sl
	x.mu.Unlock()
	s.sessions.releaseSlot(x)
	s.saveRecord(x)
	x.unlock()
	s.log.Info("session hibernated", "session", x.id, "why", why, "took", time.Since(t0).Round(time.Millisecond))
	return true
}

// saveFailure words a save that failed, for the agent.
func saveFailure(err error) string {
	var se *ipybox.SnapshotError
	if errors.As(err, &se) {
		return clipText(se.Reason, 500)
	}
	return clipText(err.Error(), 500)
}

// save has ex's kernel save x's namespace, within the budgets: the
// session's (Options.Durability.SnapshotBytes) and what the workspace's
// (Options.Durability.SnapshotWorkspaceBytes) leaves once the other sessions'
// snapshots and the saves in flight are counted.
func (s *Server) save(ctx context.Context, x *session, ex *ipybox.Executor) (*ipybox.SnapshotReport, error) {
	// Bounded: kernel code can make a save hang (a __reduce__ that
	// sleeps), and a hibernation holds the session's startMu meanwhile.
	ctx, cancel := context.WithTimeout(ctx, saveTimeout)
	defer cancel()
	limit, release, err := s.durability.budget.reserve(ctx, ex.SnapshotDir())
	if err != nil {
		return nil, err
	}
	defer release()
	rep, err := ex.Snapshot(ctx, &ipybox.SnapshotOptions{MaxBytes: limit})
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	x.ckUnsaved = unsavedKey(rep)
	x.mu.Unlock()
	return rep, nil
}

// saveTimeout bounds one save of a session's namespace, the wait for
// room in the workspace's budget included: past it the save fails, and
// a hibernation stops the kernel without a snapshot.
const saveTimeout = defaults.SnapshotSave

// unsavedKey is what a save left out, to tell a change.
func unsavedKey(rep *ipybox.SnapshotReport) string {
	var b strings.Builder
	for _, u := range rep.Unsaved {
		b.WriteString(u.Name + "\x00" + u.Reason + "\x00")
	}
	return b.String()
}

// afterCell saves x's namespace behind a completed cell's result
// (CheckpointCell), once at a time: a cell that ends while a save runs
// makes one more save follow it.
func (s *Server) afterCell(x *session, ex *ipybox.Executor, cellErr error) {
	if s.opts.Durability.Checkpoint != CheckpointCell || ex.SnapshotDir() == "" {
		return
	}
	var pe *ipybox.PythonError
	if cellErr != nil && !errors.As(cellErr, &pe) {
		return // a kernel that died or was closed holds nothing to save
	}
	x.mu.Lock()
	if x.ex != ex || x.closed {
		x.mu.Unlock()
		return
	}
	if x.ckBusy {
		x.ckAgain = true
		x.mu.Unlock()
		return
	}
	x.ckBusy = true
	x.ckDone = make(chan struct{})
	x.active++
	x.mu.Unlock()
	s.wg.Add()
	go func() {
		defer s.wg.Done()
		for {
			before := x.ckUnsavedNow()
			rep, err := s.save(x.ctx, x, ex)
			s.checkpointNote(x, before, rep, err)
			x.mu.Lock()
			if !x.ckAgain || x.ex != ex || x.closed {
				x.ckBusy, x.ckAgain = false, false
				x.active--
				done := x.ckDone
				x.mu.Unlock()
				if err == nil {
					s.saveRecord(x)
				}
				close(done)
				return
			}
			x.ckAgain = false
			x.mu.Unlock()
		}
	}()
}

// checkpointWait waits for a checkpoint in flight, so that what it could
// not save reaches the next cell's result. The next cell would wait for
// it anyway: a save holds the kernel.
func (x *session) checkpointWait(ctx context.Context) {
	x.mu.Lock()
	busy, done := x.ckBusy, x.ckDone
	x.mu.Unlock()
	if !busy {
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (x *session) ckUnsavedNow() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.ckUnsaved
}

// clip shows text that kernel code chose on one line: escaped, and cut
// after n runes.
func clipText(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		s = string(r[:n]) + "..."
	}
	return escape.Text(s)
}

// checkpointNote tells the agent, with the next result, what a checkpoint
// could not save, when that changed since the last one.
func (s *Server) checkpointNote(x *session, before string, rep *ipybox.SnapshotReport, err error) {
	var note string
	switch {
	case err != nil && x.ctx.Err() == nil && !errors.Is(err, ipybox.ErrClosed):
		note = fmt.Sprintf("[ipybox: the checkpoint after the last cell was not saved: %s; a restart brings back the one before]", saveFailure(err))
	case err == nil && unsavedKey(rep) != before && rep.UnsavedCount > 0:
		var parts []string
		for i, u := range rep.Unsaved {
			if i == 20 {
				parts = append(parts, fmt.Sprintf("and %d more", rep.UnsavedCount-20))
				break
			}
			parts = append(parts, fmt.Sprintf("%s (%s)", clipText(u.Name, 80), clipText(u.Reason, 200)))
		}
		note = "[ipybox: the checkpoint after the last cell could not save: " + strings.Join(parts, "; ") + "; a restart would not bring them back]"
	}
	if note != "" {
		x.mu.Lock()
		x.warnings = append(x.warnings, note)
		x.mu.Unlock()
	}
}

// saveRecord writes x's record to the state folder (a session of
// create_session).
func (s *Server) saveRecord(x *session) {
	if !x.durable() || s.durability.state == nil {
		return
	}
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return
	}
	r := &record{Principal: x.principal, Created: x.created, Used: x.used, Packages: x.pkg, Snapshot: x.snap, Kernel: x.kernelID, Frontend: s.durability.frontend, Confinement: x.conf}
	if !s.local() {
		r.Gateway = s.opts.Gateway.URL
	}
	if sl := x.asleep; sl != nil {
		r.Asleep = sl.why
		if sl.saved {
			r.Saved = sl.at
		}
		r.Lost = sl.lost
	}
	x.mu.Unlock()
	if err := s.durability.state.write(x.key, r); err != nil {
		s.log.Warn("writing a session's record", "session", x.id, "err", err)
	}
}

// revive makes the session of a record of the state folder, asleep: its
// first call restores it. h is the handle the call named.
func (s *Server) revive(h string, key [32]byte, r *record) *session {
	x := &session{s: s, handle: h, key: key, id: logID(h), principal: r.Principal, t: s.tenant(r.Principal), created: r.Created, used: r.Used, synced: map[string]int{},
		pkg: r.Packages, snap: r.Snapshot, kernelID: r.Kernel, conf: r.Confinement}
	if r.Snapshot != "" || r.Kernel != "" {
		// It had a kernel: its next call brings its state back. (One that
		// never ran a cell has nothing to bring back, and no note.)
		x.asleep = asleepOf(r)
	}
	x.ctx, x.cancel = context.WithCancel(s.ctx)
	return x
}

// deleteGatewayKernel ends a gateway kernel that a session detached from:
// attached to, then closed, bounded.
func (s *Server) deleteGatewayKernel(id string) {
	ctx, cancel := context.WithTimeout(s.ctx, s.opts.Sessions.StartTimeout)
	defer cancel()
	g := *s.opts.Gateway
	g.KernelID = id
	ex, err := ipybox.Start(ctx, &ipybox.Options{Gateway: &g, WorkDir: s.workspace, Logger: s.log})
	if err != nil {
		if !errors.Is(err, kernel.ErrNoKernel) {
			s.log.Warn("ending a detached gateway kernel", "kernel", id, "err", err)
		}
		return
	}
	ex.Close()
}

// Shutdown hibernates every session of create_session that holds a
// kernel (Hibernate), then closes the server (Close).
func (s *Server) Shutdown(ctx context.Context) error {
	s.Hibernate(ctx)
	return s.Close()
}

// Hibernate hibernates every session of create_session that holds a
// kernel, all at once, until ctx ends; it returns ctx's error when some
// were not saved by then. Those stop with their kernels at Close, and come
// back at the next start from their last snapshot (a checkpoint), or in a
// fresh kernel with a note that says their state was lost. A running cell
// is interrupted first, and its session saved as the interrupt left it.
// Sessions of connections (stdio, 2025-11-25 transport sessions) end with
// them, and are not saved. The server serves on: Shutdown is Hibernate,
// then Close.
func (s *Server) Hibernate(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, x := range s.sessions.store.all() {
		if !x.durable() || !x.hasKernel() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			x.hibernate(ctx, "ipybox mcp stopped", true)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }() // bound: each hibernation ends with ctx
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.log.Warn("shutdown: not every session was saved in time; those come back from their last snapshot", "err", ctx.Err())
		return fmt.Errorf("hibernating the sessions: %w", ctx.Err())
	}
}

// claim points a gateway session's kernel at this front end's tool server
// when its record says that another front end attached to it last.
func (s *Server) claim(ctx context.Context, x *session, ex *ipybox.Executor) {
	r, err := s.durability.state.read(x.key)
	if err != nil || r == nil || r.Frontend == s.durability.frontend {
		return
	}
	if err := ex.Repoint(ctx); err != nil {
		s.log.Warn("pointing a gateway kernel at this front end", "session", x.id, "err", err)
		return
	}
	s.saveRecord(x)
}

// kernelChanged records a gateway session's new kernel, after a call that
// replaced it (reset, a death).
func (s *Server) kernelChanged(x *session, ex *ipybox.Executor) {
	id := ex.KernelID()
	x.mu.Lock()
	changed := id != "" && id != x.kernelID && x.ex == ex
	if changed {
		x.kernelID = id
	}
	x.mu.Unlock()
	if changed {
		s.saveRecord(x)
	}
}
