package ipybox_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestRedteamBareLayoutRace: the guard refuses the name that would
// complete a bare repository's layout (HEAD beside objects/ or refs/),
// judging what is on disk when the call comes. Two callers that each make
// half of the layout at the same moment could each find the other half
// missing. Tried two ways, over many folders: three threads of one kernel
// (one guard, several workers), and two sandboxes of the same workspace
// (two guards), one making HEAD while the other makes objects/ and refs/.
// It fails if any folder ends up with all three (and a config made
// first), which host git takes for a repository.
func TestRedteamBareLayoutRace(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	a := startSandboxed(t, &ipybox.Options{WorkDir: ws})
	b := startSandboxed(t, &ipybox.Options{WorkDir: ws})
	run(t, a, `import os, threading
for i in range(300):
    d = "t%d" % i
    os.mkdir(d)
    open(d + "/config", "w").write("[core]\n")
    bar = threading.Barrier(3)
    def mk(fn):
        bar.wait()
        try:
            fn()
        except OSError:
            pass
    ts = [threading.Thread(target=mk, args=(f,)) for f in (
        lambda: open(d + "/HEAD", "w").write("ref: refs/heads/main\n"),
        lambda: os.mkdir(d + "/objects"),
        lambda: os.mkdir(d + "/refs"))]
    for t in ts: t.start()
    for t in ts: t.join()`)
	const n = 300
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		run(t, a, `import os, time
for i in range(`+strconv.Itoa(n)+`):
    d = "s%d" % i
    while not os.path.exists(d + "/config"):
        pass
    open(d + "/go", "w").close()
    try:
        open(d + "/HEAD", "w").write("ref: refs/heads/main\n")
    except OSError:
        pass`)
	}()
	go func() {
		defer wg.Done()
		run(t, b, `import os
for i in range(`+strconv.Itoa(n)+`):
    d = "s%d" % i
    os.mkdir(d)
    open(d + "/config", "w").write("[core]\n")
    while not os.path.exists(d + "/go"):
        pass
    for x in ("objects", "refs"):
        try:
            os.mkdir(d + "/" + x)
        except OSError:
            pass`)
	}()
	wg.Wait()
	var won []string
	for _, prefix := range []string{"t", "s"} {
		for i := 0; i < n; i++ {
			d := filepath.Join(ws, prefix+strconv.Itoa(i))
			ok := true
			for _, x := range []string{"HEAD", "objects", "refs"} {
				if _, err := os.Lstat(filepath.Join(d, x)); err != nil {
					ok = false
				}
			}
			if ok {
				won = append(won, filepath.Base(d))
			}
		}
	}
	if len(won) > 0 {
		t.Errorf("racing callers completed a bare repository's layout in %s", strings.Join(won, ", "))
	}
}

// TestRedteamSwapRaceIntoHooks: one thread swaps a real folder d with a
// symbolic link s -> sub/.git/hooks (renameat2 RENAME_EXCHANGE, both
// names unprotected), another creates d/pre-commit and s/pre-commit over
// and over, for 10 s: a guard that checked one resolution and then wrote
// by path would put a hook in the nested repository. It fails if the hook
// appears.
func TestRedteamSwapRaceIntoHooks(t *testing.T) {
	t.Parallel()
	git := testenv.NeedsTool(t, "git")
	ws := t.TempDir()
	if out, err := exec.Command(git, "init", "-q", filepath.Join(ws, "sub")).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws})
	got := run(t, ex, `import os, ctypes, threading, time
libc = ctypes.CDLL(None, use_errno=True)
os.makedirs("d", exist_ok=True)
os.symlink("sub/.git/hooks", "s")
stop = False
def flip():
    while not stop:
        libc.renameat2(-100, b"d", -100, b"s", 2)
threading.Thread(target=flip, daemon=True).start()
made = 0
t0 = time.time()
while time.time() - t0 < 10 and not os.path.exists("sub/.git/hooks/pre-commit"):
    for name in ("d/pre-commit", "s/pre-commit"):
        try:
            fd = os.open(name, os.O_CREAT | os.O_WRONLY, 0o755); os.close(fd); made += 1
            os.unlink(name)
        except OSError:
            pass
stop = True
print(made)`).Text
	if _, err := os.Lstat(filepath.Join(ws, "sub", ".git", "hooks", "pre-commit")); err == nil {
		t.Errorf("a racing swap put a hook in sub/.git/hooks (%s creates allowed)", strings.TrimSpace(got))
	}
}
