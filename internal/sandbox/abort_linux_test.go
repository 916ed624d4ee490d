package sandbox

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestAbortedStartsLeaveNothing cancels sandbox starts at every stage of
// the set-up, and kills the ones that started: every Start returns
// promptly, and no process of the sandbox is left. (Killing bwrap in the
// middle of its set-up once orphaned its child, which then waited for it
// forever and held the control socket, so a cancelled Start never
// returned and `ipybox mcp` hung at shutdown.)
func TestAbortedStartsLeaveNothing(t *testing.T) {
	t.Parallel()
	x := newSbx(t, DefaultConfig(), nil)
	marker := "abort-marker-" + randHex(8)
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i)*40*time.Millisecond)
			defer cancel()
			done := make(chan struct{})
			var p kernel.Process
			var err error
			go func() {
				defer close(done)
				p, err = x.Start(ctx, &kernel.Spec{Path: python, Args: []string{"-c", "import time; time.sleep(120)  # " + marker},
					Env: x.env(t), Dir: x.ws, RunDir: x.run, Stdout: io.Discard, Stderr: io.Discard})
			}()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Errorf("start %d: Start did not return within 20s of its context's end", i)
				return
			}
			if err != nil {
				return
			}
			p.Kill(context.Background())
			waitFor(t, p, 20*time.Second)
		}()
	}
	wg.Wait()
	var left []string
	for deadline := time.Now().Add(10 * time.Second); ; {
		left = left[:0]
		for _, p := range testenv.Processes() {
			if strings.Contains(p.Cmdline, marker) || strings.Contains(p.Cmdline, x.privDir) {
				left = append(left, p.Cmdline)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("%d processes of the sandbox left after its starts were cancelled or killed:\n%s", len(left), strings.Join(left, "\n"))
	}
}
