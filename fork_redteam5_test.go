//go:build linux

package ipybox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestRedteam5ForkApprovals: an answer remembered "for the session" is
// the session's, and a fork is a session of its own: it is asked again
// (nothing its source was granted carries over), and its audit rows name
// its own session. A rewind keeps the session, and its remembered
// answers with it.
func TestRedteam5ForkApprovals(t *testing.T) {
	p, _, log := newPolicy(t, "")
	src := start(t, &ipybox.Options{ApprovalPolicy: p, ApproveShellCommands: true, RewindDepth: 1})
	grant := func(r *ipybox.ApprovalRequest) {
		if err := r.Answer(ipybox.Answer{Accept: true, Remember: ipybox.RememberSession, By: "person", Channel: "test"}); err != nil {
			t.Errorf("Answer: %v", err)
		}
	}
	refuse := func(r *ipybox.ApprovalRequest) { r.Reject("not granted here") }
	if reqs, _, err := collect(t, src, "!echo granted", nil, grant); err != nil || len(reqs) != 1 {
		t.Fatalf("the source's first command: %v, %d requests", err, len(reqs))
	}
	if reqs, ev, err := collect(t, src, "!echo granted", nil, refuse); err != nil || len(reqs) != 0 || !strings.Contains(resultText(ev), "granted") {
		t.Fatalf("the source's remembered answer: %v, %d requests, %q", err, len(reqs), resultText(ev))
	}
	forks, err := src.Fork(t.Context(), 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forks {
		defer f.Close()
	}
	for i, f := range forks {
		// Refused, the command raises in the cell (the Stream's error).
		reqs, ev, err := collect(t, f, "!echo granted", nil, refuse)
		if len(reqs) != 1 || err == nil || !strings.Contains(err.Error(), "not granted here") {
			t.Errorf("fork %d ran the source's granted command without being asked: %d requests, %v, %q", i, len(reqs), err, resultText(ev))
		}
		if f.SessionID() == src.SessionID() {
			t.Errorf("fork %d has its source's session id %s", i, f.SessionID())
		}
	}
	// The source's rewind keeps its session (and what it was granted).
	if _, err := src.Rewind(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if reqs, _, err := collect(t, src, "!echo granted", nil, refuse); err != nil || len(reqs) != 0 {
		t.Errorf("the source after a rewind: %v, %d requests", err, len(reqs))
	}
	sessions := map[string]int{}
	for _, e := range readAudit(t, log) {
		sessions[e.Session]++
	}
	for i, f := range forks {
		if sessions[f.SessionID()] != 1 {
			t.Errorf("fork %d (%s): %d audit rows, want 1 (the refusal): %v", i, f.SessionID(), sessions[f.SessionID()], sessions)
		}
	}
}

// TestRedteam5ForkPid: more pids that kernel code in the source can make
// its fork cell report (TestAttackForkPid has the host's, pid 1, non-pids
// and a child that leads no group). A thread of the kernel, a child that
// exited and was reaped, a zombie that leads its own group, a process of
// another user that leads its group: each fails at once and the source
// keeps working. A child that leads a group of its own (setsid) is
// adopted, as docs/fork.md says (a process of the same user, which that
// code could signal anyway): the fork fails within its InitTimeout, and
// the source keeps working.
func TestRedteam5ForkPid(t *testing.T) {
	src := start(t, &ipybox.Options{InitTimeout: 8 * time.Second})
	frun(t, src, `import os, subprocess, threading, time, ipybox_runtime._fork as F
from IPython.display import publish_display_data
def lie(pid):
    def request(data):
        publish_display_data({F.REPORT_MIME: {"pid": pid}})
    F.request = request
ev = threading.Event()
th = threading.Thread(target=ev.wait, daemon=True); th.start()
tid = th.native_id
gone = subprocess.Popen(["true"]); gone.wait()
zombie = subprocess.Popen(["true"], start_new_session=True)
while open(f"/proc/{zombie.pid}/stat").read().split(")")[1].split()[0] != "Z": time.sleep(0.01)
leader = subprocess.Popen(["sleep", "120"], start_new_session=True)
def other_user():
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) <= 1: continue
        try:
            st = os.stat("/proc/" + d)
            f = open(f"/proc/{d}/stat").read().split(")")[1].split()
        except OSError: continue
        if st.st_uid != os.getuid() and f[2] == d: return int(d)
    return 0`)
	fails := []string{"tid", "gone.pid", "zombie.pid", "2**22 + 7"}
	if other := frun(t, src, "print(other_user())"); other != "0" {
		fails = append(fails, other)
	} else {
		t.Log("no process of another user that leads its group: that variant is not tried")
	}
	for _, pid := range fails {
		frun(t, src, "lie("+pid+")")
		t0 := time.Now()
		if _, err := src.Fork(t.Context(), 1, nil); err == nil {
			t.Errorf("a fork that reported %s was made", pid)
		} else if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("the refusal of %s took %v: it was adopted and waited for (%v)", pid, d, err)
		}
		if got := frun(t, src, "print(1 + 1)"); got != "2" {
			t.Fatalf("the source after %s: %q", pid, got)
		}
	}
	frun(t, src, "lie(leader.pid)")
	t0 := time.Now()
	if _, err := src.Fork(t.Context(), 1, nil); err == nil {
		t.Errorf("a fork that reported a sleep was made")
	} else {
		t.Logf("a sleep leading its own group, reported as the fork: %v after %v; its state now: %s", err, time.Since(t0).Round(time.Millisecond), frun(t, src, "print(leader.poll())"))
	}
	if d := time.Since(t0); d > 30*time.Second {
		t.Errorf("the fork that adopted a sleep took %v, past its InitTimeout", d)
	}
	if got := frun(t, src, "print(1 + 1)"); got != "2" {
		t.Fatalf("the source after the sleep: %q", got)
	}
	frun(t, src, "leader.kill(); ev.set()")
}

// TestRedteam5ForkCarriesSourceToken: kernel code in a sandboxed source
// keeps its tool-server address and token in variables, which the
// snapshot carries into the fork (they are the session's own values). In
// the fork's own sandbox they reach nothing of the source: a tool call
// with them is refused (its own tool server does not take the source's
// token, and the source's socket is not in its view), and the source's
// application is never asked. The fork's own calls are asked of the
// fork's Approver.
func TestRedteam5ForkCarriesSourceToken(t *testing.T) {
	ws := t.TempDir()
	asked := map[string]int{}
	var mu sync.Mutex
	approver := func(who string) func(context.Context, *ipybox.ApprovalRequest) error {
		return func(context.Context, *ipybox.ApprovalRequest) error {
			mu.Lock()
			defer mu.Unlock()
			asked[who]++
			return nil
		}
	}
	o := snapshotOpts(ws, "src")
	o.Approver = approver("source")
	src := startSandboxed(t, o)
	register(t, src, "go", testmcpStdio(t))
	frun(t, src, "import os\nstolen = (os.environ['IPYBOX_TOOL_URL'], os.environ['IPYBOX_TOOL_TOKEN'])")
	forks, err := src.Fork(t.Context(), 1, func(_ int, o *ipybox.Options) error {
		o.Approver = approver("fork")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	f := forks[0]
	defer f.Close()
	call := `from mcptools.go.tool_1 import Params, run
try:
    print("called:", run(Params(s="x")))
except Exception as e:
    print("refused:", type(e).__name__, str(e)[:200])`
	if got := frun(t, f, "print(stolen[1] != os.environ['IPYBOX_TOOL_TOKEN'])"); got != "True" {
		t.Fatalf("the fork's token is its source's: %q", got)
	}
	if got := frun(t, f, call); !strings.HasPrefix(got, "called:") {
		t.Fatalf("the fork's own call: %q", got)
	}
	for _, c := range []string{
		"os.environ['IPYBOX_TOOL_TOKEN'] = stolen[1]",
		"os.environ['IPYBOX_TOOL_URL'], os.environ['IPYBOX_TOOL_TOKEN'] = stolen",
	} {
		got := frun(t, f, c+"\nimport ipybox_runtime\ngetattr(ipybox_runtime, '_pool', {}) and ipybox_runtime._pool.clear()\n"+call)
		if !strings.HasPrefix(got, "refused:") {
			t.Errorf("the fork, with %s: %q", c, got)
		}
		t.Logf("%s: %s", c, got)
	}
	mu.Lock()
	defer mu.Unlock()
	if asked["source"] != 0 || asked["fork"] != 1 {
		t.Errorf("approvals asked: %v; want the fork's own call alone, of the fork's Approver", asked)
	}
}

// TestRedteam5ForkSnapshotFIFO: the host copies a sandboxed source's
// snapshot folder into each fork's, and the source's kernel writes that
// folder. It listed the folder, saw regular files, and opened each to
// read it, blocking: kernel code that watched the copy (inotify) renamed a
// FIFO over a name still to come, and the host's open waited for a writer
// that never came. fork_session then never returned, and held the kernel
// slots it had taken for its forks (one principal's repeated calls take
// every slot of the server). Kept: the copy opens without waiting and
// refuses what is not a regular file, and the fork fails with a message
// while the source keeps working.
func TestRedteam5ForkSnapshotFIFO(t *testing.T) {
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	o := snapshotOpts(ws, "src")
	o.Sandbox = ipybox.DefaultSandbox()
	src := start(t, o)
	snap := src.SnapshotDir()
	const files, target = 9000, "zz08999"
	got := frun(t, src, fmt.Sprintf(`import os, ctypes, struct, threading
SNAP = %q
for i in range(%d):
    open(os.path.join(SNAP, 'zz%%05d' %% i), 'w').close()
os.mkfifo(os.path.join(SNAP, '.fifo'))
libc = ctypes.CDLL(None, use_errno=True)
ifd = libc.inotify_init()
wd = libc.inotify_add_watch(ifd, SNAP.encode(), 0x20)  # IN_OPEN
def swap():
    while True:
        buf = os.read(ifd, 65536)
        off = 0
        while off < len(buf):
            _, _, _, ln = struct.unpack_from('iIII', buf, off)
            name = buf[off + 16:off + 16 + ln].rstrip(b'\0')
            off += 16 + ln
            if name == b'zz00000':
                os.rename(os.path.join(SNAP, '.fifo'), os.path.join(SNAP, %q))
                return
threading.Thread(target=swap, daemon=True).start()
xs = [1, 2, 3]
print(ifd >= 0 and wd >= 0)`, snap, files, target))
	if got != "True" {
		t.Fatalf("the kernel's inotify watch: %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	type result struct {
		forks []*ipybox.Executor
		err   error
	}
	done := make(chan result, 1)
	go func() {
		f, err := src.Fork(ctx, 1, nil)
		done <- result{f, err}
	}()
	fifo := filepath.Join(snap, target)
	isFIFO := func() bool {
		st, err := os.Lstat(fifo)
		return err == nil && st.Mode()&os.ModeNamedPipe != 0
	}
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("Fork did not return")
	case <-waitUntil(ctx, isFIFO):
		select {
		case r = <-done:
		case <-time.After(30 * time.Second):
			// Let the host's open go on, so that the test ends.
			if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
			<-done
			t.Fatal("Fork waited on a FIFO that the source's kernel put in its snapshot folder, past 30 s")
		}
	}
	for _, f := range r.forks {
		f.Close()
	}
	if !isFIFO() {
		t.Fatalf("the kernel's swap did not happen before the copy passed (Fork: %v); the copy of %d files is too fast for this test", r.err, files)
	}
	if r.err == nil || !strings.Contains(r.err.Error(), "not a regular file") {
		t.Fatalf("Fork: %v; want a refusal of what is not a regular file", r.err)
	}
	if got := frun(t, src, "print(xs)"); got != "[1, 2, 3]" {
		t.Fatalf("the source after the refused fork: %q", got)
	}
}

// waitUntil closes its channel once cond holds, polling every 10 ms,
// or never when ctx ends first.
func waitUntil(ctx context.Context, cond func() bool) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for !cond() {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
		close(ch)
	}()
	return ch
}

// TestRedteam5RewindNothingKept: a rewind asked of a session that has
// kept no boundary yet (no cell since its start, or since a rewind took
// the last one) said it "can undo 1 to 0 cells". It says that it can undo
// no cell now, and why.
func TestRedteam5RewindNothingKept(t *testing.T) {
	ex := start(t, &ipybox.Options{RewindDepth: 2})
	ctx := t.Context()
	check := func(when string) {
		t.Helper()
		_, err := ex.Rewind(ctx, 1)
		if err == nil || strings.Contains(err.Error(), "1 to 0") || !strings.Contains(err.Error(), "can undo no cell now") {
			t.Errorf("rewind %s: %v; want it to say that no cell can be undone now", when, err)
		}
	}
	check("before any cell")
	frun(t, ex, "x = 1")
	if _, err := ex.Rewind(ctx, 1); err != nil {
		t.Fatal(err)
	}
	check("after the last boundary was used")
	if got := frun(t, ex, "print('x' in dir())"); got != "False" {
		t.Fatalf("after the rewind: %q", got)
	}
}
