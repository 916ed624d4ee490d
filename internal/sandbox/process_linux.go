package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipybox/ipybox/internal/procexit"
)

// readLine reads one line (without the newline) from the init's control
// socket; it returns what it has at EOF.
func readLine(r io.Reader) string {
	var b []byte
	one := make([]byte, 1)
	for len(b) < 4096 {
		n, err := r.Read(one)
		if n == 1 {
			if one[0] == '\n' {
				break
			}
			b = append(b, one[0])
		}
		if err != nil {
			break
		}
	}
	return string(b)
}

// waitDelay bounds how long Wait waits for the output pipes once bwrap has
// exited (see exec.Cmd.WaitDelay).
const waitDelay = 5 * time.Second

// abortGrace is how long an aborted start waits for bwrap to end by
// itself before killing it.
const abortGrace = 3 * time.Second

// shutdownCtl shuts the host's end of the control socket down, in both
// directions, without closing it (a Read or Write in progress sees EOF or
// EPIPE at once). The init exits when it reads EOF, or when it cannot
// write "ok"; that ends the pid namespace and everything in it. Unlike a
// signal to bwrap, this needs no --die-with-parent, which a credential
// change in the sandbox's set-up clears.
func shutdownCtl(f *os.File) {
	if sc, err := f.SyscallConn(); err == nil {
		sc.Control(func(fd uintptr) { unix.Shutdown(int(fd), unix.SHUT_RDWR) })
	}
}

// abortStart ends a sandbox whose start was abandoned (its context ended):
// the control socket is shut down, so that the init exits as soon as it
// runs, and bwrap gets abortGrace to end by itself before it is killed.
// Killing bwrap at once could orphan its child in the middle of the
// set-up, where it waits for bwrap forever, holding the control socket.
func abortStart(cmd *exec.Cmd, ctl *os.File, ready <-chan string) {
	shutdownAndReap(cmd, ctl)
	<-ready // bound: at once: the socket is shut down
	ctl.Close()
}

// shutdownAndReap shuts the control socket down and waits for bwrap's
// end, killing it after abortGrace (abortStart, abortStartFork).
func shutdownAndReap(cmd *exec.Cmd, ctl *os.File) {
	shutdownCtl(ctl)
	exited := make(chan struct{})
	go func() {
		cmd.Wait() // bound: killed after abortGrace; WaitDelay
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(abortGrace):
		cmd.Process.Kill()
		<-exited // bound: killed above; WaitDelay
	}
}

// process is a sandboxed process: bwrap, and inside, the init (pid 1) and
// the program. Signals travel to the init over the control socket, because
// the program runs in another session and pid namespace; the init sends
// them to the program's process group.
type process struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	ctl  *os.File // nil after the exit
	exit *procexit.Exit
}

// newProcess reaps bwrap from the start on.
func newProcess(cmd *exec.Cmd, ctl *os.File) *process {
	p := &process{cmd: cmd, ctl: ctl}
	p.exit = procexit.Go(p.wait)
	return p
}

// ID implements kernel.Process: bwrap's pid.
func (p *process) ID() string { return strconv.Itoa(p.Pid()) }

// Pid implements kernel.HostProcess: bwrap's pid.
func (p *process) Pid() int { return p.cmd.Process.Pid }

// Signal delivers sig to the program's process group inside the sandbox.
// SIGKILL kills the whole sandbox (see Kill).
func (p *process) Signal(ctx context.Context, sig syscall.Signal) error {
	if sig == syscall.SIGKILL {
		return p.Kill(ctx)
	}
	if sig <= 0 || sig > 64 {
		return fmt.Errorf("sandbox: cannot forward signal %d", int(sig))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctl == nil {
		return os.ErrProcessDone
	}
	if _, err := p.ctl.Write([]byte{byte(sig)}); err != nil {
		if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			return os.ErrProcessDone
		}
		return fmt.Errorf("sandbox: signal: %w", err)
	}
	return nil
}

// Kill ends the whole sandbox: it shuts the control socket down, which
// makes the init (the sandbox's pid 1) exit, and the kernel then kills
// every process in the sandbox's pid namespace; and it kills bwrap.
func (p *process) Kill(context.Context) error {
	p.mu.Lock()
	if p.ctl != nil {
		shutdownCtl(p.ctl)
	}
	p.mu.Unlock()
	err := p.cmd.Process.Kill()
	if errors.Is(err, os.ErrProcessDone) {
		return os.ErrProcessDone
	}
	return err
}

// Wait implements kernel.Process.
func (p *process) Wait(ctx context.Context) error { return p.exit.Wait(ctx) }

// wait reaps bwrap and closes the control socket.
func (p *process) wait() error {
	err := p.cmd.Wait() // lifetime: bwrap; from Kill on, WaitDelay
	p.mu.Lock()
	if p.ctl != nil {
		p.ctl.Close()
		p.ctl = nil
	}
	p.mu.Unlock()
	return err
}
