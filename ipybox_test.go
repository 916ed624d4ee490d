package ipybox_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

func start(t *testing.T, opts *ipybox.Options) *ipybox.Executor {
	t.Helper()
	py := testenv.NeedsPython(t)
	var o ipybox.Options
	if opts != nil {
		o = *opts
	}
	if o.Python == "" {
		o.Python = py
	}
	if o.WorkDir == "" {
		o.WorkDir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ex, err := ipybox.Start(ctx, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close() })
	return ex
}

func run(t *testing.T, ex *ipybox.Executor, code string) *ipybox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := ex.Execute(ctx, code, nil)
	if err != nil {
		t.Fatalf("Execute(%q): %v", code, err)
	}
	return res
}

func TestOutputs(t *testing.T) {
	t.Parallel()
	ex := start(t, nil)
	for _, tc := range []struct{ code, want string }{
		{"print('hello')", "hello"},
		{"2 + 2", "4"},
		{"x = 1\ny = 2\nx + y", "3"},
		{"z = 10", ""},
		{"", ""},
		{"import sys\nprint('out')\nprint('err', file=sys.stderr)", "out\nerr"},
	} {
		if got := run(t, ex, tc.code).Text; got != tc.want {
			t.Errorf("%q: text = %q, want %q", tc.code, got, tc.want)
		}
	}
}

func TestPythonErrors(t *testing.T) {
	t.Parallel()
	ex := start(t, nil)
	for _, tc := range []struct{ code, name, inTraceback string }{
		{"def f(:\n  pass", "SyntaxError", ""},
		{"def divide():\n    return 1/0\ndivide()", "ZeroDivisionError", "divide"},
		{"def lookup():\n    return undefined_name\nlookup()", "NameError", "lookup"},
	} {
		res, err := ex.Execute(context.Background(), tc.code, nil)
		var pe *ipybox.PythonError
		if !errors.As(err, &pe) {
			t.Fatalf("%q: err = %v, want *PythonError", tc.code, err)
		}
		if pe.Name != tc.name {
			t.Errorf("%q: name = %q, want %q", tc.code, pe.Name, tc.name)
		}
		tb := strings.Join(pe.Traceback, "\n")
		if strings.Contains(tb, "\x1b[") {
			t.Errorf("%q: traceback has ANSI codes: %q", tc.code, tb)
		}
		if tc.inTraceback != "" && !strings.Contains(tb, tc.inTraceback) {
			t.Errorf("%q: traceback does not name %q:\n%s", tc.code, tc.inTraceback, tb)
		}
		if res == nil {
			t.Errorf("%q: no partial result with the error", tc.code)
		}
	}
	// Output before the error is kept.
	res, err := ex.Execute(context.Background(), "print('before')\nraise ValueError('boom')", nil)
	if err == nil || !strings.Contains(err.Error(), "ValueError: boom") {
		t.Fatalf("err = %v", err)
	}
	if res.Text != "before" {
		t.Errorf("text before error = %q", res.Text)
	}
}

func TestStatePersistsAndReset(t *testing.T) {
	t.Parallel()
	ex := start(t, nil)
	run(t, ex, "import math\nv = 41\ndef inc(x):\n    return x + 1")
	if got := run(t, ex, "inc(v), math.floor(2.5)").Text; got != "(42, 2)" {
		t.Fatalf("state: %q", got)
	}
	run(t, ex, "open('kept.txt', 'w').write('data')")
	if err := ex.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"v", "inc", "math"} {
		_, err := ex.Execute(context.Background(), name, nil)
		var pe *ipybox.PythonError
		if !errors.As(err, &pe) || pe.Name != "NameError" {
			t.Errorf("%s after reset: err = %v, want NameError", name, err)
		}
	}
	if got := run(t, ex, "open('kept.txt').read()").Text; got != "'data'" {
		t.Errorf("file after reset: %q", got)
	}
}

func TestExecutorsAreIsolated(t *testing.T) {
	t.Parallel()
	a, b := start(t, nil), start(t, nil)
	run(t, a, "secret = 'a'")
	_, err := b.Execute(context.Background(), "secret", nil)
	var pe *ipybox.PythonError
	if !errors.As(err, &pe) || pe.Name != "NameError" {
		t.Fatalf("b sees a's variable: %v", err)
	}
}

func TestStreamingIsLive(t *testing.T) {
	ex := start(t, nil)
	code := "import time\nprint('first', flush=True)\ntime.sleep(0.5)\nprint('second', flush=True)"
	begin := time.Now()
	var got []string
	var at []time.Duration
	for ev, err := range ex.Stream(context.Background(), code, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if o, ok := ev.(*ipybox.Output); ok {
			got = append(got, strings.TrimSpace(o.Text))
			at = append(at, time.Since(begin))
			if o.Stream != "stdout" {
				t.Errorf("stream = %q", o.Stream)
			}
		}
	}
	if strings.Join(got, ",") != "first,second" {
		t.Fatalf("outputs = %q", got)
	}
	if gap := at[1] - at[0]; gap < 300*time.Millisecond {
		t.Errorf("first arrived %v before second: not streamed as it happened", gap)
	}
}

func TestStreamKeepsStdoutAndStderrApart(t *testing.T) {
	t.Parallel()
	ex := start(t, nil)
	streams := map[string]string{}
	for ev, err := range ex.Stream(context.Background(), "import sys\nprint('o')\nsys.stdout.flush()\nprint('e', file=sys.stderr)", nil) {
		if err != nil {
			t.Fatal(err)
		}
		if o, ok := ev.(*ipybox.Output); ok {
			streams[o.Stream] += o.Text
		}
	}
	if streams["stdout"] != "o\n" || streams["stderr"] != "e\n" {
		t.Errorf("streams = %q", streams)
	}
}

func TestWorkDirRestored(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ex := start(t, &ipybox.Options{WorkDir: dir})
	res := run(t, ex, "import os\nos.chdir('/')")
	want := "[ipybox] cwd reset to " + dir
	if res.Text != want {
		t.Errorf("text = %q, want %q", res.Text, want)
	}
	if got := run(t, ex, "os.getcwd()").Text; got != "'"+dir+"'" {
		t.Errorf("cwd = %s", got)
	}
}

func TestNoWorkDirChangePersists(t *testing.T) {
	py := testenv.NeedsPython(t)
	dir := t.TempDir()
	t.Chdir(dir)
	ex, err := ipybox.Start(context.Background(), &ipybox.Options{Python: py})
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	run(t, ex, "import os\nos.chdir('/')")
	if got := run(t, ex, "os.getcwd()").Text; got != "'/'" {
		t.Errorf("after os.chdir: cwd = %s", got)
	}
	run(t, ex, "%cd /tmp")
	if got := run(t, ex, "os.getcwd()").Text; got != "'/tmp'" {
		t.Errorf("after %%cd: cwd = %s", got)
	}
}

func TestPlotsBecomeImages(t *testing.T) {
	t.Parallel()
	imgs := t.TempDir()
	ex := start(t, &ipybox.Options{ImagesDir: imgs})
	res := run(t, ex, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()")
	if len(res.Images) != 1 {
		t.Fatalf("one show: images = %v", res.Images)
	}
	res = run(t, ex, "plt.plot([1, 2]); plt.show()\nplt.plot([3, 4]); plt.show()")
	if len(res.Images) != 2 {
		t.Fatalf("two shows: images = %v", res.Images)
	}
	for _, p := range res.Images {
		b, err := os.ReadFile(p)
		if err != nil || !strings.HasPrefix(string(b), "\x89PNG") {
			t.Errorf("%s is not a PNG (err %v)", p, err)
		}
		if filepath.Dir(p) != imgs {
			t.Errorf("%s is not in %s", p, imgs)
		}
	}
	entries, _ := os.ReadDir(imgs)
	if len(entries) != 3 {
		t.Errorf("images dir holds %d files, want 3", len(entries))
	}
}

func TestDisplaysAndClearOutput(t *testing.T) {
	t.Parallel()
	ex := start(t, nil)
	res := run(t, ex, `from IPython.display import display, HTML, clear_output
print('gone')
clear_output()
print('kept')
h = display(HTML('<b>v1</b>'), display_id=True)
h.update(HTML('<b>v2</b>'))`)
	if res.Text != "kept\n<IPython.core.display.HTML object>" {
		t.Errorf("text = %q", res.Text)
	}
	if len(res.Displays) != 1 || res.Displays[0].Data["text/html"] != "<b>v2</b>" {
		t.Errorf("displays = %+v", res.Displays)
	}
	res = run(t, ex, "from IPython.display import SVG\nSVG('<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1\" height=\"1\"/>')")
	if len(res.Images) != 1 || !strings.HasSuffix(res.Images[0], ".svg") {
		t.Errorf("svg images = %v", res.Images)
	}
}

func TestTimeoutKeepsState(t *testing.T) {
	ex := start(t, nil)
	begin := time.Now()
	_, err := ex.Execute(context.Background(), "import time\nn = 0\nwhile True:\n    n += 1\n    time.sleep(0.01)", &ipybox.ExecOptions{Timeout: 500 * time.Millisecond})
	if !errors.Is(err, ipybox.ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if !strings.Contains(err.Error(), "timed out") {
		t.Errorf("error does not say it timed out: %v", err)
	}
	if d := time.Since(begin); d > 3*time.Second {
		t.Errorf("timeout took %v", d)
	}
	if got := run(t, ex, "n > 0").Text; got != "True" {
		t.Errorf("variable set in the loop: %q", got)
	}
	// The plain sleep of the issue.
	begin = time.Now()
	_, err = ex.Execute(context.Background(), "time.sleep(10)", &ipybox.ExecOptions{Timeout: 500 * time.Millisecond})
	if !errors.Is(err, ipybox.ErrTimeout) || time.Since(begin) > 3*time.Second {
		t.Fatalf("sleep(10): err = %v after %v", err, time.Since(begin))
	}
	run(t, ex, "n")
}

func TestCancelInterruptsPromptly(t *testing.T) {
	ex := start(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Cancel once the cell sleeps (see TestInterrupt).
	var begin time.Time
	var err error
	for ev, e := range ex.Stream(ctx, "import time\ndef nap():\n    print('sleeping')\n    time.sleep(30)\nnap()", nil) {
		if o, ok := ev.(*ipybox.Output); ok && strings.Contains(o.Text, "sleeping") {
			begin = time.Now()
			cancel()
		}
		if e != nil {
			err = e
		}
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(begin); d > 2*time.Second {
		t.Errorf("cancel returned after %v", d)
	}
	if got := run(t, ex, "1 + 1").Text; got != "2" {
		t.Errorf("after cancel: %q", got)
	}
}

func TestExecutionsAreSerialised(t *testing.T) {
	ex := start(t, nil)
	var wg sync.WaitGroup
	results := make([]string, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := ex.Execute(context.Background(), fmt.Sprintf("import time\nprint('start %d'); time.sleep(0.05); print('end %d')", i, i), nil)
			if err != nil {
				t.Error(err)
				return
			}
			results[i] = res.Text
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r != fmt.Sprintf("start %d\nend %d", i, i) {
			t.Errorf("cell %d interleaved: %q", i, r)
		}
	}
	// A second call whose context ends while the first runs fails fast.
	// The first cell is known to run once its output arrives.
	running, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for ev := range ex.Stream(context.Background(), "import time\nprint('running', flush=True)\ntime.sleep(2)", nil) {
			if _, ok := ev.(*ipybox.Output); ok {
				select {
				case <-running:
				default:
					close(running)
				}
			}
		}
	}()
	select {
	case <-running:
	case <-done:
		t.Fatal("the first cell ended without output")
	case <-time.After(60 * time.Second):
		t.Fatal("the first cell did not start within 60 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	begin := time.Now()
	if _, err := ex.Execute(ctx, "1", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting call: err = %v", err)
	}
	if d := time.Since(begin); d > 1500*time.Millisecond {
		t.Errorf("waiting call took %v", d)
	}
	<-done
}

func TestLargeOutputRoundTrips(t *testing.T) {
	t.Parallel()
	ex := start(t, nil)
	res := run(t, ex, "print('x' * 500000)")
	if res.Text != strings.Repeat("x", 500000) {
		t.Errorf("500,000 chars: got %d chars", len(res.Text))
	}
	res = run(t, ex, "for i in range(50000):\n    print(i)")
	var want strings.Builder
	for i := range 50000 {
		want.WriteString(strconv.Itoa(i))
		want.WriteByte('\n')
	}
	if res.Text != strings.TrimSuffix(want.String(), "\n") {
		t.Errorf("50,000 lines: got %d bytes, want %d", len(res.Text), want.Len()-1)
	}
	var cell strings.Builder
	for i := range 10000 {
		fmt.Fprintf(&cell, "v%d = %d\n", i, i)
	}
	cell.WriteString("print(v9999)")
	if got := run(t, ex, cell.String()).Text; got != "9999" {
		t.Errorf("10,000-line cell: %q", got)
	}
	res = run(t, ex, "import asyncio\nfor i in range(100):\n    print(i)\n    await asyncio.sleep(0.01)")
	if n := len(strings.Split(res.Text, "\n")); n != 100 {
		t.Errorf("async prints: %d lines", n)
	}
}

// TestOutputBeforeIdle: ipybox's kernels skip ipykernel's wait on the IO
// thread when nothing is buffered (boundstreams.py). A flush under way has
// taken its text out of the buffer before it has scheduled all of its
// messages, so a skip then would let status: idle overtake the text, and
// the cell's result would lose its tail. Each cell here ends while the IO
// thread is sending megabytes, in a cold and a forked kernel.
func TestOutputBeforeIdle(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	z, err := ipybox.NewZygote(context.Background(), py, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { z.Close() })
	for name, opts := range map[string]*ipybox.Options{"cold": nil, "forked": {Zygote: z}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ex := start(t, opts)
			for i := range 3 {
				res := run(t, ex, "import sys\nline = 'x' * 99 + '\\n'\nfor _ in range(100000):\n    sys.stdout.write(line)")
				if len(res.Text) != 100000*100-1 || strings.Count(res.Text, "\n") != 100000-1 {
					t.Errorf("cell %d: %d bytes of 9999999 arrived before its end", i, len(res.Text))
				}
			}
			for i := range 50 {
				if got := run(t, ex, fmt.Sprintf("print(%d)", i)).Text; got != strconv.Itoa(i) {
					t.Fatalf("print(%d): %q", i, got)
				}
			}
			// A forked child's prints take ipykernel's own write, which
			// sends them to the kernel over its pipe.
			got := run(t, ex, "import os, sys, time\npid = os.fork()\nif pid == 0:\n    print('from the child')\n    sys.stdout.flush()\n    time.sleep(0.3)\n    os._exit(0)\nos.waitpid(pid, 0)\ntime.sleep(0.3)\nprint('parent')").Text
			if !strings.Contains(got, "from the child") || !strings.Contains(got, "parent") {
				t.Errorf("a forked child's print: %q", got)
			}
		})
	}
}

func TestKernelEnv(t *testing.T) {
	t.Setenv("IPYBOX_TEST_HOST_SECRET", "leaked")
	ex := start(t, &ipybox.Options{KernelEnv: map[string]string{"GIVEN": "yes"}})
	if got := run(t, ex, "import os\nos.environ.get('GIVEN')").Text; got != "'yes'" {
		t.Errorf("kernel env var: %s", got)
	}
	if got := run(t, ex, "os.environ.get('IPYBOX_TEST_HOST_SECRET')").Text; got != "" {
		t.Errorf("host env var leaked into the kernel: %s", got)
	}
	// IPython runs shell commands under a pty: lines end in \r\n.
	if got := run(t, ex, "!echo $IPYBOX_TEST_HOST_SECRET-end").Text; got != "-end\r" {
		t.Errorf("host env var leaked into shell commands: %q", got)
	}
}

func TestKernelDeath(t *testing.T) {
	t.Parallel()
	logs := &testenv.Buffer{}
	ex := start(t, &ipybox.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	run(t, ex, "x = 1")
	_, err := ex.Execute(context.Background(), "import os\nos._exit(1)", nil)
	if !errors.Is(err, ipybox.ErrKernelDied) {
		t.Fatalf("os._exit: err = %v, want ErrKernelDied", err)
	}
	if got := run(t, ex, "'x' in globals()").Text; got != "False" {
		t.Errorf("after death: fresh kernel expected, got %q", got)
	}
	// SIGKILL from outside, while a cell runs.
	pid := run(t, ex, "import os\nos.getpid()").Text
	victim, _ := strconv.Atoi(pid)
	err = nil
	for ev, e := range ex.Stream(context.Background(), "import time\nprint('running', flush=True)\ntime.sleep(20)", nil) {
		if o, ok := ev.(*ipybox.Output); ok && strings.Contains(o.Text, "running") {
			testenv.Signal(victim, syscall.SIGKILL)
		}
		if e != nil {
			err = e
		}
	}
	if !errors.Is(err, ipybox.ErrKernelDied) {
		t.Fatalf("SIGKILL: err = %v, want ErrKernelDied", err)
	}
	if got := run(t, ex, "1 + 1").Text; got != "2" {
		t.Errorf("after SIGKILL: %q", got)
	}
	// SIGKILL while idle: once the host has seen the death (the process is
	// reaped and the death logged), the next call runs in a fresh kernel and
	// reports the death in Result.Restarted; it does not fail.
	run(t, ex, "y = 1")
	pid = run(t, ex, "import os\nos.getpid()").Text
	n, _ := strconv.Atoi(pid)
	died := func() int { return strings.Count(logs.String(), `msg="kernel died"`) }
	before := died()
	testenv.Signal(n, syscall.SIGKILL)
	testenv.WaitFor(t, 30*time.Second, "the idle kernel's death, seen by the host", func() bool {
		return testenv.Signal(n, 0) == syscall.ESRCH && died() > before
	})
	res, err := ex.Execute(context.Background(), "'y' in globals()", nil)
	if err != nil {
		t.Fatalf("the call after an idle SIGKILL: %v, want it to run in a fresh kernel", err)
	}
	if res.Restarted == nil || !strings.Contains(res.Restarted.Error(), "signal: killed") {
		t.Errorf("the call after an idle SIGKILL: Restarted = %v, want the death (signal: killed)", res.Restarted)
	}
	if res.Text != "False" {
		t.Errorf("the call after an idle SIGKILL: 'y' in globals() = %s, want a fresh kernel", res.Text)
	}
	if got := run(t, ex, "2 + 2"); got.Text != "4" || got.Restarted != nil {
		t.Errorf("the call after that: %q, Restarted %v", got.Text, got.Restarted)
	}
}

func TestDeadKernelTakesItsChildren(t *testing.T) {
	t.Parallel()
	ex := start(t, nil)
	pid, _ := strconv.Atoi(run(t, ex, "import os, subprocess\nsubprocess.Popen(['sleep', '60'])\nos.getpid()").Text)
	if len(testenv.GroupMembers(pid)) < 2 {
		t.Fatalf("expected the kernel and its child in group %d: %v", pid, testenv.GroupMembers(pid))
	}
	if _, err := ex.Execute(context.Background(), "os._exit(1)", nil); !errors.Is(err, ipybox.ErrKernelDied) {
		t.Fatalf("err = %v", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for len(testenv.GroupMembers(pid)) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if left := testenv.GroupMembers(pid); len(left) > 0 {
		t.Errorf("the dead kernel's children live on: %v", left)
	}
}

func TestIgnoredInterruptRestarts(t *testing.T) {
	ex := start(t, &ipybox.Options{InterruptGrace: time.Second})
	run(t, ex, "keep = 1")
	begin := time.Now()
	_, err := ex.Execute(context.Background(), "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass", &ipybox.ExecOptions{Timeout: 500 * time.Millisecond})
	var te *ipybox.TimeoutError
	if !errors.As(err, &te) || !te.Restarted {
		t.Fatalf("err = %v, want a TimeoutError with Restarted", err)
	}
	if !strings.Contains(err.Error(), "restarted") {
		t.Errorf("error does not report the restart: %v", err)
	}
	// Timeout + grace, plus a kernel start.
	if d := time.Since(begin); d > 500*time.Millisecond+time.Second+5*time.Second {
		t.Errorf("took %v", d)
	}
	if got := run(t, ex, "'keep' in globals()").Text; got != "False" {
		t.Errorf("after restart: %q", got)
	}
}

func TestInputGivesClearError(t *testing.T) {
	t.Parallel()
	ex := start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := ex.Execute(ctx, "input('name? ')", nil)
	var pe *ipybox.PythonError
	if !errors.As(err, &pe) || !strings.Contains(pe.Value, "input") {
		t.Fatalf("err = %v, want a clear Python error about input", err)
	}
}

func TestInputHandler(t *testing.T) {
	ex := start(t, &ipybox.Options{Input: func(ctx context.Context, prompt string, _ bool) (string, error) {
		if prompt == "slow?" {
			<-ctx.Done() // an answer that never comes: the timeout must still apply
			return "", ctx.Err()
		}
		return "answer to " + prompt, nil
	}})
	if got := run(t, ex, "input('q?')").Text; got != "'answer to q?'" {
		t.Errorf("input: %q", got)
	}
	begin := time.Now()
	_, err := ex.Execute(context.Background(), "input('slow?')", &ipybox.ExecOptions{Timeout: time.Second})
	if !errors.Is(err, ipybox.ErrTimeout) || time.Since(begin) > 10*time.Second {
		t.Errorf("a cell waiting on Input with a 1 s timeout: %v after %v, want ErrTimeout", err, time.Since(begin))
	}
	if got := run(t, ex, "input('q?')").Text; got != "'answer to q?'" {
		t.Errorf("input after the timeout: %q", got)
	}
}

func TestCloseLeavesNothing(t *testing.T) {
	testenv.CheckGoroutines(t)
	py := testenv.NeedsPython(t)
	ex, err := ipybox.Start(context.Background(), &ipybox.Options{Python: py, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(run(t, ex, "import os, subprocess\nsubprocess.Popen(['sleep', '60'])\nos.getpid()").Text)
	runDir := strings.Trim(run(t, ex, "os.path.dirname(os.environ['IPYTHONDIR'])").Text, "'")
	if _, err := os.Stat(runDir); err != nil {
		t.Fatalf("run dir %q: %v", runDir, err)
	}
	begin := time.Now()
	if err := ex.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("Close took %v", d)
	}
	if err := ex.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := testenv.Signal(pid, 0); err != syscall.ESRCH {
		t.Errorf("kernel process %d still exists (%v)", pid, err)
	}
	if left := testenv.GroupMembers(pid); len(left) > 0 {
		t.Errorf("processes left in the kernel's group: %v", left)
	}
	if _, err := os.Stat(runDir); !os.IsNotExist(err) {
		t.Errorf("run dir %q still exists", runDir)
	}
	if _, err := ex.Execute(context.Background(), "1", nil); !errors.Is(err, ipybox.ErrClosed) {
		t.Errorf("Execute after Close: %v", err)
	}
}

func TestBadWorkDir(t *testing.T) {
	t.Parallel()
	_, err := ipybox.Start(context.Background(), &ipybox.Options{WorkDir: "/nonexistent/dir"})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/dir") {
		t.Fatalf("err = %v", err)
	}
}

func TestInterrupt(t *testing.T) {
	t.Parallel()
	ex := start(t, nil)
	run(t, ex, "kept = 'yes'")
	// Interrupt once the cell sleeps: an interrupt sent before the cell
	// runs is ignored. The print is not flushed, so it arrives while the
	// cell sleeps; one statement, so the interrupt does not fall between two.
	var err error
	for ev, e := range ex.Stream(context.Background(), "import time\ndef nap():\n    print('sleeping')\n    time.sleep(30)\nnap()", nil) {
		if o, ok := ev.(*ipybox.Output); ok && strings.Contains(o.Text, "sleeping") {
			ex.Interrupt()
		}
		if e != nil {
			err = e
		}
	}
	var pe *ipybox.PythonError
	if !errors.As(err, &pe) || pe.Name != "KeyboardInterrupt" {
		t.Fatalf("err = %v, want KeyboardInterrupt", err)
	}
	if got := run(t, ex, "kept").Text; got != "'yes'" {
		t.Errorf("state after interrupt: %q", got)
	}
}

// TestCloseDuringCellExecutor: a cell that Close ends gets ErrClosed, which
// names the Executor, not ErrKernelDied; so do calls after Close.
func TestCloseDuringCellExecutor(t *testing.T) {
	t.Parallel()
	ex := start(t, nil)
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		var err error
		for ev, e := range ex.Stream(context.Background(), "import time\nprint('started', flush=True)\ntime.sleep(30)", nil) {
			if o, ok := ev.(*ipybox.Output); ok && strings.Contains(o.Text, "started") {
				close(started)
			}
			err = e
		}
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("the cell ended before Close: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the cell did not start within 30s")
	}
	ex.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ipybox.ErrClosed) || err.Error() != "ipybox: executor closed" {
			t.Errorf("the running cell got %v, want ipybox.ErrClosed (\"ipybox: executor closed\")", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cell still runs 5s after Close")
	}
	if err := ex.Reset(context.Background()); !errors.Is(err, ipybox.ErrClosed) {
		t.Errorf("Reset after Close: %v, want ErrClosed", err)
	}
	if err := ex.Interrupt(); !errors.Is(err, ipybox.ErrClosed) {
		t.Errorf("Interrupt after Close: %v, want ErrClosed", err)
	}
}

// TestRegisterErrorsNameServerOnce: an error from registering a server names
// it once, with one "ipybox:" prefix and no inner package prefix.
func TestRegisterErrorsNameServerOnce(t *testing.T) {
	t.Parallel()
	ex := start(t, nil)
	missing := ipybox.ServerConfig{Command: "/nonexistent/ipybox-test-server"}
	cases := []struct {
		name   string
		call   func() error
		server string // as the error should quote it; "gone" when empty
	}{
		{"RegisterMCPServer", func() error {
			_, err := ex.RegisterMCPServer(context.Background(), "gone", missing)
			return err
		}, ""},
		{"GenerateToolModules", func() error {
			_, err := ipybox.GenerateToolModules(context.Background(), "gone", missing, t.TempDir(), nil)
			return err
		}, ""},
		{"RegisterMCPServer bad config", func() error {
			_, err := ex.RegisterMCPServer(context.Background(), "gone", ipybox.ServerConfig{})
			return err
		}, ""},
		{"RegisterMCPServer that needs a sign-in", func() error {
			s := mcptest.NewOAuthServer(nil)
			defer s.Close()
			_, err := ex.RegisterMCPServer(context.Background(), "gone", ipybox.ServerConfig{URL: s.URL})
			return err
		}, ""},
		{"RegisterMCPServer bad name", func() error {
			_, err := ex.RegisterMCPServer(context.Background(), "9gone", missing)
			return err
		}, "9gone"},
		{"GenerateToolModules bad name", func() error {
			_, err := ipybox.GenerateToolModules(context.Background(), "9gone", missing, t.TempDir(), nil)
			return err
		}, "9gone"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if err == nil {
				t.Fatal("no error for a server that cannot start")
			}
			msg := err.Error()
			server := cmp.Or(c.server, "gone")
			if n := strings.Count(msg, strconv.Quote(server)); n != 1 {
				t.Errorf("the error names the server %d times, want once: %s", n, msg)
			}
			if strings.Count(msg, "ipybox:") != 1 || strings.Contains(msg, "mcpconn:") || strings.Contains(msg, "pygen:") {
				t.Errorf("the error's prefixes stutter: %s", msg)
			}
		})
	}
}
