// Package kernel runs an IPython kernel and speaks the Jupyter protocol to
// it: start, execute with streamed events, interrupt, restart, death
// detection and a bounded shutdown.
//
//	k, err := kernel.Start(ctx, &kernel.Options{Dir: workspace})
//	if err != nil { ... }
//	defer k.Close()
//	res, err := k.Execute(ctx, "print(2 + 2)", nil)
package kernel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ipybox/ipybox/internal/defaults"
	"github.com/ipybox/ipybox/internal/jupyter"
	"github.com/ipybox/ipybox/internal/linelog"
	"github.com/ipybox/ipybox/internal/safefs"
	"github.com/ipybox/ipybox/internal/telemetry"
	"github.com/ipybox/ipybox/internal/waitgroup"
)

// Options configures a kernel. A nil *Options means the defaults; the
// struct is copied by Start.
type Options struct {
	// Python is the interpreter. Empty means discovery (see FindPython).
	Python string
	// Writable are the folders that kernel code can write (the workspace;
	// Dir is one too): no interpreter there is run on the host to probe
	// it (FindPython).
	Writable []string
	// Launcher starts the process. Nil means DirectLauncher.
	Launcher Launcher
	// Dir is the kernel's working directory. Empty means the current one.
	Dir string
	// Env is added to the kernel's constructed environment ("KEY=VALUE").
	// The host's environment is never passed as a whole.
	Env []string
	// PythonPath entries are put on the kernel's sys.path (PYTHONPATH).
	PythonPath []string
	// RunDir is the directory for the connection file and the ipc sockets.
	// Empty means a new short directory (see NewRunDir) that Close removes.
	RunDir string
	// ImagesDir receives PNG, JPEG and SVG outputs. Empty means
	// <Dir>/images.
	ImagesDir string
	// InitCode runs silently after every (re)start, before the first cell.
	InitCode string
	// StartTimeout bounds a start or restart. Zero means 60s.
	//
	// Every duration here follows one rule: zero means the default the
	// field names, and a negative value makes Start fail.
	StartTimeout time.Duration
	// InterruptGrace is how long an interrupted cell may take to stop
	// before the kernel is restarted. Zero means 3s.
	InterruptGrace time.Duration
	// IdleGrace is how long to wait for the final status after the reply
	// before the result is marked Truncated. Zero means 2s, or 10s with a
	// Gateway (a gateway relays the reply at once and may relay a cell's
	// output well behind it).
	IdleGrace time.Duration
	// ShutdownGrace is each step of Close's escalation (shutdown_request,
	// SIGTERM, SIGKILL). Zero means 2s.
	ShutdownGrace time.Duration
	// HeartbeatInterval is the pause between heartbeats; a kernel that
	// misses HeartbeatMisses consecutive beats is declared dead. Zero
	// means 2s. HeartbeatMisses zero (or less) means 3.
	HeartbeatInterval time.Duration
	HeartbeatMisses   int
	// Logger receives the kernel's own stderr and lifecycle logs. Nil
	// discards.
	Logger *slog.Logger
	// Gateway, when set, runs the kernel on a Jupyter server through its
	// kernels API instead of as a local process: Python, Launcher,
	// PythonPath and RunDir are then unused, Env reaches the kernel as
	// described in docs/scale.md, and Pid is 0. Nil means a local
	// kernel.
	Gateway *GatewayConfig

	// tcp makes the kernel use TCP on 127.0.0.1 where it would use ipc
	// sockets (tests only: see transport.go).
	tcp bool
}

func (o *Options) withDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Launcher == nil {
		c.Launcher = DirectLauncher{}
	}
	if c.Gateway != nil && c.IdleGrace == 0 {
		c.IdleGrace = defaults.GatewayIdleGrace
	}
	if err := defaults.Apply("kernel",
		defaults.Duration{Name: "Options.StartTimeout", V: &c.StartTimeout, Def: defaults.KernelStart},
		defaults.Duration{Name: "Options.InterruptGrace", V: &c.InterruptGrace, Def: defaults.InterruptGrace},
		defaults.Duration{Name: "Options.IdleGrace", V: &c.IdleGrace, Def: defaults.IdleGrace},
		defaults.Duration{Name: "Options.ShutdownGrace", V: &c.ShutdownGrace, Def: defaults.ShutdownGrace},
		defaults.Duration{Name: "Options.HeartbeatInterval", V: &c.HeartbeatInterval, Def: defaults.HeartbeatInterval},
	); err != nil {
		return c, err
	}
	if c.HeartbeatMisses <= 0 {
		c.HeartbeatMisses = defaults.HeartbeatMisses
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Kernel is a running IPython kernel. Its methods are safe for concurrent
// use, but cells run one at a time on the kernel side: callers that need an
// order serialise Execute themselves (the Executor does).
type Kernel struct {
	opts       Options
	python     string
	runDir     string
	ownRunDir  bool
	imagesDir  string
	session    string
	imageCount int // guarded by mu

	// startMu serialises replacements of the instance; mu guards the
	// fields below and is never held across a start (up to StartTimeout),
	// so that Close, Alive and Pid answer while a kernel starts.
	startMu sync.Mutex
	mu      sync.Mutex
	cur     *instance
	closed  bool
	// lost is the death of a kernel that no call has reported: the next
	// Execute reports it in Result.Restarted.
	lost *DiedError
	// closeCtx ends when Close is called: a start in progress gives up.
	closeCtx    context.Context
	closeCancel context.CancelFunc
	wg          waitgroup.Group // background goroutines of all instances

	remote *remote // nil for a local kernel
	// attach is GatewayConfig.KernelID until the first spawn attaches to
	// it; guarded by startMu.
	attach string

	// obs observes the kernel's process starts and deaths: the
	// *telemetry.Kernel that rode on Start's ctx (nil: none). spawned is
	// set by the first spawn, in Start, before anyone else has k.
	obs     *telemetry.Kernel
	spawned bool

	// prepared counts PrepareSpec's connection folders.
	prepared atomic.Int64

	// oneShot, when set, starts the next process in place of
	// Options.Launcher, once (RestartWith); guarded by startMu.
	oneShot Launcher
}

// Start launches a kernel and waits until it is ready to execute.
func Start(ctx context.Context, opts *Options) (*Kernel, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	var python string
	var rem *remote
	if o.Gateway != nil {
		if rem, err = newRemote(o.Gateway); err != nil {
			return nil, err
		}
	} else if python, err = choosePython(ctx, &o); err != nil {
		return nil, err
	}
	if o.Dir == "" {
		if o.Dir, err = os.Getwd(); err != nil {
			return nil, err
		}
	}
	if o.Dir, err = filepath.Abs(o.Dir); err != nil {
		return nil, err
	}
	k := &Kernel{opts: o, python: python, session: jupyter.NewID(), remote: rem, obs: telemetry.KernelFrom(ctx)}
	if o.Gateway != nil {
		k.attach = o.Gateway.KernelID
	}
	k.closeCtx, k.closeCancel = context.WithCancel(context.Background())
	k.imagesDir = o.ImagesDir
	if k.imagesDir == "" {
		k.imagesDir = filepath.Join(o.Dir, "images")
	}
	if o.RunDir != "" || rem != nil {
		k.runDir = o.RunDir
	} else {
		if k.runDir, err = NewRunDir(); err != nil {
			return nil, err
		}
		k.ownRunDir = true
	}
	inst, err := k.spawn(ctx)
	if err != nil {
		k.closeCancel()
		if k.ownRunDir {
			os.RemoveAll(k.runDir)
		}
		return nil, err
	}
	k.cur = inst
	return k, nil
}

// choosePython finds the interpreter. An explicit interpreter given to a
// confining Launcher (the sandbox) is never run on the host, not even to
// probe it: it may be one the confined code can rewrite (a workspace venv),
// so it only has to exist; whether it can import ipykernel shows when the
// kernel starts inside.
func choosePython(ctx context.Context, o *Options) (string, error) {
	if in, ok := o.Launcher.(Interpreter); ok {
		return in.Interpreter(), nil
	}
	if _, direct := o.Launcher.(DirectLauncher); direct || o.Python == "" {
		return FindPython(ctx, o.Python, append([]string{o.Dir}, o.Writable...)...)
	}
	p, err := resolve(o.Python)
	if err != nil {
		return "", fmt.Errorf("python %q: %w", o.Python, err)
	}
	return p, nil
}

// Python returns the interpreter the kernel runs.
func (k *Kernel) Python() string { return k.python }

// RunDir returns the kernel's run directory.
func (k *Kernel) RunDir() string { return k.runDir }

// ImagesDir returns the directory images are written to.
func (k *Kernel) ImagesDir() string { return k.imagesDir }

// instance is one kernel process and its connection. A restart replaces the
// instance; calls hold on to the instance they started on.
type instance struct {
	k    *Kernel
	proc Process
	conn transport

	mu    sync.Mutex
	calls map[string]*call // by request msg_id

	dead     chan struct{} // closed when the kernel is known dead
	deadOnce sync.Once
	deadErr  error
	exited   chan struct{} // closed when Wait returned
	stopHB   chan struct{}
	closing  atomic.Bool // set before a deliberate shutdown: its exit is not news
	reported atomic.Bool // a call has returned its death as an error
	// closedByClose: Kernel.Close ended it; a cell running then gets
	// ErrClosed rather than ErrKernelDied.
	closedByClose atomic.Bool
	// exitCause says how the process ended; set before exited is closed.
	exitCause string
	// observed is 0 until the instance is counted up (1), and 2 once it is
	// dead: each instance counts down once, and only if it counted up.
	observed atomic.Int32
}

func (in *instance) markDead(cause string) {
	in.deadOnce.Do(func() {
		in.deadErr = &DiedError{Cause: cause, At: time.Now()}
		if in.observed.Swap(2) == 1 {
			in.k.obs.Down(!in.closing.Load(), cause)
		}
		close(in.dead)
		if !in.closing.Load() {
			in.k.opts.Logger.Warn("kernel died", "cause", cause)
		}
	})
}

// deathReport is d, with how the process ended when that is known by now
// (the host often sees the connection drop before the exit status).
func (in *instance) deathReport(d *DiedError) *DiedError {
	select {
	case <-in.exited:
		return &DiedError{Cause: in.exitCause, At: d.At}
	case <-time.After(100 * time.Millisecond):
		return d
	}
}

// deathErr is what a call that saw in die returns.
func (in *instance) deathErr() error {
	if in.closedByClose.Load() {
		return ErrClosed
	}
	return in.deadErr
}

func (in *instance) isDead() bool { return isClosed(in.dead) }

// sendErr is what a call whose request could not be sent returns. A send
// fails most often because the kernel has just died (a broken pipe races the
// host's view of the exit), so it waits a moment for the death and reports
// that instead.
func (in *instance) sendErr(err error) error {
	t := time.NewTimer(3 * time.Second)
	defer t.Stop()
	select {
	case <-in.dead:
		return in.deathErr()
	case <-t.C:
		return err
	}
}

// spawn starts a process, connects and performs the ready handshake.
// writeConnection writes a fresh connection file in the kernel's own
// directory of the run directory (made without following a link), and
// returns that directory, the file and what it holds.
func (k *Kernel) writeConnection() (socketDir, connFile string, info *jupyter.ConnectionInfo, err error) {
	if err := safefs.MkdirAll(k.runDir, "kernel", 0o700); err != nil {
		return "", "", nil, fmt.Errorf("kernel directory: %w", err)
	}
	socketDir = filepath.Join(k.runDir, "kernel")
	if info, err = k.newConnection(socketDir); err != nil {
		return "", "", nil, err
	}
	connFile = filepath.Join(socketDir, "kernel.json")
	if err := info.Write(connFile); err != nil {
		return "", "", nil, fmt.Errorf("write connection file: %w", err)
	}
	return socketDir, connFile, info, nil
}

// watchExit waits for the kernel's process to end, kills what it started,
// and marks the instance dead with the cause and the kernel's last output.
func (k *Kernel) watchExit(in *instance, proc Process, stderr *linelog.Writer) {
	err := proc.Wait(context.Background()) // lifetime: the kernel's process (the exit's watcher)
	// What the kernel started (a `!sleep`, a subprocess) dies with it.
	in.kill()
	cause := "process exited"
	if err != nil {
		cause = "process exited: " + err.Error()
	}
	stderr.Flush()
	if tail := stderr.Tail(5); tail != "" {
		cause += "; last output: " + tail
	}
	in.exitCause = cause
	close(in.exited)
	in.markDead(cause)
}

// spawn starts a kernel process (spawnProcess), observed: the start (a
// restart after the first), and the process's life until markDead.
func (k *Kernel) spawn(ctx context.Context) (*instance, error) {
	restart := k.spawned
	k.spawned = true
	ctx, span := k.obs.StartProcess(ctx, restart)
	in, err := k.spawnProcess(ctx)
	k.obs.EndProcess(span, restart, err)
	if err == nil && in.observed.CompareAndSwap(0, 1) {
		k.obs.Up()
	}
	return in, err
}

func (k *Kernel) spawnProcess(ctx context.Context) (*instance, error) {
	if k.remote != nil {
		return k.spawnRemote(ctx)
	}
	ctx, cancel := context.WithTimeout(ctx, k.opts.StartTimeout)
	defer cancel()

	// The kernel's own files (its sockets, its connection file, which
	// ipykernel rewrites at start, and its IPython directory) are in a
	// directory of their own, the only part of the run directory a
	// confining Launcher lets it write; the runtime and the tool socket
	// stay where it cannot. The host never reads back what is there: it
	// writes the connection file afresh, without following a link, and
	// dials the sockets without following one.
	socketDir, connFile, info, err := k.writeConnection()
	if err != nil {
		return nil, err
	}
	log := k.opts.Logger
	stderr := &linelog.Writer{Emit: func(line string) { log.Debug("kernel output", "line", line) }}
	spec := &Spec{
		Path: k.python,
		Args: launchArgs(connFile),
		Env:  k.env(),
		Dir:  k.opts.Dir,
		// The kernel's own stdout/stderr (not cell output) go to the log.
		Stdout: stderr, Stderr: stderr,
		RunDir:    k.runDir,
		SocketDir: socketDir,
		InitCode:  k.opts.InitCode,
	}
	launcher := k.opts.Launcher
	if k.oneShot != nil {
		launcher, k.oneShot = k.oneShot, nil
	}
	proc, err := launcher.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	prep, prepared := proc.(Prepared)
	if prepared && prep.Connection() != nil {
		info = prep.Connection()
	}
	in := newInstance(k, proc)
	k.wg.Add()
	go func() {
		defer k.wg.Done()
		k.watchExit(in, proc, stderr)
	}()

	dialCtx, dialCancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-in.dead:
			dialCancel(in.deadErr)
		case <-dialCtx.Done():
		}
	}()
	conn, err := jupyter.Dial(dialCtx, info, in.handle, &jupyter.DialOptions{
		OnLost: func(ch jupyter.Channel, err error) {
			var fe *jupyter.FrameError
			if errors.As(err, &fe) {
				in.markDead("connection lost on " + ch.String() + ": " + fe.Error())
				return
			}
			in.markDead("connection lost on " + ch.String())
		},
		OnDropped: func(ch jupyter.Channel, err error) {
			k.opts.Logger.Warn("dropped kernel message", "channel", ch.String(), "err", err)
		},
	})
	dialCancel(nil)
	if err != nil {
		k.abandon(in)
		if in.isDead() {
			return nil, fmt.Errorf("kernel failed to start: %w", in.deadErr)
		}
		return nil, fmt.Errorf("kernel failed to start within %v: %w", k.opts.StartTimeout, err)
	}
	in.conn = conn
	if err := in.handshake(ctx); err != nil {
		k.abandon(in)
		return nil, err
	}
	stderr.Forget() // the start-up banner explains no later death
	k.wg.Add()
	go in.heartbeat()
	if k.opts.InitCode != "" && !prepared {
		if _, err := in.execute(ctx, k.opts.InitCode, &ExecOptions{Silent: true}); err != nil {
			k.abandon(in)
			return nil, fmt.Errorf("kernel init code failed: %w", err)
		}
	}
	return in, nil
}

// launchArgs are the interpreter arguments for ipykernel. History is off:
// an agent's kernel needs no sqlite database, and it costs start time.
func launchArgs(connFile string) []string {
	return []string{"-c", launchShim(), "-f", connFile,
		"--HistoryManager.enabled=False",
		"--InteractiveShell.colors=NoColor",
		"--IPKernelApp.quiet=True",
	}
}

// env constructs the kernel's environment from scratch.
func (k *Kernel) env() []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	// The interpreter's own directory first, so that `!python` and `!pip`
	// in a cell mean the kernel's Python (a venv's bin, say).
	path = filepath.Dir(k.python) + string(os.PathListSeparator) + path
	home := os.Getenv("HOME")
	if home == "" {
		home = k.opts.Dir
	}
	lang := os.Getenv("LANG")
	if lang == "" {
		lang = "C.UTF-8"
	}
	env := []string{
		"PATH=" + path,
		"HOME=" + home,
		"LANG=" + lang,
		"TERM=dumb",
		"NO_COLOR=1",
		"CLICOLOR=0",
		"PYDEVD_DISABLE_FILE_VALIDATION=1",
		"MPLBACKEND=module://matplotlib_inline.backend_inline",
		"IPYTHONDIR=" + filepath.Join(k.runDir, "kernel", "ipython"),
		"JPY_SESSION_NAME=ipybox",
	}
	env = append(env, platformEnv()...)
	if len(k.opts.PythonPath) > 0 {
		env = append(env, "PYTHONPATH="+strings.Join(k.opts.PythonPath, string(os.PathListSeparator)))
	}
	return mergeEnv(mergeEnv(env, k.opts.Env), confineEnv())
}

// mergeEnv appends extra to base; a later KEY replaces an earlier one.
func mergeEnv(base, extra []string) []string {
	idx := map[string]int{}
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range append(append([]string(nil), base...), extra...) {
		key, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[key]; ok {
			out[i] = kv
			continue
		}
		idx[key] = len(out)
		out = append(out, kv)
	}
	return out
}

// handle is the jupyter.Handler: it routes a message to the call whose
// request it answers. It never blocks.
func (in *instance) handle(ch jupyter.Channel, m *jupyter.Message) {
	in.mu.Lock()
	c := in.calls[m.ParentHeader.MsgID]
	in.mu.Unlock()
	if c == nil {
		// Output of a background thread of an earlier cell, a late
		// reply, or ipykernel 7's iopub_welcome (no parent at all).
		// bound: Enabled only reads the level.
		if log := in.k.opts.Logger; log.Enabled(context.Background(), slog.LevelDebug) {
			typ := m.Header.MsgType // kernel code can publish any type, of any length
			if len(typ) > 64 {
				typ = typ[:64] + "..."
			}
			log.Debug("kernel: message for no pending request", "channel", ch.String(), "type", typ)
		}
		return
	}
	c.push(ch, m)
}

// handshake sends kernel_info_request until a reply arrives and an iopub
// message for the same request has been seen: only then is the iopub
// subscription known to be live (the slow-joiner race).
func (in *instance) handshake(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		msg, err := jupyter.NewMessage(in.k.session, "kernel_info_request", struct{}{})
		if err != nil {
			return err
		}
		c := in.register(msg.Header.MsgID)
		err = in.conn.Send(jupyter.Shell, msg)
		if err == nil {
			err = c.waitInfo(ctx, in, 500*time.Millisecond)
		}
		in.unregister(msg.Header.MsgID)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errRetry) {
			if in.isDead() {
				return fmt.Errorf("kernel failed to start: %w", in.deadErr)
			}
			return fmt.Errorf("kernel did not become ready within %v: %w", in.k.opts.StartTimeout, err)
		}
	}
}

var errRetry = errors.New("retry")

func (in *instance) heartbeat() {
	defer in.k.wg.Done()
	o := in.k.opts
	t := time.NewTicker(o.HeartbeatInterval)
	defer t.Stop()
	misses := 0
	for {
		select {
		case <-in.stopHB:
			return
		case <-in.dead:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), o.HeartbeatInterval)
		err := in.conn.Ping(ctx)
		cancel()
		if err == nil {
			misses = 0
			continue
		}
		if errors.Is(err, jupyter.ErrClosed) {
			return
		}
		misses++
		if misses >= o.HeartbeatMisses {
			in.markDead(fmt.Sprintf("no heartbeat for %d beats", misses))
			in.k.kill(in)
			return
		}
	}
}

func (in *instance) register(id string) *call {
	c := newCall(in.dead)
	in.mu.Lock()
	in.calls[id] = c
	in.mu.Unlock()
	return c
}

func (in *instance) unregister(id string) {
	in.mu.Lock()
	c := in.calls[id]
	delete(in.calls, id)
	in.mu.Unlock()
	if c != nil {
		c.end()
	}
}

// current returns the live instance, restarting a dead one first.
func (k *Kernel) current(ctx context.Context) (*instance, error) {
	return k.replace(ctx, func(cur *instance) bool { return cur == nil || cur.isDead() })
}

// Restart replaces the kernel process with a fresh one: the namespace is
// new, files persist.
func (k *Kernel) Restart(ctx context.Context) error {
	_, err := k.replace(ctx, func(*instance) bool { return true })
	if err == nil {
		k.mu.Lock()
		k.lost = nil // the caller asked for a fresh kernel: a death is no news
		k.mu.Unlock()
	}
	return err
}

// RestartWith is Restart with the new process started by l, once: later
// restarts use Options.Launcher again (a rewind swaps in a kept copy of
// the kernel this way).
func (k *Kernel) RestartWith(ctx context.Context, l Launcher) error {
	k.startMu.Lock()
	k.oneShot = l
	k.startMu.Unlock()
	err := k.Restart(ctx)
	k.startMu.Lock()
	k.oneShot = nil
	k.startMu.Unlock()
	return err
}

// restartAfter replaces in, if it is still current (after an interrupt it
// ignored).
func (k *Kernel) restartAfter(ctx context.Context, in *instance) error {
	_, err := k.replace(ctx, func(cur *instance) bool { return cur == in })
	return err
}

// replace retires the current instance and spawns a fresh one when
// needed(current) says so, and returns the instance that is current after.
// It holds the lock throughout, so that concurrent callers see one
// replacement, not several.
func (k *Kernel) replace(ctx context.Context, needed func(cur *instance) bool) (*instance, error) {
	k.startMu.Lock()
	defer k.startMu.Unlock()
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return nil, ErrClosed
	}
	if !needed(k.cur) {
		cur := k.cur
		k.mu.Unlock()
		return cur, nil
	}
	old := k.cur
	k.cur = nil
	var lost *DiedError // a death no call has reported
	if old != nil && old.isDead() {
		k.opts.Logger.Info("starting a fresh kernel after death")
		if d, ok := old.deadErr.(*DiedError); ok && !old.reported.Load() && !old.closing.Load() {
			lost = d
		}
	}
	k.mu.Unlock()
	if lost != nil {
		lost = old.deathReport(lost) // waits briefly for the exit status
		k.mu.Lock()
		k.lost = lost
		k.mu.Unlock()
	}
	if old != nil {
		k.retire(old)
	}
	// Close cancels the start: it must not wait up to StartTimeout.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(k.closeCtx, cancel)
	defer stop()
	in, err := k.spawn(ctx)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		if in != nil {
			in.closing.Store(true)
			k.kill(in)
		}
		return nil, ErrClosed
	}
	if err != nil {
		return nil, err
	}
	k.cur = in
	return in, nil
}

// Alive reports whether the current kernel process is believed alive.
func (k *Kernel) Alive() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cur != nil && !k.cur.isDead()
}

// Pid returns the host pid of the current kernel process: 0 if there is
// none, or if it is not a process of this host (a gateway kernel).
func (k *Kernel) Pid() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cur == nil {
		return 0
	}
	if hp, ok := k.cur.proc.(HostProcess); ok {
		return hp.Pid()
	}
	return 0
}

// Interrupt sends SIGINT to the kernel, as a user's Ctrl-C would.
func (k *Kernel) Interrupt() error {
	k.mu.Lock()
	in, closed := k.cur, k.closed
	k.mu.Unlock()
	switch {
	case closed:
		return ErrClosed
	case in == nil:
		return nil // a fresh kernel is starting: it runs nothing yet
	}
	return in.signal(syscall.SIGINT)
}

// signal sends sig to the process, and kill kills it, each bounded by the
// kernel's grace: a container's or a gateway's process takes the order
// over the network.
func (in *instance) signal(sig syscall.Signal) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*in.k.opts.ShutdownGrace)
	defer cancel()
	return in.proc.Signal(ctx, sig)
}

func (in *instance) kill() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*in.k.opts.ShutdownGrace)
	defer cancel()
	return in.proc.Kill(ctx)
}

// abandon ends an instance whose start failed or was cancelled: the
// caller gets the error, so its end is not news (no "kernel died").
func (k *Kernel) abandon(in *instance) {
	in.closing.Store(true)
	k.kill(in)
}

// retire stops an instance at once (it is dead or being replaced).
func (k *Kernel) retire(in *instance) {
	in.closing.Store(true)
	in.markDead("replaced")
	k.kill(in)
}

// kill ends the process and closes the connection, bounded.
func (k *Kernel) kill(in *instance) {
	select {
	case <-in.stopHB:
	default:
		close(in.stopHB)
	}
	in.kill()
	select {
	case <-in.exited:
	case <-time.After(k.opts.ShutdownGrace):
		k.opts.Logger.Warn("kernel process did not exit after SIGKILL", "process", in.proc.ID())
	}
	if in.conn != nil {
		// Dead first: a reader waiting for a call's caller gives up, and
		// Close, which waits for the readers, cannot hang on it.
		in.markDead("closed")
		in.conn.Close()
	}
}

// Close shuts the kernel down: shutdown_request, then SIGTERM, then
// SIGKILL, each with a bounded wait. It removes the run directory it
// created. Close is idempotent and safe to call concurrently. A process
// that outlives SIGKILL does not hold it: Close gives up on it after
// StartTimeout and three ShutdownGrace, and returns an error.
func (k *Kernel) Close() error {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		k.wg.Wait(k.closeWait())
		return nil
	}
	k.closed = true
	in := k.cur
	k.cur = nil
	k.mu.Unlock()
	k.closeCancel() // a start in progress gives up
	// and is waited for: it adds to wg, which must not race with Wait.
	k.startMu.Lock()
	//lint:ignore SA2001 the empty section is the wait: a start holds startMu while it adds to wg
	k.startMu.Unlock()

	if in != nil {
		in.closedByClose.Store(true)
		k.shutdown(in)
	}
	var err error
	if d := k.closeWait(); !k.wg.Wait(d) {
		err = fmt.Errorf("kernel: close: gave up after %v on a kernel process that outlived its kill, or a gateway call", d)
	}
	if k.ownRunDir {
		if rerr := os.RemoveAll(k.runDir); rerr != nil {
			return errors.Join(err, fmt.Errorf("remove run directory: %w", rerr))
		}
	}
	return err
}

// closeWait bounds Close's wait for the kernel's goroutines once it has
// ended the processes: a process's Wait returns within its Launcher's
// bound after a kill, and a gateway start that Close abandoned ends within
// StartTimeout, then deletes what it created. A Process that outlives
// SIGKILL (a host process in uninterruptible sleep, a Launcher whose Wait
// ignores the kill) is left behind, and Close says so.
func (k *Kernel) closeWait() time.Duration {
	return k.opts.StartTimeout + 3*k.opts.ShutdownGrace
}

// shutdown stops an instance for good. It asks politely first, and waits
// for what really says the kernel is done: its shutdown_reply, or its
// exit. A kernel that has replied is done, and its process group is killed
// at once: ipykernel 6.17 can hang for seconds after replying, in its own
// atexit shutdown (the control thread flushes through the IOPub thread,
// which the main thread has already stopped, and the main thread joins the
// control thread). jupyter_client does not wait for that exit either.
// Without a reply or an exit within the grace, SIGTERM, then SIGKILL.
func (k *Kernel) shutdown(in *instance) {
	g := k.opts.ShutdownGrace
	in.closing.Store(true)
	// A gateway kernel is shut down by its DELETE (kill below): the server
	// asks it politely and waits, and would restart a kernel that exits
	// on a shutdown_request of ours.
	if !in.isDead() && in.conn != nil && !in.isRemote() {
		replied := false
		if msg, err := jupyter.NewMessage(k.session, "shutdown_request", map[string]bool{"restart": false}); err == nil {
			c := in.register(msg.Header.MsgID)
			if in.conn.Send(jupyter.Control, msg) == nil {
				replied = c.waitShutdown(in, g)
			}
			in.unregister(msg.Header.MsgID)
		}
		if !replied {
			select {
			case <-in.exited:
			default:
				in.signal(syscall.SIGTERM)
				select {
				case <-in.exited:
				case <-time.After(g):
				}
			}
		}
	}
	in.markDead("closed")
	k.kill(in)
	// The process group may still hold children (a `!sleep` of a cell).
	in.kill()
}

// waitShutdown waits up to grace for the shutdown_reply on c, or for the
// process to exit; it reports whether either came.
func (c *call) waitShutdown(in *instance, grace time.Duration) bool {
	t := time.NewTimer(grace)
	defer t.Stop()
	for {
		for _, r := range c.drain() {
			if r.ch == jupyter.Control && r.m.Header.MsgType == "shutdown_reply" {
				return true
			}
		}
		select {
		case <-c.notify:
		case <-in.exited:
			return true
		case <-t.C:
			return false
		}
	}
}

// newInstance is a started kernel process, local or remote, before its
// connection is made.
func newInstance(k *Kernel, proc Process) *instance {
	return &instance{
		k: k, proc: proc,
		calls:  map[string]*call{},
		dead:   make(chan struct{}),
		exited: make(chan struct{}),
		stopHB: make(chan struct{}),
	}
}
