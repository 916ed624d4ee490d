//go:build linux

package kernel_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
)

// TestAttackZygoteBrokenPipe: a kernel forked by the (unsandboxed) fork
// server survives a write to a pipe or socket whose peer closed it, as a
// cold-started one does: the write raises BrokenPipeError. The fork
// server's child had reset SIGPIPE to its default, so the write killed
// the kernel (a web server that closes a connection ended the session).
func TestAttackZygoteBrokenPipe(t *testing.T) {
	z, py := startZygote(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := `
import os, signal, socket
a, b = socket.socketpair()
b.close()
try:
    a.send(b"x"); print("sent")
except BrokenPipeError:
    print("socket: BrokenPipeError")
r, w = os.pipe()
os.close(r)
try:
    os.write(w, b"x"); print("written")
except BrokenPipeError:
    print("pipe: BrokenPipeError")
print("SIGPIPE", signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN, "SIGXFSZ", signal.getsignal(signal.SIGXFSZ) == signal.SIG_IGN)
`
	for _, l := range []kernel.Launcher{nil, z} {
		k, err := kernel.Start(ctx, &kernel.Options{Python: py, Dir: t.TempDir(), Launcher: l})
		if err != nil {
			t.Fatal(err)
		}
		res, err := k.Execute(ctx, code, nil)
		k.Close()
		if err != nil {
			t.Fatalf("forked %v: the kernel died of a broken pipe: %v", l != nil, err)
		}
		for _, w := range []string{"socket: BrokenPipeError", "pipe: BrokenPipeError", "SIGPIPE True SIGXFSZ True"} {
			if !strings.Contains(res.Text, w) {
				t.Errorf("forked %v: want %q in %q", l != nil, w, res.Text)
			}
		}
	}
}

// TestAttackZygoteTraceMe: kernel code makes the fork server its tracer
// (PTRACE_TRACEME; the fork server is the kernel's parent) and stops. The
// fork server reported the stop as the kernel's exit: the host took the
// live kernel for dead. Now the stop is no exit: a helper continues the
// kernel, which answers the next cell as the same process.
func TestAttackZygoteTraceMe(t *testing.T) {
	z, py := startZygote(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k, err := kernel.Start(ctx, &kernel.Options{Python: py, Dir: t.TempDir(), Launcher: z})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	pid := k.Pid()
	res, err := k.Execute(ctx, `
import ctypes, os, signal, time
libc = ctypes.CDLL(None, use_errno=True)
print("traceme", libc.ptrace(ctypes.c_long(0), ctypes.c_long(0), None, None))
me = os.getpid()
if os.fork() == 0:
    time.sleep(1); os.kill(me, signal.SIGCONT); os._exit(0)
os.kill(me, signal.SIGSTOP)
time.sleep(0.5)
print("resumed")
`, nil)
	if err != nil || !strings.Contains(res.Text, "resumed") {
		t.Fatalf("the cell that stopped its kernel: %v %v", res, err)
	}
	res, err = k.Execute(ctx, "print('alive')", nil)
	if err != nil || !strings.Contains(res.Text, "alive") || k.Pid() != pid {
		t.Errorf("after the stop: %v %v (pid %d, was %d): want the same kernel, alive", res, err, k.Pid(), pid)
	}
}
