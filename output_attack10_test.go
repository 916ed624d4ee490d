//go:build unix

package ipybox_test

// Attack 10: the kernel's stream output (internal/kernel/py/boundstreams.py,
// commits 2d433ef and 8d2f5db). The claims attacked:
//   - a flush with nothing buffered and no flush under way returns at once,
//     and ipykernel's 0.5 ms sleep before execute_reply is off, and still no
//     output is lost: ipybox reads a cell's output up to its status: idle;
//   - ipykernel 6's write takes a lean path (str, no echo, the kernel's own
//     process, pid refreshed at os.fork) with the size bound inlined: past
//     1 MiB the IO thread is asked to flush, past 8 MiB the writer waits, and
//     one huge write leaves in messages of at most 2 Mi characters.
// Kernel code is hostile: it may break its own output, but the host must
// not hang past its bounds, hold unbounded memory, or carry the damage into
// a later kernel.

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// attack10Kinds starts one executor per kind of kernel the claims cover: a
// cold one, one forked from a zygote (the pid that the lean write compares
// is refreshed at the fork), one on PyPI's ipykernel 7 (per-parent buffers,
// no lean write) and a sandboxed one when bwrap is there.
func attack10Kinds(t *testing.T) map[string]func(t *testing.T) *ipybox.Executor {
	t.Helper()
	py := testenv.NeedsPython(t)
	var once sync.Once
	var z *ipybox.Zygote
	var zerr error
	kinds := map[string]func(t *testing.T) *ipybox.Executor{
		"cold": func(t *testing.T) *ipybox.Executor { return start(t, nil) },
		"forked": func(t *testing.T) *ipybox.Executor {
			once.Do(func() {
				z, zerr = ipybox.NewZygote(context.Background(), py, nil)
			})
			if zerr != nil {
				t.Fatal(zerr)
			}
			return start(t, &ipybox.Options{Zygote: z})
		},
	}
	t.Cleanup(func() {
		if z != nil {
			z.Close()
		}
	})
	kinds["ipykernel7"] = func(t *testing.T) *ipybox.Executor {
		py7, _ := testenv.PyPIPython(t)
		return start(t, &ipybox.Options{Python: py7})
	}
	if _, err := exec.LookPath("bwrap"); err == nil {
		kinds["sandboxed"] = func(t *testing.T) *ipybox.Executor {
			return start(t, &ipybox.Options{Sandbox: ipybox.DefaultSandbox()})
		}
	}
	return kinds
}

// attack10Stream runs code through Stream and returns the Result and every
// Output event.
func attack10Stream(t *testing.T, ex *ipybox.Executor, code string, opts *ipybox.ExecOptions, timeout time.Duration) (*ipybox.Result, []*ipybox.Output, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var res *ipybox.Result
	var outs []*ipybox.Output
	for ev, err := range ex.Stream(ctx, code, opts) {
		if err != nil {
			return res, outs, err
		}
		switch ev := ev.(type) {
		case *ipybox.Output:
			outs = append(outs, ev)
		case *ipybox.Result:
			res = ev
		}
	}
	return res, outs, nil
}

// attack10Later: ordinary cells after an attack print exactly what they print.
func attack10Later(t *testing.T, ex *ipybox.Executor, n int) {
	t.Helper()
	for i := range n {
		res := run(t, ex, fmt.Sprintf("import sys\nprint('later-%d')\nprint('err-%d', file=sys.stderr)", i, i))
		if want := fmt.Sprintf("later-%d\nerr-%d", i, i); res.Text != want || res.Truncated {
			t.Fatalf("BROKEN: a later cell %d printed %q (truncated %v), want %q", i, res.Text, res.Truncated, want)
		}
	}
}

// TestOutputAttackThreadsAtCellEnd: sixteen threads write numbered lines, half
// to stdout and half to stderr, with no flush, and the cell ends as they
// are joined: the end-of-cell flush races the IO thread's timer flushes,
// the 1 MiB hurry and the 8 MiB wait. Every thread's lines must arrive
// whole and in order before the cell's status: idle.
func TestOutputAttackThreadsAtCellEnd(t *testing.T) {
	t.Parallel()
	const threads, lines = 16, 4000
	code := fmt.Sprintf(`import sys, threading
def w(k):
    s = sys.stderr if k %% 2 else sys.stdout
    for i in range(%d):
        s.write('t%%02d-%%05d %%s\n' %% (k, i, 'x' * (i %% 97)))
ts = [threading.Thread(target=w, args=(k,)) for k in range(%d)]
for x in ts: x.start()
for x in ts: x.join()`, lines, threads)
	for name, mk := range attack10Kinds(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ex := mk(t)
			for cell := range 4 {
				res, outs, err := attack10Stream(t, ex, code, nil, 60*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				next := make([]int, threads)
				for _, o := range outs {
					for _, ln := range strings.Split(strings.TrimSuffix(o.Text, "\n"), "\n") {
						if ln == "" {
							continue
						}
						var k, i int
						if _, err := fmt.Sscanf(ln, "t%02d-%05d", &k, &i); err != nil || k < 0 || k >= threads {
							t.Fatalf("cell %d: a torn line %q", cell, ln)
						}
						if want := map[bool]string{true: "stderr", false: "stdout"}[k%2 == 1]; o.Stream != want {
							t.Fatalf("BROKEN: cell %d: thread %d's line on %s", cell, k, o.Stream)
						}
						if i != next[k] {
							t.Fatalf("BROKEN: cell %d: thread %d: line %d after %d (lost or reordered)", cell, k, i, next[k]-1)
						}
						next[k]++
					}
				}
				for k, n := range next {
					if n != lines {
						t.Errorf("BROKEN: cell %d: thread %d: %d of %d lines arrived before idle (truncated %v)", cell, k, n, lines, res.Truncated)
					}
				}
				t.Logf("cell %d: %d events, %d bytes, all %d lines of %d threads", cell, len(outs), len(res.Text), lines, threads)
			}
			attack10Later(t, ex, 5)
		})
	}
}

// TestOutputAttackFlushedInterleave: stdout and stderr alternate, each write
// flushed. A flush with text buffered must still wait for the IO thread,
// so the order is exact; with nothing buffered it returns at once. (800
// messages a cell: under the IOPub socket's high-water mark of 1000, whose
// drops are TestOutputAttackSlowConsumerDrops's subject.)
func TestOutputAttackFlushedInterleave(t *testing.T) {
	t.Parallel()
	code := `import sys
for i in range(400):
    sys.stdout.write('o%d\n' % i); sys.stdout.flush(); sys.stdout.flush()
    sys.stderr.write('e%d\n' % i); sys.stderr.flush(); sys.stdout.flush()
print('end', end='')`
	var want strings.Builder
	for i := range 400 {
		fmt.Fprintf(&want, "o%d\ne%d\n", i, i)
	}
	want.WriteString("end")
	for name, mk := range attack10Kinds(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ex := mk(t)
			for cell := range 3 {
				res, outs, err := attack10Stream(t, ex, code, nil, 60*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if res.Text != want.String() {
					d := attack10Diff(res.Text, want.String())
					t.Fatalf("BROKEN: cell %d: %d bytes, want %d (truncated %v, %d events); first difference at %d: got %q, want %q", cell, len(res.Text), want.Len(), res.Truncated, len(outs), d, res.Text[max(d-20, 0):], want.String()[max(d-20, 0):])
				}
				for _, o := range outs {
					if (o.Stream == "stdout") != (o.Text[0] == 'o' || o.Text == "end") {
						t.Fatalf("BROKEN: cell %d: %q on %s", cell, o.Text, o.Stream)
					}
				}
				t.Logf("cell %d: exact, %d events", cell, len(outs))
			}
		})
	}
}

func attack10Diff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestOutputAttackNotPlainStr: writes that the lean path must hand to
// ipykernel's own write (a str subclass, one that lies about its class,
// an object that claims to be a str and is not), mixed with plain writes.
// The text and its order must survive; a bad write fails like stock
// ipykernel's (TypeError) and leaves the stream working.
func TestOutputAttackNotPlainStr(t *testing.T) {
	t.Parallel()
	code := `import sys
class S(str):
    def __len__(self): return 10**12
class Liar(str):
    @property
    def __class__(self): return str
for i in range(2000):
    sys.stdout.write(S('s%d\n' % i)); sys.stdout.write('p%d\n' % i); sys.stdout.write(Liar('l%d\n' % i))
sys.stdout.writelines([S('w1\n'), 'w2\n', Liar('w3\n')])
print(S('end'))`
	var want strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&want, "s%d\np%d\nl%d\n", i, i, i)
	}
	want.WriteString("w1\nw2\nw3\nend")
	for name, mk := range attack10Kinds(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ex := mk(t)
			res := run(t, ex, code)
			if res.Text != want.String() {
				t.Fatalf("BROKEN: %d bytes, want %d, first difference at %d", len(res.Text), want.Len(), attack10Diff(res.Text, want.String()))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := ex.Execute(ctx, "import sys\nclass Fake:\n    __class__ = str\nprint('before')\nsys.stdout.write(Fake())", nil)
			t.Logf("a non-str that claims str: %q, %v", res.Text, err)
			if err == nil || !strings.Contains(err.Error(), "TypeError") || res.Text != "before" {
				t.Errorf("want a TypeError after 'before': %q, %v", res.Text, err)
			}
			attack10Later(t, ex, 3)
		})
	}
}

// TestOutputAttackHugeWrites: one print of 150 MB, one of 30 M four-byte
// characters (120 MB of UTF-8) and one of 24 M NULs (each six bytes of
// JSON). Every character must arrive, each stream message at most 2 Mi
// characters, the Result bounded by KeepText, and the host's heap must
// stay far below the output's size.
func TestOutputAttackHugeWrites(t *testing.T) {
	// Not parallel: the heap is measured.
	py7, _ := testenv.PyPIPython(t)
	for _, py := range []string{"", py7} {
		attack10HugeWrites(t, start(t, &ipybox.Options{Python: py}), py)
	}
}

func attack10HugeWrites(t *testing.T, ex *ipybox.Executor, py string) {
	t.Logf("python %q", py)
	for _, tc := range []struct {
		name, code, char string
		n                int
	}{
		{"ascii", "print('x' * 150_000_000, end='')", "x", 150_000_000},
		{"4-byte-big", "print('\\U0001F600' * 30_000_000, end='')", "\U0001F600", 30_000_000},
		{"nul-big", "print('\\0' * 24_000_000, end='')", "\x00", 24_000_000},
	} {
		begin := time.Now()
		chars, biggest, events := 0, 0, 0
		var res *ipybox.Result
		var err error
		peak := peakHeap(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			for ev, e := range ex.Stream(ctx, tc.code, &ipybox.ExecOptions{KeepText: 1 << 20}) {
				if e != nil {
					err = e
					break
				}
				switch ev := ev.(type) {
				case *ipybox.Output:
					c := strings.Count(ev.Text, tc.char)
					if c*len(tc.char) != len(ev.Text) {
						t.Errorf("%s: an event with foreign bytes", tc.name)
					}
					chars += c
					biggest = max(biggest, c)
					events++
				case *ipybox.Result:
					res = ev
				}
			}
			cancel()
		})
		t.Logf("%s: %d chars in %d events (largest %d chars) in %v; host heap peak %d MiB", tc.name, chars, events, biggest, time.Since(begin), peak>>20)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if chars != tc.n || res == nil || res.Truncated {
			t.Errorf("BROKEN: %s: %d of %d characters arrived (result %v)", tc.name, chars, tc.n, res != nil && res.Truncated)
		}
		if biggest > 2<<20 {
			t.Errorf("BROKEN: %s: a stream message of %d characters, over 2 Mi", tc.name, biggest)
		}
		if res != nil && int64(len(res.Text))+res.Omitted < int64(tc.n*len(tc.char)) {
			t.Errorf("%s: the result kept %d and omitted %d bytes", tc.name, len(res.Text), res.Omitted)
		}
		if p := peak; p > 200<<20 {
			t.Errorf("BROKEN: %s: the host's heap reached %d MiB", tc.name, p>>20)
		}
	}
	attack10Later(t, ex, 3)
}

// TestOutputAttackFlushStorm: while the cell prints 10 MB of lines, one thread
// flushes stdout in a loop, another flushes stderr, and a third writes to
// stderr: the quick flush's counter and the chunked send run against each
// other. Then the same with hostile threads that call the inner _flush
// themselves, off the IO thread (kernel code may break its own cell, not a
// later one).
func TestOutputAttackFlushStorm(t *testing.T) {
	t.Parallel()
	polite := `import sys, threading
stop = False
def fl(s):
    while not stop: s.flush()
def er():
    i = 0
    while not stop:
        sys.stderr.write('E%d\n' % i); i += 1
    sys.stderr.write('E-end %d\n' % i)
ts = [threading.Thread(target=fl, args=(sys.stdout,)), threading.Thread(target=fl, args=(sys.stderr,)), threading.Thread(target=er)]
for x in ts: x.start()
line = 'y' * 99 + '\n'
for _ in range(100000):
    sys.stdout.write(line)
stop = True
for x in ts: x.join()`
	hostile := `import sys, threading
stop = False
def fl():
    while not stop: sys.stdout._flush()
ts = [threading.Thread(target=fl) for _ in range(3)]
for x in ts: x.start()
for i in range(100000):
    sys.stdout.write('%d\n' % i)
stop = True
for x in ts: x.join()`
	for name, mk := range attack10Kinds(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ex := mk(t)
			for cell := range 2 {
				_, outs, err := attack10Stream(t, ex, polite, nil, 60*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				var out, errs strings.Builder
				for _, o := range outs {
					if o.Stream == "stdout" {
						out.WriteString(o.Text)
					} else {
						errs.WriteString(o.Text)
					}
				}
				if out.Len() != 100000*100 || strings.Count(out.String(), "\n") != 100000 {
					t.Errorf("BROKEN: cell %d: %d of 10000000 bytes of stdout", cell, out.Len())
				}
				e := strings.Split(strings.TrimSuffix(errs.String(), "\n"), "\n")
				var n int
				if _, err := fmt.Sscanf(e[len(e)-1], "E-end %d", &n); err != nil || len(e) != n+1 {
					t.Errorf("BROKEN: cell %d: stderr has %d lines, last %q", cell, len(e), e[len(e)-1])
				}
				t.Logf("polite cell %d: stdout whole, %d stderr lines, %d events", cell, len(e), len(outs))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			res, err := ex.Execute(ctx, hostile, nil)
			cancel()
			if err != nil {
				t.Fatalf("hostile cell: %v", err)
			}
			t.Logf("hostile cell: %d bytes (of %d), truncated %v", len(res.Text), 588889, res.Truncated)
			attack10Later(t, ex, 20)
		})
	}
}

// TestOutputAttackSwappedStdout: a cell replaces sys.stdout (a StringIO, a
// wrapper, a fresh OutStream of its own) and restores it, or does not.
func TestOutputAttackSwappedStdout(t *testing.T) {
	t.Parallel()
	for name, mk := range attack10Kinds(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ex := mk(t)
			if got := run(t, ex, "import io, sys\nold = sys.stdout\nprint('a')\nsys.stdout = io.StringIO()\nprint('hidden')\nsys.stdout = old\nprint('b')").Text; got != "a\nb" {
				t.Errorf("BROKEN: swapped and restored: %q", got)
			}
			// Swapped away with 3 MB buffered: ipykernel flushes whatever
			// sys.stdout is at the cell's end, so the real stream's text
			// leaves on its 0.2 s timer, after idle (stock ipykernel does
			// the same). It must not land in a later cell.
			got := run(t, ex, "print('x' * 3_000_000, end='')\nsys.stdout = io.StringIO()").Text
			t.Logf("3 MB then swapped away: %d bytes arrived (stock ipykernel: 0 too)", len(got))
			// The cell that restores it prints into the old stream, whose
			// parent is still the swapping cell's (ipykernel sets the
			// parent on whatever sys.stdout is; stock does the same), so
			// its text goes nowhere. The cell after it is whole.
			run(t, ex, "import time\ntime.sleep(0.5)\nsys.stdout = old")
			if got := run(t, ex, "print('b')").Text; got != "b" {
				t.Errorf("BROKEN: the next cell got %d bytes of an earlier cell's text: %.40q", len(got), got)
			}
			// A fresh OutStream on the same IO thread: its text, and the
			// old stream's, before idle.
			got = run(t, ex, "from ipykernel.iostream import OutStream\nmine = OutStream(old.session, old.pub_thread, 'stdout', watchfd=False)\nmine.set_parent(old.parent_header)\nprint('old-' * 300_000, end='')\nsys.stdout = mine\nprint('new-' * 300_000, end='')").Text
			if got != strings.Repeat("old-", 300_000)+strings.Repeat("new-", 300_000) {
				t.Errorf("BROKEN: two OutStreams at the cell's end: %d bytes", len(got))
			}
			run(t, ex, "sys.stdout = old")
			attack10Later(t, ex, 3)
		})
	}
}

// attack10Undo puts ipykernel's own flush back (and its 0.5 ms sleep
// before execute_reply), undoing 2d433ef at run time in one kernel: the
// control for races that stock ipykernel has too.
const attack10Undo = `from ipykernel.iostream import OutStream
from ipykernel.kernelbase import Kernel
f = OutStream.flush
OutStream.flush = dict(zip(f.__code__.co_freevars, f.__closure__))['orig_flush'].cell_contents
Kernel.instance()._execute_sleep = 0.0005`

// TestOutputAttackForkedWriters: a forked child (os.fork with and without a
// flush, multiprocessing, a grandchild, threads in a child) prints and
// exits, and the cell ends as soon as the child is reaped. The child takes
// ipykernel's own write (the lean path's pid is refreshed at the fork),
// which sends over the kernel's pipe to its IO thread. That is a race in
// stock ipykernel too, but its flush waits a round trip through the IO
// thread and sleeps 0.5 ms before the reply; the quick flush does neither,
// so status: idle overtakes the child's text more often, and the host,
// which stops at idle, loses it without a word. The control is the same
// kernel kind with ipykernel's flush put back (attack10Undo).
func TestOutputAttackForkedWriters(t *testing.T) {
	// Not parallel with the other tests: the race is timing-sensitive.
	cases := []struct{ name, code, want string }{
		{"fork", "import os\npid = os.fork()\nif pid == 0:\n    print('child', flush=True)\n    os._exit(0)\nos.waitpid(pid, 0)\nNone", "child"},
		{"fork-noflush", "import os, sys\npid = os.fork()\nif pid == 0:\n    sys.stdout.write('child-nf\\n')\n    os._exit(0)\nos.waitpid(pid, 0)\nNone", "child-nf"},
		{"multiprocessing", "import multiprocessing as mp\np = mp.get_context('fork').Process(target=print, args=('mpchild',))\np.start(); p.join()", "mpchild"},
		{"grandchild", "import os\npid = os.fork()\nif pid == 0:\n    p2 = os.fork()\n    if p2 == 0:\n        print('grandchild', flush=True)\n        os._exit(0)\n    os.waitpid(p2, 0)\n    os._exit(0)\nos.waitpid(pid, 0)\nNone", "grandchild"},
		{"child-threads", "import os, threading, sys\npid = os.fork()\nif pid == 0:\n    ts = [threading.Thread(target=print, args=('ct%d' % k,)) for k in range(4)]\n    [x.start() for x in ts]; [x.join() for x in ts]\n    sys.stdout.flush()\n    os._exit(0)\nos.waitpid(pid, 0)\nNone", "ct0 ct1 ct2 ct3"},
	}
	// The child that writes without a flush loses most often: most rounds
	// go to it.
	rounds := func(name string) int {
		if name == "fork-noflush" {
			return 100
		}
		return 20
	}
	total := 0
	for _, tc := range cases {
		total += rounds(tc.name)
	}
	var mu sync.Mutex
	var lost [2]int
	t.Run("kinds", func(t *testing.T) {
		for name, mk := range attack10Kinds(t) {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				shipped, control := mk(t), mk(t)
				run(t, control, attack10Undo)
				for i, ex := range []*ipybox.Executor{shipped, control} {
					for _, tc := range cases {
						n := 0
						for range rounds(tc.name) {
							res := run(t, ex, tc.code)
							for _, w := range strings.Fields(tc.want) {
								if !strings.Contains(res.Text, w) {
									n++
									if n == 1 {
										t.Logf("%s: got %q, truncated %v", tc.name, res.Text, res.Truncated)
									}
									break
								}
							}
						}
						if n > 0 {
							t.Logf("%s, %s: %d of %d lost", []string{"shipped", "ipykernel's flush"}[i], tc.name, n, rounds(tc.name))
						}
						mu.Lock()
						lost[i] += n
						mu.Unlock()
					}
				}
				// The parent's lean path is intact after all those forks.
				if got := run(t, shipped, "print('p' * 5_000_000, end='')").Text; len(got) != 5_000_000 {
					t.Errorf("BROKEN: the parent after forks: %d bytes", len(got))
				}
			})
		}
	})
	t.Logf("lost in %d of %d cells as shipped, %d with ipykernel's flush", lost[0], total*len(attack10Kinds(t)), lost[1])
	if lost[0] > 2*lost[1]+3 {
		t.Errorf("BROKEN: the quick flush lets status: idle overtake a forked child's output: %d cells lost it silently (Truncated false), %d with ipykernel's own flush in the same kernels", lost[0], lost[1])
	}
}

// TestOutputAttackTamperedState: kernel code sets the patch's own state on the
// stream objects. Values that only switch the quick path off (a negative
// or huge counter, the hurry flag stuck) must leave later cells whole; a
// value that breaks the IO thread's flush (a str counter) may break this
// kernel's output, but the host must return within its bounds, say the
// output may be missing, and a reset must give a kernel that works.
func TestOutputAttackTamperedState(t *testing.T) {
	t.Parallel()
	big := "import sys\nline = 'z' * 99 + '\\n'\nfor _ in range(200000):\n    sys.stdout.write(line)"
	for name, mk := range attack10Kinds(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ex := mk(t)
			for _, tamper := range []string{
				"sys.stdout._ipybox_flushing = -5; sys.stderr._ipybox_flushing = 10**9",
				"sys.stdout._ipybox_hurry = True; sys.stderr._ipybox_hurry = True",
				"sys.stdout._flush_pending = True",
				"sys.stdout._ipybox_rest = 'G' * 5_000_000; sys.stdout._ipybox_off = 0",
			} {
				res := run(t, ex, "import sys\n"+tamper)
				t.Logf("%s: %d bytes", tamper, len(res.Text))
				// Either garbage from the tamper arrives first (its own
				// doing), or not; what the cell prints must be whole.
				res = run(t, ex, big)
				text := strings.TrimLeft(res.Text, "G")
				if len(text) != 200000*100-1 || res.Truncated {
					t.Errorf("BROKEN: after %q a 20 MB cell gave %d bytes (truncated %v)", tamper, len(text), res.Truncated)
				}
				attack10Later(t, ex, 3)
			}
			// A str counter: ipybox's _flush raises in the IO thread, so
			// the events queued behind it wait, and every flush that
			// waits for the IO thread times out (10 s each). That is this
			// kernel's own damage; the host must stop at the cell's
			// Timeout (plus the interrupt's grace and a restart).
			for i, code := range []string{"import sys\nsys.stdout._ipybox_flushing = 'x'\nprint('after')", "print('next')"} {
				res, err := attack10Timed(t, ex, code, 8*time.Second)
				if res != nil {
					t.Logf("str counter, cell %d: %v; %d bytes, truncated %v", i, err, len(res.Text), res.Truncated)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := ex.Reset(ctx); err != nil {
				t.Fatalf("reset: %v", err)
			}
			attack10Later(t, ex, 5)
		})
	}
}

// attack10Timed runs a cell with ExecOptions.Timeout and fails when the
// host takes longer than the timeout, the interrupt's grace
// (defaults.InterruptGrace, 3 s) and a kernel restart allow.
func attack10Timed(t *testing.T, ex *ipybox.Executor, code string, timeout time.Duration) (*ipybox.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	begin := time.Now()
	res, err := ex.Execute(ctx, code, &ipybox.ExecOptions{Timeout: timeout})
	took := time.Since(begin)
	t.Logf("%.40q: %v after %v", code, err, took)
	if bound := timeout + 3*time.Second + 20*time.Second; took > bound {
		t.Errorf("BROKEN: the host took %v, past the cell's timeout %v and the interrupt's grace", took, timeout)
	}
	return res, err
}

// TestOutputAttackBlockedIOThread: kernel code parks ipykernel's IO thread
// (every stream message and status waits for it), then prints: a little
// (the end-of-cell flush waits its 10 s, the status never comes), and past
// the 8 MiB bound (each write then waits 10 s for a flush that cannot
// happen). The host must return within the cell's timeout, say when the
// status did not come, and a reset must give a working kernel.
func TestOutputAttackBlockedIOThread(t *testing.T) {
	t.Parallel()
	for name, mk := range attack10Kinds(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ex := mk(t)
			res, err := attack10Timed(t, ex, "import sys, time\nsys.stdout.pub_thread.schedule(lambda: time.sleep(3600))\nprint('a')", 20*time.Second)
			if err == nil && (res == nil || !res.Truncated) {
				t.Errorf("BROKEN: the cell's output and status never came and the result does not say so: %+v", res)
			} else if res != nil {
				t.Logf("small: %q, truncated %v", res.Text, res.Truncated)
			}
			res, err = attack10Timed(t, ex, "import sys, time\nsys.stdout.pub_thread.schedule(lambda: time.sleep(3600))\nfor i in range(4):\n    sys.stdout.write('w' * (5 << 20))", 8*time.Second)
			if res != nil {
				t.Logf("past 8 MiB: %v, %d bytes, truncated %v", err, len(res.Text), res.Truncated)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := ex.Reset(ctx); err != nil {
				t.Fatalf("reset: %v", err)
			}
			attack10Later(t, ex, 3)
		})
	}
}

// TestOutputAttackOutlivingThread: a thread keeps printing numbered lines
// after its cell ended, through the next cells. What it prints after a
// cell's idle may go to the next cell or nowhere (stock ipykernel does the
// same); but no line may arrive twice or out of order, and a cell's own
// print must arrive.
func TestOutputAttackOutlivingThread(t *testing.T) {
	t.Parallel()
	for name, mk := range attack10Kinds(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ex := mk(t)
			run(t, ex, "import sys, threading, time\nstop = False\ndef w():\n    i = 0\n    while not stop:\n        sys.stdout.write('L%d\\n' % i); i += 1\n        if i % 50 == 0: time.sleep(0.001)\nth = threading.Thread(target=w, daemon=True)\nth.start()")
			last, seen := -1, 0
			for cell := range 15 {
				res := run(t, ex, fmt.Sprintf("time.sleep(0.05)\nprint('own-%d')", cell))
				if !strings.Contains(res.Text, fmt.Sprintf("own-%d", cell)) {
					t.Errorf("BROKEN: cell %d lost its own print", cell)
				}
				for _, ln := range strings.Split(res.Text, "\n") {
					var i int
					if _, err := fmt.Sscanf(ln, "L%d", &i); err != nil {
						continue
					}
					if i <= last {
						t.Fatalf("BROKEN: line L%d after L%d: duplicated or reordered", i, last)
					}
					last = i
					seen++
				}
			}
			run(t, ex, "stop = True\nth.join()")
			t.Logf("%d of %d lines of the outliving thread reached a cell", seen, last+1)
			attack10Later(t, ex, 3)
		})
	}
}

// TestOutputAttackSlowConsumerDrops: the application reading Stream stalls
// for 3 s at the first event (a slow client, a full pipe to an MCP peer),
// while the cell writes 4000 lines of 20 KB, each flushed, then rests and
// prints "end". The host holds back its reading (guard.go: a kernel that
// sends faster "waits (the kernel's own queue fills)"), but ipykernel's
// IOPub socket is a PUB with the default high-water mark of 1000
// messages: it does not wait, it drops. The status: idle, sent after the
// rest, gets through, so the Result is not marked Truncated and "end" is
// there, with lines missing in the middle, against ExecOptions.KeepText's
// "every output still reaches OnEvent". Not the two commits' doing; the
// control, the same kernel with its IOPub SNDHWM set to 0 at run time,
// loses nothing.
func TestOutputAttackSlowConsumerDrops(t *testing.T) {
	t.Parallel()
	hwm0 := "import sys, zmq, time\nsock = sys.stdout.pub_thread.socket\nsys.stdout.pub_thread.schedule(lambda: sock.setsockopt(zmq.SNDHWM, 0))\ntime.sleep(0.2)"
	code := "import sys, time\nfor i in range(4000):\n    sys.stdout.write('%05d' % i + 'q' * 20000 + '\\n'); sys.stdout.flush()\ntime.sleep(4)\nprint('end', end='')"
	for _, variant := range []string{"shipped", "SNDHWM 0"} {
		t.Run(variant, func(t *testing.T) {
			t.Parallel()
			ex := start(t, nil)
			if variant != "shipped" {
				run(t, ex, hwm0)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			lines, first := 0, true
			var res *ipybox.Result
			for ev, err := range ex.Stream(ctx, code, nil) {
				if err != nil {
					t.Fatal(err)
				}
				switch ev := ev.(type) {
				case *ipybox.Output:
					if first {
						time.Sleep(3 * time.Second) // bound: the test's own stall
						first = false
					}
					lines += strings.Count(ev.Text, "\n")
				case *ipybox.Result:
					res = ev
				}
			}
			if res == nil {
				t.Fatal("no Result")
			}
			t.Logf("%s: %d of 4000 lines streamed; truncated %v, ends with end %v", variant, lines, res.Truncated, strings.HasSuffix(res.Text, "end"))
			if lines != 4000 && !res.Truncated {
				t.Errorf("BROKEN (%s): %d of 4000 lines reached the Stream consumer, and the Result is not marked Truncated: the kernel's PUB socket dropped them at its high-water mark while the host held back", variant, lines)
			}
		})
	}
}

// TestOutputAttackLeanPathPid: the lean write compares a pid that os.fork
// refreshes. In every kind of ipykernel 6 kernel (cold, forked from the
// zygote, sandboxed, forked into a sandbox) it must equal the kernel's own
// pid and OutStream's _master_pid, so the kernel takes the lean path; in a
// forked child it must be the child's, so the child takes ipykernel's.
func TestOutputAttackLeanPathPid(t *testing.T) {
	t.Parallel()
	kinds := attack10Kinds(t)
	delete(kinds, "ipykernel7") // no lean write there
	if _, err := exec.LookPath("bwrap"); err == nil {
		kinds["sandboxed-forked"] = func(t *testing.T) *ipybox.Executor {
			return start(t, &ipybox.Options{Sandbox: ipybox.DefaultSandbox(), Zygote: sandboxZygote(t, "")})
		}
	}
	code := `import os, sys
cell = dict(zip(type(sys.stdout).write.__code__.co_freevars, type(sys.stdout).write.__closure__))['pid']
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(w, b'%d %d' % (cell.cell_contents[0], os.getpid()))
    os._exit(0)
os.waitpid(pid, 0)
child = os.read(r, 100).decode()
print(cell.cell_contents[0] == os.getpid() == sys.stdout._master_pid == sys.stderr._master_pid, len(set(child.split())) == 1 and child.split()[0] != str(os.getpid()))`
	for name, mk := range kinds {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ex := mk(t)
			got := run(t, ex, code).Text
			t.Logf("kernel pid matches, child pid matches: %s", got)
			if got != "True True" {
				t.Errorf("BROKEN: the lean write's pid is stale: %q", got)
			}
		})
	}
}
