package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/testenv"
)

// TestMCPClaudeCodeStop stops a stdio ipybox mcp with a sandboxed, idle
// kernel the way Claude Code stops a server: SIGINT, SIGTERM 0.1 s later,
// SIGKILL 0.5 s after the SIGINT. ipybox must be gone before the SIGKILL
// would come (the target is 300 ms), leave no process it started, and
// leave the workspace with nothing in it but what the cell made and
// ipybox's own .ipybox folder. SIGKILL at once must leave no process and
// nothing in the workspace either, and so must SIGTERM alone, within the
// same 300 ms.
func TestMCPClaudeCodeStop(t *testing.T) {
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	for _, how := range []string{"claude-code", "sigterm", "sigkill"} {
		t.Run(how, func(t *testing.T) {
			ws := t.TempDir()
			if err := os.Mkdir(filepath.Join(ws, ".git"), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "mcp", "--workspace", ws, "--pool", "0")
			// A -race binary sleeps 1 s at exit (the race runtime's
			// atexit_sleep_ms), which is not ipybox's time to exit.
			cmd.Env = append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1", "GORACE=atexit_sleep_ms=0")
			cs := goClient(t, &mcp.CommandTransport{Command: cmd}, nil)
			runCell(t, cs, "open('made.txt', 'w').write('x')")
			procs := descendants(cmd.Process.Pid)
			if len(procs) < 2 {
				t.Fatalf("want a sandbox and its kernel, got processes %v", procs)
			}
			exited := make(chan time.Time, 1)
			go func() { cmd.Process.Wait(); exited <- time.Now() }()
			t0 := time.Now()
			// The signals, each at its time after the first; SIGKILL last.
			steps := map[string][]stopStep{
				"claude-code": {{syscall.SIGINT, 0}, {syscall.SIGTERM, 100 * time.Millisecond}, {syscall.SIGKILL, 500 * time.Millisecond}},
				"sigterm":     {{syscall.SIGTERM, 0}, {syscall.SIGKILL, 500 * time.Millisecond}},
				"sigkill":     {{syscall.SIGKILL, 0}},
			}[how]
			gone, killed := stopWith(cmd.Process, exited, t0, steps)
			if how != "sigkill" {
				if killed {
					t.Errorf("ipybox mcp was still running 0.5 s after %v, and was killed", steps[0].sig)
				}
				t.Logf("exited %v after %v (target 300 ms)", gone.Round(time.Millisecond), steps[0].sig)
				if gone > 300*time.Millisecond {
					t.Errorf("exited %v after %v; want under 300 ms", gone.Round(time.Millisecond), steps[0].sig)
				}
			}
			checkGone(t, procs)
			var got []string
			filepath.Walk(ws, func(p string, _ os.FileInfo, err error) error {
				if rel, _ := filepath.Rel(ws, p); err == nil && rel != "." && !strings.HasPrefix(rel, ".ipybox/") {
					got = append(got, rel)
				}
				return nil
			})
			if want := []string{".git", ".ipybox", "made.txt"}; !slices.Equal(got, want) {
				t.Errorf("the workspace holds %q; want %q", got, want)
			}
			cs.Close()
		})
	}
}

// stopStep is a signal a client sends at a time after its first one.
type stopStep struct {
	sig syscall.Signal
	at  time.Duration
}

// stopWith sends the steps' signals to p until it exits (exited gets the
// time); it returns how long after t0 p exited, and whether it took the
// last step, a SIGKILL, to end it.
func stopWith(p *os.Process, exited <-chan time.Time, t0 time.Time, steps []stopStep) (gone time.Duration, killed bool) {
	for i, st := range steps {
		if wait := time.Until(t0.Add(st.at)); wait > 0 {
			select {
			case at := <-exited:
				return at.Sub(t0), false
			case <-time.After(wait):
			}
		}
		p.Signal(st.sig)
		if i == len(steps)-1 {
			at := <-exited // bound: the last step is SIGKILL
			return at.Sub(t0), st.sig == syscall.SIGKILL && i > 0
		}
	}
	return 0, false
}
