package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// initCheckReply is what InitMain("check") prints.
const initCheckReply = "ipybox sandbox init"

// initCheckTimeout bounds the check: a program whose main does not
// dispatch InitCommand runs its own main with our arguments, and may not
// stop by itself.
const initCheckTimeout = 5 * time.Second

// initChecked holds the binaries that passed checkInit.
var initChecked sync.Map

// checkInit verifies that bin serves as the sandbox's init, so that a Go
// program that forgot the dispatch in main gets an error that says so,
// not the confusing failure of its own main run with the init's arguments.
//
// A binary that passed is not checked again in this process: the check
// costs a process start (about 10 ms), and every sandbox needs it.
func checkInit(ctx context.Context, bin string) error {
	if _, ok := initChecked.Load(bin); ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, initCheckTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, InitCommand, "check")
	cmd.Env = initEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	err := cmd.Run() // bound: initCheckTimeout, then WaitDelay
	if err == nil && strings.TrimSpace(out.String()) == initCheckReply {
		initChecked.Store(bin, true)
		return nil
	}
	if ctx.Err() != nil && cmd.ProcessState == nil {
		return fmt.Errorf("sandbox: checking the init: %w", ctx.Err())
	}
	return &ProbeError{
		Cause: fmt.Sprintf("%s does not serve as the sandbox's init (run with %q, it did not answer)", bin, InitCommand+" check"),
		Fix: "begin the program's main with: ipybox.SandboxInit() " +
			"(the sandbox starts the program's own binary as its init; see docs/sandbox.md), or set Options.InitBinary",
	}
}
