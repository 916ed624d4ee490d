package seccomp

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// GuardMain runs a program under the filter and a guard, as a container's
// first program of ipybox's own: "POLICY -- PROGRAM ARGS..." where
// POLICY is a Policy in JSON. It forwards the signals it gets to the
// program, and returns its exit status (128+n for a signal n), or 125
// when the program could not start. It makes itself non-dumpable first,
// so that the program (same uid) cannot trace it or read its descriptors.
func GuardMain(args []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "ipybox guard: "+format+"\n", a...)
		return 125
	}
	if len(args) < 3 || args[1] != "--" {
		return fail("want POLICY -- PROGRAM [ARGS...] (this command is internal to ipybox)")
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail("prctl(PR_SET_DUMPABLE): %v", err)
	}
	var pol Policy
	if err := json.Unmarshal([]byte(args[0]), &pol); err != nil {
		return fail("bad policy: %v", err)
	}
	path, err := exec.LookPath(args[2])
	if err != nil {
		return fail("%v", err)
	}
	cmd := &exec.Cmd{Path: path, Args: args[2:], Env: os.Environ(), Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	err = Start(cmd, StartOptions{
		Filter: Options{Guard: true},
		Guard:  &pol,
		Log:    func(msg string) { fmt.Fprintf(os.Stderr, "ipybox %s\n", msg) },
	})
	if err != nil {
		return fail("start %s: %v", args[2], err)
	}
	go func() {
		for sig := range sigs { // lifetime: this process
			cmd.Process.Signal(sig)
		}
	}()
	err = cmd.Wait() // lifetime: the guarded program
	if ee, ok := err.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	if err != nil {
		return fail("%v", err)
	}
	return 0
}
