package seccomp

import (
	"fmt"
	"os/exec"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// forker is the one thread of this process that starts programs under
// the plain filter (StartShared).
var forker struct {
	once sync.Once
	reqs chan forkRequest
	err  error
}

type forkRequest struct {
	cmd  *exec.Cmd
	done chan error
}

// StartShared starts cmd with no_new_privs and the plain filter (Options
// zero: no guard, no limits), from one thread that is restricted once and
// lives as long as the process.
//
// Start retires the thread it restricts, and that is wrong for a process
// that starts many programs: Linux sends a child's parent-death signal
// when the *thread* that forked it ends, so a retired thread takes with it
// every child that another goroutine had started from it earlier with
// Pdeathsig, or bwrap's --die-with-parent (a sandbox, an MCP server,
// seemingly at random, under load). The forker thread runs nothing but
// starts, and never ends.
func StartShared(cmd *exec.Cmd) error {
	forker.once.Do(startForker)
	if forker.err != nil {
		return forker.err
	}
	done := make(chan error, 1)
	// bound: the forker takes requests in turn, each a cmd.Start
	forker.reqs <- forkRequest{cmd, done}
	return <-done // bound: cmd.Start returns once the child has exec'd or failed
}

// startForker starts the forker thread and waits until it is restricted.
func startForker() {
	prog, err := Program(Options{})
	if err != nil {
		forker.err = err
		return
	}
	ready := make(chan error, 1)
	forker.reqs = make(chan forkRequest)
	// Any thread will do, the main one too: unlike Start's, this one is
	// never retired, so nothing of it is lost.
	go forkerLoop(prog, ready)
	forker.err = <-ready // bound: restrict makes a few system calls
}

// forkerLoop is the forker thread's life: it restricts its thread, then
// serves starts, and never returns, so that the thread never ends (see
// StartShared).
func forkerLoop(prog []unix.SockFilter, ready chan<- error) {
	runtime.LockOSThread()
	if _, err := restrict(StartOptions{}, prog); err != nil {
		ready <- fmt.Errorf("seccomp: restrict the forker thread: %w", err) // bound: buffered
		// Neither retired (other goroutines may have forked children from
		// this thread before it was locked) nor given back (it may be
		// half restricted): kept, idle.
		select {} // lifetime: the process's
	}
	ready <- nil                 // bound: buffered
	for r := range forker.reqs { // lifetime: the process's
		r.done <- r.cmd.Start() // bound: buffered
	}
}
