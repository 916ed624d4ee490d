package ipybox_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
)

// TestRedteamKillTheGuard: the guard lives in the sandbox's init (pid 1),
// which kernel code can signal (Landlock, which would stop that, is off by
// default). Each signal that the Go runtime turns into an exit kills the
// init; then the pid namespace goes, with the kernel: the next cell gets a
// new sandbox, and protected names are still refused. It fails if, after
// any signal, a cell can make .git (the guard gone, writes free).
func TestRedteamKillTheGuard(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws})
	for _, sig := range []string{"SIGQUIT", "SIGTERM", "SIGUSR1", "SIGHUP", "SIGPIPE", "SIGSTOP", "SIGTSTP", "SIGCHLD", "SIGSEGV", "SIGABRT", "SIGSYS", "SIGURG"} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		res, err := ex.Execute(ctx, `import os, signal, time, threading
os.kill(1, signal.`+sig+`)
time.sleep(0.3)
try:
    os.mkdir(".git"); print("MADE")
except OSError as e:
    print("refused", e.strerror)`, nil)
		cancel()
		if err == nil && strings.Contains(res.Text, "MADE") {
			t.Errorf("%s to the init: the guard no longer refuses .git", sig)
		}
		got := run(t, ex, "import os\ntry:\n    os.mkdir('.git'); print('MADE')\nexcept OSError as e:\n    print('refused', e.strerror)").Text
		if strings.Contains(got, "MADE") {
			t.Errorf("after %s to the init, the next cell made .git", sig)
		}
		if _, err := os.Stat(filepath.Join(ws, ".git")); err == nil {
			t.Fatalf("after %s: .git exists", sig)
		}
	}
}

// TestRedteamBlockTheGuard: the guard opens files for the kernel itself, so
// an open of a FIFO for writing, with no reader, blocks the guard worker
// that took it. 64 threads doing that block every worker, and every later
// guarded call of the kernel waits (fail closed, a denial of the kernel's
// own service). The host must still get its kernel back: a Reset, and the
// next cell, within a bound.
func TestRedteamBlockTheGuard(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws})
	run(t, ex, `import os, threading
for i in range(64):
    os.mkfifo("f%d" % i)
def w(i):
    try:
        os.open("f%d" % i, os.O_WRONLY)
    except OSError:
        pass
for i in range(64):
    threading.Thread(target=w, args=(i,), daemon=True).start()`)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err := ex.Execute(ctx, "import os\nos.mkdir('.git')", nil)
	cancel()
	t.Logf("a guarded call with every worker blocked: %v", err)
	if _, err := os.Stat(filepath.Join(ws, ".git")); err == nil {
		t.Fatal(".git was made while the guard was blocked")
	}
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := ex.Reset(ctx); err != nil {
		t.Fatalf("Reset with a blocked guard: %v", err)
	}
	if got := run(t, ex, "open('after.txt', 'w').write('x')\nprint('ok')").Text; !strings.Contains(got, "ok") {
		t.Errorf("the next kernel: %q", got)
	}
	t.Logf("Reset and a cell took %v", time.Since(start))
}
