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
			var gone time.Duration
			switch how {
			case "sigkill":
				cmd.Process.Signal(syscall.SIGKILL)
				<-exited
			case "sigterm":
				cmd.Process.Signal(syscall.SIGTERM)
				select {
				case at := <-exited:
					gone = at.Sub(t0)
				case <-time.After(500 * time.Millisecond):
					cmd.Process.Signal(syscall.SIGKILL)
					<-exited
					t.Errorf("ipybox mcp was still running 0.5 s after SIGTERM, and was killed")
				}
				t.Logf("exited %v after SIGTERM (target 300 ms)", gone.Round(time.Millisecond))
				if gone > 300*time.Millisecond {
					t.Errorf("exited %v after SIGTERM; want under 300 ms", gone.Round(time.Millisecond))
				}
			default:
				cmd.Process.Signal(syscall.SIGINT)
				select {
				case at := <-exited:
					gone = at.Sub(t0)
				case <-time.After(100 * time.Millisecond):
					cmd.Process.Signal(syscall.SIGTERM)
					select {
					case at := <-exited:
						gone = at.Sub(t0)
					case <-time.After(400 * time.Millisecond):
						cmd.Process.Signal(syscall.SIGKILL)
						<-exited
						t.Errorf("ipybox mcp was still running 0.5 s after SIGINT, and was killed")
					}
				}
				t.Logf("exited %v after SIGINT (target 300 ms)", gone.Round(time.Millisecond))
				if gone > 300*time.Millisecond {
					t.Errorf("exited %v after SIGINT; want under 300 ms", gone.Round(time.Millisecond))
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
