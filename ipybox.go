// Package ipybox runs code actions for AI agents: blocks of Python, with
// shell commands and MCP tool calls, in a stateful IPython kernel.
//
//	application ── Executor.Stream(code) ──► kernel (ipykernel over ZeroMQ ipc)
//	      ▲                                      │ output, displays, errors
//	      └──────────── events ◄─────────────────┘
//
// A minimal use:
//
//	ex, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: dir})
//	if err != nil { ... }
//	defer ex.Close()
//	res, err := ex.Execute(ctx, "x = 6 * 7\nprint(x)", nil)
//	fmt.Println(res.Text) // 42
package ipybox

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/ipybox/ipybox/internal/pyruntime"
	"github.com/ipybox/ipybox/kernel"
)

// Options configures an Executor. A nil *Options means the defaults; Start
// copies the struct.
type Options struct {
	// Python is the interpreter to run the kernel with. Empty means
	// discovery: $IPYBOX_PYTHON, then python3 on PATH, then
	// /usr/bin/python3; the first that can import ipykernel.
	Python string
	// WorkDir is the kernel's working directory and the workspace (it
	// holds mcptools/ and images/). When set, a cell that changes the
	// directory has it restored afterwards, with a message. Empty means
	// the current directory, and directory changes persist.
	WorkDir string
	// ImagesDir receives the images cells produce. Empty means
	// <workspace>/images.
	ImagesDir string
	// KernelEnv is added to the kernel's environment. Nothing else of the
	// host's environment reaches the kernel beyond PATH, HOME and LANG.
	KernelEnv map[string]string
	// InitTimeout bounds a kernel start or restart. Zero means 60s.
	InitTimeout time.Duration
	// InterruptGrace is how long an interrupted cell may take to stop
	// before the kernel is restarted. Zero means 3s.
	InterruptGrace time.Duration
	// Input answers input() in cells. Nil makes input() raise an error.
	Input func(prompt string, password bool) (string, error)
	// Logger receives ipybox's logs. Nil discards them.
	Logger *slog.Logger
}

// ExecOptions configures one execution. A nil *ExecOptions means the
// defaults.
type ExecOptions struct {
	// Timeout bounds the cell's run time. On expiry the cell is
	// interrupted, the kernel keeps its state, and the call returns a
	// *TimeoutError (errors.Is(err, ErrTimeout)). Zero means no limit
	// beyond the context.
	Timeout time.Duration
}

// Executor runs code in one stateful kernel. Executions are serialised: a
// second call waits for the first, or fails when its context ends first.
type Executor struct {
	opts      Options
	workspace string
	runDir    string
	k         *kernel.Kernel
	sem       chan struct{}
	log       *slog.Logger

	closeOnce sync.Once
	closeErr  error
}

// Start starts a kernel and returns an Executor for it.
func Start(ctx context.Context, opts *Options) (*Executor, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Executor{opts: o, sem: make(chan struct{}, 1), log: log}
	ws := o.WorkDir
	if ws == "" {
		var err error
		if ws, err = os.Getwd(); err != nil {
			return nil, err
		}
	}
	ws, err := filepath.Abs(ws)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(ws); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("ipybox: working directory %q is not a directory; create it or choose another WorkDir", ws)
	}
	e.workspace = ws

	if e.runDir, err = kernel.NewRunDir(); err != nil {
		return nil, fmt.Errorf("ipybox: %w", err)
	}
	pyDir, err := pyruntime.Install(filepath.Join(e.runDir, "py"))
	if err != nil {
		os.RemoveAll(e.runDir)
		return nil, fmt.Errorf("ipybox: %w", err)
	}
	init := pyruntime.InitConfig{SysPath: []string{pyDir, ws}}
	if o.WorkDir != "" {
		init.WorkDir = ws
	}
	imagesDir := o.ImagesDir
	if imagesDir == "" {
		imagesDir = filepath.Join(ws, "images")
	}
	if imagesDir, err = filepath.Abs(imagesDir); err != nil {
		os.RemoveAll(e.runDir)
		return nil, err
	}
	e.k, err = kernel.Start(ctx, &kernel.Options{
		Python:         o.Python,
		Dir:            ws,
		Env:            envList(o.KernelEnv),
		PythonPath:     []string{pyDir, ws},
		RunDir:         e.runDir,
		ImagesDir:      imagesDir,
		InitCode:       pyruntime.InitCode(init),
		StartTimeout:   o.InitTimeout,
		InterruptGrace: o.InterruptGrace,
		Logger:         log,
	})
	if err != nil {
		os.RemoveAll(e.runDir)
		return nil, fmt.Errorf("ipybox: %w", err)
	}
	return e, nil
}

func envList(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// Workspace returns the kernel's working directory.
func (e *Executor) Workspace() string { return e.workspace }

// ImagesDir returns the directory images are saved to.
func (e *Executor) ImagesDir() string { return e.k.ImagesDir() }

// Execute runs code as one cell and returns its result.
//
// A Python exception gives both the Result (with the output printed before
// it) and a *PythonError. A timeout gives the partial Result and a
// *TimeoutError. A dead kernel gives ErrKernelDied; the next call starts a
// fresh kernel.
func (e *Executor) Execute(ctx context.Context, code string, opts *ExecOptions) (*Result, error) {
	var last *Result
	for ev, err := range e.Stream(ctx, code, opts) {
		if err != nil {
			return last, err
		}
		if r, ok := ev.(*Result); ok {
			last = r
		}
	}
	return last, nil
}

// Stream runs code as one cell and yields its events as they happen:
// *Output, *Display and *ClearOutput, then the *Result last. An error ends
// the sequence; for a Python error or a timeout the partial *Result is
// yielded just before it. Stopping the iteration early interrupts the cell.
func (e *Executor) Stream(ctx context.Context, code string, opts *ExecOptions) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		if err := e.acquire(ctx); err != nil {
			yield(nil, err)
			return
		}
		defer e.release()

		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		stopped := false
		var ko kernel.ExecOptions
		if opts != nil {
			ko.Timeout = opts.Timeout
		}
		ko.Input = e.opts.Input
		ko.OnEvent = func(ev kernel.Event) {
			if stopped {
				return
			}
			if !yield(fromKernelEvent(ev), nil) {
				stopped = true
				cancel() // interrupts the cell
			}
		}
		res, err := e.k.Execute(runCtx, code, &ko)
		if stopped {
			return
		}
		if r := fromKernelResult(res); r != nil {
			if !yield(r, nil) {
				return
			}
		}
		if err != nil {
			yield(nil, err)
		}
	}
}

func (e *Executor) acquire(ctx context.Context) error {
	select {
	case e.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ipybox: waiting for the previous execution: %w", ctx.Err())
	}
}

func (e *Executor) release() { <-e.sem }

// Reset replaces the kernel with a fresh one: variables, functions and
// imports are gone; files in the workspace persist.
func (e *Executor) Reset(ctx context.Context) error {
	if err := e.acquire(ctx); err != nil {
		return err
	}
	defer e.release()
	if err := e.k.Restart(ctx); err != nil {
		return fmt.Errorf("ipybox: reset: %w", err)
	}
	return nil
}

// Interrupt interrupts the running cell, if any.
func (e *Executor) Interrupt() error { return e.k.Interrupt() }

// Close stops the kernel and removes the run directory. It is idempotent,
// safe to call concurrently, and bounded in time.
func (e *Executor) Close() error {
	e.closeOnce.Do(func() {
		err := e.k.Close()
		if rerr := os.RemoveAll(e.runDir); rerr != nil && err == nil {
			err = rerr
		}
		if err != nil && !errors.Is(err, kernel.ErrClosed) {
			e.closeErr = fmt.Errorf("ipybox: close: %w", err)
		}
	})
	return e.closeErr
}
