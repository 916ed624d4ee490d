//go:build unix

package mcpserver

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv"
)

// TestRunCmdIgnoresHeldOutput: a helper that exits while a child it
// started in a session of its own keeps the output pipe does not hold
// runCmd, and its exit status is what runCmd returns.
func TestRunCmdIgnoresHeldOutput(t *testing.T) {
	t.Parallel()
	setsid := testenv.NeedsTool(t, "setsid")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	out, err := runCmd(ctx, exec.Command("/bin/sh", "-c", setsid+" sleep 30 & echo $!"))
	d := time.Since(start)
	if pid, perr := strconv.Atoi(strings.TrimSpace(string(out))); perr == nil {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if err != nil {
		t.Errorf("runCmd: %v, want the helper's success", err)
	}
	if d > 10*time.Second {
		t.Errorf("runCmd took %v, held by a pipe the helper no longer has", d)
	}
}
