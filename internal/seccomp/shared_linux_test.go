package seccomp

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv/ci"
)

// pdeathChildren starts n children with a parent-death signal, each from
// a goroutine locked to its thread for the fork, then unlocked: the
// threads go back to the pool, each the parent of one child, as the
// threads of a busy ipybox are (a sandbox's bwrap, a stdio MCP server).
func pdeathChildren(t *testing.T, n int) []*exec.Cmd {
	t.Helper()
	var cmds []*exec.Cmd
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cmd := exec.Command("sleep", "60")
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			cmds = append(cmds, cmd)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond) // hold the thread, so that each child gets its own
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	})
	return cmds
}

// killedChildren counts the children that a signal ended.
func killedChildren(cmds []*exec.Cmd) int {
	n := 0
	for _, c := range cmds {
		var ws syscall.WaitStatus
		pid, _ := syscall.Wait4(c.Process.Pid, &ws, syscall.WNOHANG, nil)
		if pid == c.Process.Pid && ws.Signaled() {
			n++
		}
	}
	return n
}

// TestStartSharedKeepsOthersChildren: StartShared ends no thread, so the
// children that other goroutines started with a parent-death signal live
// on, however many programs it starts. Start, which retires a thread per
// program, kills them: that is the control, which shows that the test can
// fail.
func TestStartSharedKeepsOthersChildren(t *testing.T) {
	if !Supported() {
		ci.Missing(t, "seccomp with user notification (Linux 5.14 or newer)")
	}
	starts := func(start func(*exec.Cmd) error) {
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				cmd := exec.Command("true")
				if err := start(cmd); err != nil {
					t.Error(err)
					return
				}
				cmd.Wait()
			})
		}
		wg.Wait()
		time.Sleep(100 * time.Millisecond) // the parent-death signals, if any, arrive
	}

	kids := pdeathChildren(t, 8)
	starts(StartShared)
	if n := killedChildren(kids); n > 0 {
		t.Errorf("%d of %d children with a parent-death signal died while StartShared started programs", n, len(kids))
	}

	for attempt := 1; ; attempt++ {
		kids = pdeathChildren(t, 8)
		starts(func(cmd *exec.Cmd) error { return Start(cmd, StartOptions{}) })
		n := killedChildren(kids)
		t.Logf("control: %d of %d children died while Start retired its threads", n, len(kids))
		if n > 0 {
			break
		}
		if attempt == 3 {
			t.Error("control: Start killed no child in 3 rounds; the test cannot tell the two apart")
			break
		}
	}
}
