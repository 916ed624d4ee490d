package seccomp

import (
	"fmt"
	"os/exec"
	"sync"
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
	forker.reqs <- forkRequest{cmd, done}
	return <-done // bound: cmd.Start returns once the child has exec'd or failed
}

// startForker restricts a fresh thread and serves start requests on it,
// forever.
func startForker() {
	prog, err := Program(Options{})
	if err != nil {
		forker.err = err
		return
	}
	ready := make(chan error, 1)
	forker.reqs = make(chan forkRequest)
	onRetiredThread(func() {
		if _, err := restrict(StartOptions{}, prog); err != nil {
			ready <- fmt.Errorf("seccomp: restrict the forker thread: %w", err)
			return
		}
		ready <- nil
		forkerLoop()
	})
	forker.err = <-ready
}

// forkerLoop is the forker thread's life: it never returns, so that the
// thread never ends (see StartShared).
func forkerLoop() {
	for r := range forker.reqs {
		r.done <- r.cmd.Start()
	}
}

