package seccomp

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// StartOptions says how Start restricts the program.
type StartOptions struct {
	// Filter is the filter's configuration. With Filter.Guard, Guard must
	// be set.
	Filter Options
	// Guard is the workspace guard's policy (see Guard).
	Guard *Policy
	// Before runs on the restricted thread after no_new_privs and before
	// the filter (Landlock goes there). Nil: nothing.
	Before func() error
	// Log receives the guard's refusals. Nil: none.
	Log func(string)
	// Rlimits are set on the program before its first instruction: it
	// starts traced, stops at its exec, gets its limits, and goes on.
	// Where ptrace is not allowed (Yama's ptrace_scope 2 or 3), Start
	// fails with ErrNoTrace and sets nothing. Nil: none.
	Rlimits []Rlimit
}

// Rlimit is one resource limit (soft and hard) for the program.
type Rlimit struct {
	Resource int
	Value    uint64
}

// ErrNoTrace is returned by Start when the program could not be started
// traced, to get its Rlimits.
var ErrNoTrace = errors.New("seccomp: the program cannot be started traced to set its resource limits")

// ErrNoLandlock is returned by Start, with a guard, where the kernel has no
// Landlock to keep socket files out of the roots (Linux 5.13, with landlock
// among its security modules).
var ErrNoLandlock = errors.New("seccomp: the kernel has no Landlock, which keeps socket files out of the workspace (Linux 5.13 or newer, with landlock in its lsm= list)")

// Start starts cmd with no_new_privs and the filter applied to it alone,
// and, with a guard, sets the calling process's umask to 0 once cmd runs,
// and, with a guard, serves the guard until cmd and what it started have
// exited. No_new_privs, Landlock and seccomp filters belong to a thread,
// and a child inherits those of the thread that forked it: so a goroutine
// locks itself to a fresh thread, restricts it, starts cmd from it, and
// ends without unlocking, which retires the thread. The caller's other
// threads stay unrestricted (Go creates new threads from its template
// thread while a goroutine is locked, never from a locked one).
//
// Retiring the thread ends the children that other goroutines started
// from it with a parent-death signal: a process that starts such children
// (the host) uses StartShared; Start is for a process that does not (the
// sandbox's init, the container's guard).
func Start(cmd *exec.Cmd, o StartOptions) error {
	if o.Filter.Guard && o.Guard == nil {
		return fmt.Errorf("seccomp: a guard needs a policy")
	}
	prog, err := Program(o.Filter)
	if err != nil {
		return err
	}
	type restricted struct {
		listener int
		err      error
	}
	ready := make(chan restricted, 1)
	proceed := make(chan bool, 1)
	started := make(chan error, 1)
	onRetiredThread(func() {
		l, err := restrict(o, prog)
		ready <- restricted{l, err}   // bound: buffered
		if err != nil || !<-proceed { // bound: Start sends it once the guard serves
			return
		}
		// The guard already serves: cmd.Start's own calls (opening
		// /dev/null for writing) reach it too.
		started <- startLimited(cmd, o.Rlimits) // bound: buffered
	})
	r := <-ready // bound: restrict makes a few system calls
	if r.err != nil {
		return r.err
	}
	if r.listener >= 0 {
		g := NewGuard(r.listener, *o.Guard, o.Log)
		go func() {
			err := g.Serve()
			if err != nil && err != unix.EBADF && o.Log != nil {
				o.Log(fmt.Sprintf("guard: stopped: %v", err))
			}
			unix.Close(r.listener)
		}()
	}
	proceed <- true // bound: buffered
	err = <-started // bound: a start, and a wait for the child's stop at its exec
	if err == nil && r.listener >= 0 {
		// The program inherited the umask; the guard applies the
		// program's own to what it creates (see Guard).
		unix.Umask(0)
	}
	return err
}

// onRetiredThread runs f on a goroutine locked to a thread that is not
// the main one, and never unlocks it, so that the thread (and what f did
// to it) is retired when f returns. The main thread is never retired, and
// its id is the process's: a program's signals to its parent would reach
// it.
func onRetiredThread(f func()) {
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			f()
			return
		}
		// On the main thread: hold it, so that the inner goroutine runs on
		// another.
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread()
			f()
		}()
		<-done // bound: f returns
		runtime.UnlockOSThread()
	}()
}

// startLimited starts cmd; with limits, traced, so that they are set at
// its exec, before the program runs. It runs on the thread that forks: a
// ptrace stop is reported to that thread's process, and only the tracer
// thread may detach.
func startLimited(cmd *exec.Cmd, limits []Rlimit) error {
	if len(limits) == 0 {
		return cmd.Start()
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Ptrace = true
	if err := cmd.Start(); err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
			return fmt.Errorf("%w: %v", ErrNoTrace, err)
		}
		return err
	}
	pid := cmd.Process.Pid
	fail := func(err error) error {
		cmd.Process.Kill()
		cmd.Wait() // bound: killed above
		return err
	}
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, unix.WALL, nil) // bound: the traced child stops at its exec, or dies
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fail(fmt.Errorf("wait for the program's exec: %w", err))
		}
		break
	}
	if !ws.Stopped() {
		return fail(fmt.Errorf("the program did not stop at its exec (status %v)", ws))
	}
	for _, l := range limits {
		if err := unix.Prlimit(pid, l.Resource, &unix.Rlimit{Cur: l.Value, Max: l.Value}, nil); err != nil {
			return fail(fmt.Errorf("set resource limit %d to %d: %w", l.Resource, l.Value, err))
		}
	}
	if err := unix.PtraceDetach(pid); err != nil {
		return fail(fmt.Errorf("ptrace detach: %w", err))
	}
	return nil
}

// restrict runs on the thread that will start the program.
func restrict(o StartOptions, prog []unix.SockFilter) (int, error) {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if o.Before != nil {
		if err := o.Before(); err != nil {
			return -1, err
		}
	}
	if o.Filter.Guard {
		if err := restrictSockets(o.Guard.SocketDirs); err != nil {
			return -1, err
		}
	}
	if !o.Filter.Guard {
		if err := Install(prog); err != nil {
			return -1, fmt.Errorf("seccomp: %w", err)
		}
		return -1, nil
	}
	l, err := InstallListener(prog)
	if err != nil {
		return -1, fmt.Errorf("seccomp: %w", err)
	}
	return l, nil
}
