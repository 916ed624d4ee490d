// Package lifeline starts a child process that cannot outlive this one,
// on every system ipybox runs on, without relying on Linux's parent-death
// signal.
//
// The child gets the read end of a pipe whose write end only this process
// holds. When this process ends, however it ends (SIGKILL included), the
// system closes the write end and the child reads EOF. The child watches
// for it from its first instruction on (WatchPython, which the kernel's
// launch shim runs), and then kills its process group (Unix) or exits (on
// Windows, where the job object the child runs in kills what it started).
//
// There is no gap: a child whose watcher starts after this process died
// reads EOF at once. Besides the pipe:
//   - Unix: the child leads its own process group, so a signal (SIGINT for
//     an interrupt, SIGKILL) reaches what it started too. It gets no
//     parent-death signal on Linux: that SIGKILL would end the child alone,
//     before its watcher could kill the group, and leave what the child
//     started running (TestKernelDiesWithHost in package kernel caught it).
//   - Windows: the child runs in a job object that is killed when its last
//     handle closes (when this process dies), and it gets ipykernel's
//     interrupt event (JPY_INTERRUPT_EVENT), which Signal(SIGINT) sets, as
//     jupyter_client does; Windows has no SIGINT to send to a process.
package lifeline

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"github.com/ipybox/ipybox/internal/procexit"
)

// EnvVar names the environment variable that tells the child where its end
// of the pipe is: a file descriptor on Unix, a handle on Windows.
const EnvVar = "IPYBOX_LIFELINE"

// WatchPython is Python code that watches the pipe named by EnvVar in a
// daemon thread and ends the process, and on Unix its process group, at
// EOF. It removes EnvVar from os.environ, so that nothing the child starts
// sees it, and does nothing when EnvVar is unset (a launcher that has its
// own means, such as the Linux sandbox). It uses only the standard library
// and leaves no name behind but _ipybox_lifeline.
//
//go:embed watch.py
var WatchPython string

// Process is a child started by Start.
type Process struct {
	cmd  *exec.Cmd
	w    *os.File // the write end: this process's side of the pipe
	sys  sysProcess
	exit *procexit.Exit

	starter func(*exec.Cmd) error
}

// Start starts cmd with a lifeline. cmd.Env must be set (the child's
// complete environment): Start adds EnvVar (and on Windows
// JPY_INTERRUPT_EVENT) to it. cmd.SysProcAttr must be nil: Start sets it.
// start, when given, starts cmd instead of cmd.Start (with restrictions:
// internal/seccomp's Start).
func Start(cmd *exec.Cmd, start ...func(*exec.Cmd) error) (*Process, error) {
	if cmd.SysProcAttr != nil {
		return nil, fmt.Errorf("kernel lifeline: %s already has process attributes", cmd.Path)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("kernel lifeline: %w", err)
	}
	p := &Process{cmd: cmd, w: w, starter: (*exec.Cmd).Start}
	if len(start) > 0 && start[0] != nil {
		p.starter = start[0]
	}
	if err := p.start(r); err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	r.Close() // the child has its copy
	p.exit = procexit.Go(p.wait)
	return p, nil
}

// ID returns the child's pid, in decimal.
func (p *Process) ID() string { return strconv.Itoa(p.Pid()) }

// Pid returns the child's pid.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Signal delivers sig to the child (on Unix, its process group); it does
// not block.
func (p *Process) Signal(_ context.Context, sig syscall.Signal) error { return p.signal(sig) }

// Kill ends the child and everything it started (its process group on
// Unix, its job on Windows), at once. It may be called after the exit, to
// end what the child left behind.
func (p *Process) Kill(context.Context) error { return p.signal(syscall.SIGKILL) }

// Wait waits for the child to exit, or for ctx to end.
func (p *Process) Wait(ctx context.Context) error { return p.exit.Wait(ctx) }

// wait reaps the child, from Start on, then closes this side of the pipe
// and releases what Start holds for it (on Windows, the job: what the
// child started dies with it).
func (p *Process) wait() error {
	err := p.cmd.Wait() // lifetime: the child; from Kill on, its exit
	p.w.Close()
	p.sys.release()
	return err
}
