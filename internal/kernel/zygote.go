//go:build linux

package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipybox/ipybox/internal/defaults"
	"github.com/ipybox/ipybox/internal/linelog"
	"github.com/ipybox/ipybox/internal/procexit"
)

// A Zygote is a fork server for kernels: one Python process that has
// already imported ipykernel, IPython, zmq and tornado, and forks a kernel
// per request. A forked kernel is ready in about a fifth of a cold start,
// because the imports (about 0.35 s of CPU) are already done; under a burst
// of sessions on few cores that is the difference between seconds and a
// fraction of one.
//
// The zygote forks before any ZeroMQ socket or thread exists, so a child
// starts as clean as a fresh interpreter: it sets its own environment,
// working directory, sys.path and standard streams, reseeds random, becomes
// the leader of its own process group, and dies with the zygote. Kernels
// share nothing after the fork but the read-only pages of the imported
// code (and Python's hash seed).
//
// A Zygote implements Launcher for specs that run ipykernel with its own
// interpreter; it is not a sandbox, and a sandboxed kernel must never come
// from it (forked kernels in one sandbox would share its processes and
// files).
type Zygote struct {
	python string
	env    []string
	log    *slog.Logger
	join   bool // a sandbox fork server (zygote_join_linux.go): Join only

	// closed is closed by Close, so that a Start waiting on the zygote
	// (its restart, up to zygoteStartTimeout, or a fork) gives up at once
	// instead of making Close wait behind it.
	closed    chan struct{}
	closeOnce sync.Once

	mu   sync.Mutex // one request at a time; guards the fields below
	cur  *zygoteProc
	done bool
}

// zygoteProc is one running zygote process and its control socket.
type zygoteProc struct {
	cmd  *exec.Cmd
	ctl  *os.File
	dead chan struct{} // closed when the reader sees the socket close

	mu      sync.Mutex
	replies map[int]chan zygoteReply
	procs   map[int]*zygoteKernel
	nextID  int
}

type zygoteReply struct {
	ID    int    `json:"id"`
	Pid   int    `json:"pid"`
	Error string `json:"error"`
	Exit  int    `json:"exit"`   // a child's pid, in an exit report
	State int    `json:"status"` // its wait status
}

// NewZygote starts a fork server with python (which must import ipykernel;
// empty means discovery, see FindPython) and env, the environment of the
// imports (nil means the basic one kernels get: PATH, HOME, LANG); each
// kernel then gets its own environment from its Spec. A nil logger
// discards the zygote's own output.
func NewZygote(ctx context.Context, python string, env []string, log *slog.Logger) (*Zygote, error) {
	return newZygote(ctx, python, env, log, false)
}

// newZygote is NewZygote, and NewSandboxZygote with join.
func newZygote(ctx context.Context, python string, env []string, log *slog.Logger, join bool) (*Zygote, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	python, err := FindPython(ctx, python)
	if err != nil {
		return nil, err
	}
	if env == nil {
		k := &Kernel{python: python}
		env = k.env()
	}
	z := &Zygote{python: python, env: env, log: log, join: join, closed: make(chan struct{})}
	z.mu.Lock()
	defer z.mu.Unlock()
	if _, err := z.proc(ctx); err != nil {
		return nil, err
	}
	return z, nil
}

// Python returns the interpreter the zygote runs; kernels it forks must
// name it in their Spec.
func (z *Zygote) Python() string { return z.python }

// zygoteStartTimeout bounds the zygote's imports.
const zygoteStartTimeout = defaults.KernelStart

// proc returns the running zygote, starting one when there is none or it
// died. z.mu is held.
func (z *Zygote) proc(ctx context.Context) (*zygoteProc, error) {
	select {
	case <-z.closed:
		return nil, ErrClosed
	default:
	}
	if z.done {
		return nil, ErrClosed
	}
	if z.cur != nil {
		select {
		case <-z.cur.dead:
			z.cur.stop()
			z.cur = nil
		default:
			return z.cur, nil
		}
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("fork server: %w", err)
	}
	ctl, child := os.NewFile(uintptr(fds[0]), "zygote-ctl"), os.NewFile(uintptr(fds[1]), "zygote-ctl-child")
	out := &linelog.Writer{Emit: func(line string) { z.log.Debug("zygote output", "line", line) }}
	cmd := exec.Command(z.python, "-c", zygoteScript())
	if z.join {
		cmd = exec.Command(z.python, "-s", "-c", sandboxZygoteScript())
	}
	cmd.Env = z.env
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{child} // fd 3
	// Its own group, and no parent-death signal: that SIGKILL would end
	// the zygote before it could kill its kernels' groups. It watches the
	// control socket instead, whose other end only this process holds, and
	// at EOF kills every kernel's group and exits.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = startFiltered(cmd) // its kernels inherit the filter
	child.Close()
	if err != nil {
		ctl.Close()
		return nil, fmt.Errorf("fork server: start %s: %w", z.python, err)
	}
	p := &zygoteProc{cmd: cmd, ctl: ctl, dead: make(chan struct{}),
		replies: map[int]chan zygoteReply{}, procs: map[int]*zygoteKernel{}}
	ready := make(chan zygoteReply, 1)
	p.replies[0] = ready
	go p.read()
	ctx, cancel := context.WithTimeout(ctx, zygoteStartTimeout)
	defer cancel()
	select {
	case r := <-ready:
		if r.Error != "" {
			p.stop()
			return nil, fmt.Errorf("fork server: %s", r.Error)
		}
	case <-p.dead:
		p.stop()
		return nil, fmt.Errorf("fork server: %s exited while importing ipykernel", z.python)
	case <-ctx.Done():
		p.stop()
		return nil, fmt.Errorf("fork server: waiting for %s to import ipykernel: %w", z.python, ctx.Err())
	case <-z.closed:
		p.stop()
		return nil, ErrClosed
	}
	z.cur = p
	return p, nil
}

// read dispatches the zygote's messages: replies to requests and exit
// reports of kernels. It ends when the socket closes.
func (p *zygoteProc) read() {
	buf := make([]byte, 64<<10)
	defer func() {
		p.mu.Lock()
		for _, k := range p.procs {
			k.exit(errors.New("the zygote exited"))
		}
		p.procs = map[int]*zygoteKernel{}
		p.mu.Unlock()
		close(p.dead)
	}()
	for {
		n, err := p.ctl.Read(buf)
		if err != nil || n == 0 {
			return
		}
		var r zygoteReply
		if json.Unmarshal(buf[:n], &r) != nil {
			continue
		}
		p.mu.Lock()
		if r.Exit != 0 {
			if k := p.procs[r.Exit]; k != nil {
				delete(p.procs, r.Exit)
				k.exit(waitError(syscall.WaitStatus(r.State)))
			}
		} else if ch := p.replies[r.ID]; ch != nil {
			delete(p.replies, r.ID)
			if r.Pid > 0 {
				// Registered before the next message is read: an exit
				// report for this pid can only come after.
				p.procs[r.Pid] = newZygoteKernel(r.Pid)
			}
			ch <- r // bound: a reply channel has room for its one reply
		}
		p.mu.Unlock()
	}
}

// waitError describes a wait status the way exec.Cmd.Wait would.
func waitError(ws syscall.WaitStatus) error {
	switch {
	case ws.Signaled():
		return fmt.Errorf("signal: %v", ws.Signal())
	case ws.ExitStatus() != 0:
		return fmt.Errorf("exit status %d", ws.ExitStatus())
	}
	return nil
}

// stop kills the zygote process group and waits for it.
func (p *zygoteProc) stop() {
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	p.ctl.Close()
	p.cmd.Wait() // bound: its group was killed; its kernels replaced its pipes at the fork
	<-p.dead     // bound: read ends at EOF: the zygote is dead, and its kernels closed their copies
}

// Start implements Launcher: it forks a kernel for spec, which must run
// this zygote's interpreter with ipykernel's launch arguments.
func (z *Zygote) Start(ctx context.Context, spec *Spec) (Process, error) {
	if z.join {
		return nil, errors.New("fork server: a sandbox fork server forks kernels into sandboxes only (sandbox.Options.Zygote)")
	}
	if spec.Path != z.python {
		return nil, fmt.Errorf("fork server: it runs %s, not %s", z.python, spec.Path)
	}
	if len(spec.Args) < 2 || spec.Args[0] != "-c" || spec.Args[1] != launchShim() {
		return nil, errors.New("fork server: the spec does not launch ipykernel")
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	p, err := z.proc(ctx)
	if err != nil {
		return nil, err
	}
	// The kernel's own output (not cell output) goes to spec.Stdout and
	// spec.Stderr through a pipe whose write end the child gets.
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("fork server: %w", err)
	}
	out := io.Writer(io.Discard)
	if spec.Stderr != nil {
		out = spec.Stderr
	}
	go func() {
		io.Copy(out, r)
		r.Close()
	}()
	var pythonPath []string
	env := make([]string, 0, len(spec.Env))
	for _, kv := range spec.Env {
		if v, ok := strings.CutPrefix(kv, "PYTHONPATH="); ok && v != "" {
			pythonPath = strings.Split(v, string(os.PathListSeparator))
		}
		env = append(env, kv)
	}
	p.mu.Lock()
	p.nextID++
	id := p.nextID
	reply := make(chan zygoteReply, 1)
	p.replies[id] = reply
	p.mu.Unlock()
	req, err := json.Marshal(map[string]any{
		"id": id, "argv": spec.Args[2:], "env": env, "cwd": spec.Dir, "pythonpath": pythonPath,
	})
	if err == nil {
		err = unix.Sendmsg(int(p.ctl.Fd()), req, unix.UnixRights(int(w.Fd())), nil, 0)
	}
	w.Close()
	if err != nil {
		return nil, fmt.Errorf("fork server: send the request: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	select {
	case rep := <-reply:
		if rep.Error != "" {
			return nil, fmt.Errorf("fork server: %s", rep.Error)
		}
		p.mu.Lock()
		k := p.procs[rep.Pid]
		p.mu.Unlock()
		if k == nil { // exited before we looked: a Process that has ended
			k = newZygoteKernel(rep.Pid)
			k.exit(errors.New("the kernel exited at once"))
		}
		return k, nil
	case <-p.dead:
		return nil, errors.New("fork server: it exited while forking a kernel")
	case <-ctx.Done():
		return nil, fmt.Errorf("fork server: waiting for a fork: %w", ctx.Err())
	case <-z.closed:
		// Close stops the zygote, and the kernel it may have forked
		// with it.
		return nil, ErrClosed
	}
}

// Close stops the zygote. Kernels it forked die with it. Close is
// idempotent, and bounded: a Start in progress gives up (with ErrClosed)
// rather than hold Close behind a restart or a fork.
func (z *Zygote) Close() error {
	z.closeOnce.Do(func() { close(z.closed) })
	z.mu.Lock()
	defer z.mu.Unlock()
	z.done = true
	if z.cur != nil {
		z.cur.stop()
		z.cur = nil
	}
	return nil
}

// zygoteKernel is a kernel forked by a zygote. It is the zygote's child,
// not ours: signals go to its process group by pid, and its exit comes as
// a report from the zygote.
type zygoteKernel struct {
	pid  int
	done *procexit.Exit
	exit func(error) // the zygote's report; the first counts
}

func newZygoteKernel(pid int) *zygoteKernel {
	k := &zygoteKernel{pid: pid}
	k.done, k.exit = procexit.Reported()
	return k
}

// ID implements Process: the pid.
func (k *zygoteKernel) ID() string { return strconv.Itoa(k.pid) }

// Pid implements HostProcess.
func (k *zygoteKernel) Pid() int { return k.pid }

// Signal implements Process: the kernel leads its process group.
func (k *zygoteKernel) Signal(_ context.Context, sig syscall.Signal) error {
	select {
	case <-k.done.Done():
		return os.ErrProcessDone
	default:
	}
	if err := syscall.Kill(-k.pid, sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
	return nil
}

// Kill implements Process.
func (k *zygoteKernel) Kill(ctx context.Context) error { return k.Signal(ctx, syscall.SIGKILL) }

// Wait implements Process: the zygote reports the exit.
func (k *zygoteKernel) Wait(ctx context.Context) error { return k.done.Wait(ctx) }
