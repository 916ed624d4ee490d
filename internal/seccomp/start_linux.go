package seccomp

import (
	"fmt"
	"os/exec"
	"runtime"

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
}

// Start starts cmd with no_new_privs and the filter applied to it alone,
// and, with a guard, serves the guard until cmd and what it started have
// exited. No_new_privs, Landlock and seccomp filters belong to a thread,
// and a child inherits those of the thread that forked it: so a goroutine
// locks itself to a fresh thread, restricts it, starts cmd from it, and
// ends without unlocking, which retires the thread. The caller's other
// threads stay unrestricted (Go creates new threads from its template
// thread while a goroutine is locked, never from a locked one).
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
		ready <- restricted{l, err}
		if err != nil || !<-proceed {
			return
		}
		// The guard already serves: cmd.Start's own calls (opening
		// /dev/null for writing) reach it too.
		started <- cmd.Start()
	})
	r := <-ready
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
	proceed <- true
	return <-started
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
		<-done
		runtime.UnlockOSThread()
	}()
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
