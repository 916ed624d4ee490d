package ipybox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/pyruntime"
	"github.com/ipybox/ipybox/internal/safefs"
)

// A snapshot is a kernel's namespace saved to a file: what hibernation
// keeps while a session holds no kernel, and what a fresh kernel gets
// back. The kernel writes it and reads it (ipybox_runtime/_snapshot.py),
// inside its sandbox or container, in Options.SnapshotDir, which no other
// kernel can see; the host never reads what is in it. Modules are saved
// by name and imported again; other values are pickled with dill;
// what cannot be saved (open files, sockets, threads, generators, handles
// to processes) is named, with the reason, in the reports.

// SnapshotFile is the name of the snapshot in Options.SnapshotDir.
const SnapshotFile = "namespace.ipybox-snapshot"

// snapshotMIME is the MIME type of the display a save or a load publishes
// its report as.
const snapshotMIME = "application/x-ipybox-snapshot+json"

// ErrNoSnapshot is returned by Restore when the snapshot folder holds no
// snapshot.
var ErrNoSnapshot = errors.New("ipybox: no snapshot to restore")

// ErrNoSnapshotDir is returned by Snapshot and Restore when the Executor
// has no Options.SnapshotDir.
var ErrNoSnapshotDir = errors.New("ipybox: the executor has no Options.SnapshotDir")

// SnapshotError is a snapshot that the kernel could not write or read: it
// is truncated, corrupt, not a snapshot, or larger than allowed. The
// session's state is what it was (a save) or empty (a restore); the kernel
// is fine.
type SnapshotError struct {
	// Op is "save" or "restore".
	Op string
	// Reason says what was wrong, in the kernel's words (escape it before
	// a person reads it: kernel code can choose it).
	Reason string
}

func (e *SnapshotError) Error() string {
	return fmt.Sprintf("ipybox: %s the snapshot: %s", map[string]string{"save": "saving", "restore": "restoring"}[e.Op], e.Reason)
}

// SnapshotOptions configures Executor.Snapshot. A nil *SnapshotOptions
// means the defaults.
type SnapshotOptions struct {
	// MaxBytes bounds the snapshot: values that would take it past are
	// left out, each named in the report as over the limit. The host
	// measures the folder afterwards, and a folder over the limit (kernel
	// code can write into it) is emptied, with an error. A fork through a
	// snapshot (Executor.Fork) saves within the last Snapshot's MaxBytes.
	// Zero means no limit.
	MaxBytes int64
}

// NotSaved is a name of the namespace that a snapshot did not keep, or a
// restore did not bring back, and why.
type NotSaved struct {
	Name   string
	Reason string
}

// SnapshotReport says what Snapshot saved.
type SnapshotReport struct {
	// Saved are the names whose values were saved, in the namespace's
	// order (the first 2000; SavedCount counts them all).
	Saved      []string
	SavedCount int
	// Imports are the modules saved by name, as [name, module] pairs
	// ("np", "numpy").
	Imports [][2]string
	// Unsaved are the names left out, with the reason (the first 2000;
	// UnsavedCount counts them all).
	Unsaved      []NotSaved
	UnsavedCount int
	// Bytes is the size of the snapshot folder, as the host measured it.
	Bytes int64
	// Took is how long the kernel took to save it.
	Took time.Duration
}

// RestoreReport says what Restore brought back.
type RestoreReport struct {
	// Restored are the names whose values came back (the first 2000;
	// RestoredCount counts them all).
	Restored      []string
	RestoredCount int
	// Imports are the modules imported again, as [name, module] pairs.
	Imports [][2]string
	// Missing are the names that did not come back, with the reason:
	// what the save could not keep, and what the restore could not read
	// (the first 2000; MissingCount counts them all).
	Missing      []NotSaved
	MissingCount int
	// SavedAt is when the snapshot was saved, by the kernel's clock.
	SavedAt time.Time
	// Took is how long the kernel took to restore it.
	Took time.Duration
}

// SnapshotDir returns the Executor's snapshot folder (Options.SnapshotDir,
// absolute), or "".
func (e *Executor) SnapshotDir() string { return e.snapshotDir }

// PackageDir returns the Executor's package folder (Options.PackageDir,
// absolute), or "".
func (e *Executor) PackageDir() string { return e.packageDir }

// Snapshot saves the kernel's namespace in Options.SnapshotDir, replacing
// the snapshot there once the new one is whole. It waits for a running
// cell, as Execute does. The kernel does the work, in a silent cell: a
// namespace of 100 MB of arrays takes about a second.
func (e *Executor) Snapshot(ctx context.Context, opts *SnapshotOptions) (*SnapshotReport, error) {
	if e.snapshotDir == "" {
		return nil, ErrNoSnapshotDir
	}
	var o SnapshotOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxBytes < 0 {
		return nil, fmt.Errorf("ipybox: SnapshotOptions.MaxBytes is %d; use a positive size, or 0 for no limit", o.MaxBytes)
	}
	if err := e.acquire(ctx); err != nil {
		return nil, err
	}
	defer e.release()
	return e.snapshotLocked(ctx, o)
}

// savedSnapshot is what the last Snapshot left in Options.SnapshotDir: a
// fork through a snapshot reuses it while no cell has run since (fresh),
// copies no more than its bytes, and otherwise saves anew within the last
// Snapshot's MaxBytes. Guarded by Executor.sem.
type savedSnapshot struct {
	fresh bool
	bytes int64
	max   int64
}

// snapshotLocked is Snapshot; the caller holds e.sem.
func (e *Executor) snapshotLocked(ctx context.Context, o SnapshotOptions) (*SnapshotReport, error) {
	e.saved = savedSnapshot{max: o.MaxBytes}
	// The cell boundaries kept as snapshots (rewind.go) are bounded on
	// their own, and a snapshot over its limit leaves them be.
	rep, _, err := e.saveIn(ctx, ".", o.MaxBytes, e.rewindArea()...)
	if err != nil {
		return nil, err
	}
	e.saved = savedSnapshot{fresh: true, bytes: rep.Bytes, max: o.MaxBytes}
	return rep, nil
}

// saveIn has the kernel save its namespace in the folder rel of the
// snapshot folder, within max bytes (0: no limit). The host then measures
// the folder, its top-level entries named in skip left out, and empties it
// (but those) when it holds too much or too many files: kernel code can
// write there, and the host does not guess what is what. died is a kernel
// death the save cell saw (it restarted a dead kernel, or the kernel died
// in it). The caller holds e.sem.
func (e *Executor) saveIn(ctx context.Context, rel string, max int64, skip ...string) (rep *SnapshotReport, died *kernel.DiedError, err error) {
	limit := max
	if limit == 0 {
		limit = -1
	}
	dir := pyruntime.Quote(e.kernelPath(filepath.Join(e.snapshotDir, rel)))
	code := fmt.Sprintf("__import__('ipybox_runtime._snapshot', fromlist=['_']).save(%s, %d)\n", dir, limit)
	if rel != "." {
		// The kernel makes the folder, as its own user's: a container's
		// may not be the host's.
		code = fmt.Sprintf("__import__('os').makedirs(%s, 0o700, exist_ok=True)\n", dir) + code
	}
	res, err := e.k.Execute(ctx, code, &kernel.ExecOptions{Silent: true})
	if err != nil {
		errors.As(err, &died)
		return nil, died, snapshotErr("save", err)
	}
	died = res.Restarted
	var r struct {
		Saved        []string    `json:"saved"`
		SavedCount   int         `json:"saved_count"`
		Imports      [][2]string `json:"imports"`
		Unsaved      [][2]string `json:"unsaved"`
		UnsavedCount int         `json:"unsaved_count"`
		Seconds      float64     `json:"seconds"`
	}
	if err := reportOf(res, "save", &r); err != nil {
		return nil, died, err
	}
	size, err := safefs.SizeBeneath(e.snapshotDir, rel, maxSnapshotEntries, skip...)
	if err == nil && max > 0 && size > max {
		err = fmt.Errorf("it holds %d bytes, over its limit of %d", size, max)
	}
	if err != nil {
		safefs.EmptyBeneath(e.snapshotDir, rel, skip...)
		return nil, died, &SnapshotError{Op: "save", Reason: "the snapshot folder was emptied: " + err.Error()}
	}
	return &SnapshotReport{
		Saved: r.Saved, SavedCount: r.SavedCount, Imports: r.Imports,
		Unsaved: notSaved(r.Unsaved), UnsavedCount: r.UnsavedCount,
		Bytes: size, Took: seconds(r.Seconds),
	}, died, nil
}

// Restore loads the snapshot of Options.SnapshotDir into the kernel's
// namespace: modules are imported again, values unpickled, each name on
// its own (one that fails does not stop the others). It returns
// ErrNoSnapshot when there is none, and a *SnapshotError when it cannot be
// read; the kernel is fine either way. A snapshot whose reading kills the
// kernel gives ErrKernelDied, and the next call starts a fresh kernel. It
// waits for a running cell, as Execute does.
func (e *Executor) Restore(ctx context.Context) (*RestoreReport, error) {
	if e.snapshotDir == "" {
		return nil, ErrNoSnapshotDir
	}
	if err := e.acquire(ctx); err != nil {
		return nil, err
	}
	defer e.release()
	return e.restoreIn(ctx, ".")
}

// restoreIn has the kernel load the snapshot in the folder rel of the
// snapshot folder; the caller holds e.sem.
func (e *Executor) restoreIn(ctx context.Context, rel string) (*RestoreReport, error) {
	dir := e.kernelPath(filepath.Join(e.snapshotDir, rel))
	code := fmt.Sprintf("__import__('ipybox_runtime._snapshot', fromlist=['_']).load(%s)\n", pyruntime.Quote(dir))
	res, err := e.k.Execute(ctx, code, &kernel.ExecOptions{Silent: true})
	if err != nil {
		return nil, snapshotErr("restore", err)
	}
	var r struct {
		Absent        bool        `json:"absent"`
		Restored      []string    `json:"restored"`
		RestoredCount int         `json:"restored_count"`
		Imports       [][2]string `json:"imports"`
		Missing       [][2]string `json:"missing"`
		MissingCount  int         `json:"missing_count"`
		SavedAt       float64     `json:"saved_at"`
		Seconds       float64     `json:"seconds"`
	}
	if err := reportOf(res, "restore", &r); err != nil {
		return nil, err
	}
	if r.Absent {
		return nil, ErrNoSnapshot
	}
	rep := &RestoreReport{
		Restored: r.Restored, RestoredCount: r.RestoredCount, Imports: r.Imports,
		Missing: notSaved(r.Missing), MissingCount: r.MissingCount, Took: seconds(r.Seconds),
	}
	if r.SavedAt > 0 && r.SavedAt < 1e11 {
		sec, frac := math.Modf(r.SavedAt)
		rep.SavedAt = time.Unix(int64(sec), int64(frac*1e9))
	}
	return rep, nil
}

// snapshotErr words a failed save or restore cell: a Python exception is
// the kernel's report of a snapshot it could not handle.
func snapshotErr(op string, err error) error {
	var pe *kernel.PythonError
	if errors.As(err, &pe) {
		return &SnapshotError{Op: op, Reason: pe.Name + ": " + pe.Value}
	}
	return fmt.Errorf("ipybox: %s: %w", map[string]string{"save": "saving the snapshot", "restore": "restoring the snapshot"}[op], executorErr(err))
}

// reportOf decodes the report display of a save or a load into v.
func reportOf(res *kernel.Result, op string, v any) error {
	for _, d := range res.Displays {
		raw, ok := d.Data[snapshotMIME]
		if !ok {
			continue
		}
		b, err := json.Marshal(raw)
		if err == nil {
			err = json.Unmarshal(b, v)
		}
		if err != nil {
			return &SnapshotError{Op: op, Reason: "the kernel's report is malformed: " + err.Error()}
		}
		return nil
	}
	return &SnapshotError{Op: op, Reason: "the kernel sent no report (is ipybox_runtime importable in it?)"}
}

func notSaved(pairs [][2]string) []NotSaved {
	out := make([]NotSaved, 0, len(pairs))
	for _, p := range pairs {
		out = append(out, NotSaved{Name: p[0], Reason: p[1]})
	}
	return out
}

func seconds(s float64) time.Duration {
	if s < 0 || s > 1e6 {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// maxSnapshotEntries bounds how many entries the host counts in a
// snapshot folder: kernel code can fill it with files.
const maxSnapshotEntries = 10_000

// KernelID returns the gateway's id of the kernel (Options.Gateway), or ""
// for a local kernel: what GatewayConfig.KernelID takes to attach to it
// again after Detach. It changes when the kernel is replaced (Reset, a
// death).
func (e *Executor) KernelID() string { return e.k.RemoteID() }

// Detach ends the Executor as Close does, but leaves its gateway kernel
// running on the server with its state: a later Executor started with
// Options.Gateway.KernelID set to KernelID() attaches to it, and its tool
// calls then reach that Executor's tool server. A cell running now goes on
// on the server; its output is lost, and its tool calls fail until an
// Executor attaches. Only a gateway kernel can be detached: for a local one
// Detach fails, and does nothing.
func (e *Executor) Detach() error {
	if e.opts.Gateway == nil {
		return errors.New("ipybox: only a gateway kernel can be detached (Options.Gateway); Close ends a local one")
	}
	e.closeOnce.Do(func() {
		e.detached = true
		if err := e.closeParts(); err != nil {
			e.closeErr = fmt.Errorf("ipybox: detach: %w", err)
		}
	})
	return e.closeErr
}

// Repoint sets the tool server's address and token in the kernel again:
// for a gateway kernel that another front end attached to since this
// Executor did, whose tool calls would otherwise reach that front end. It
// waits for a running cell, as Execute does.
func (e *Executor) Repoint(ctx context.Context) error {
	if err := e.acquire(ctx); err != nil {
		return err
	}
	defer e.release()
	env := map[string]string{}
	for _, kv := range e.toolEnv() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	b, _ := json.Marshal(env)
	code := fmt.Sprintf("__import__('os').environ.update(__import__('json').loads(%s))\n", pyruntime.Quote(string(b)))
	if _, err := e.k.Execute(ctx, code, &kernel.ExecOptions{Silent: true}); err != nil {
		return fmt.Errorf("ipybox: pointing the kernel at this tool server: %w", executorErr(err))
	}
	return nil
}
