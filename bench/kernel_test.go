//go:build unix

// Package bench measures ipybox beside its anchors, in the same run:
//
//	go test ./bench -run '^$' -bench . -benchtime 200x
//
// Each benchmark reports ipybox's figure, the anchor's, and their ratio.
// The kernel anchors run Python's jupyter_client (bench/anchor.py) with
// Debian's /usr/bin/python3 on the same ipykernel build.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/sandbox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestMain lets the test binary measure one ipybox run in a fresh process
// (start time and peak memory are per process).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.InitCommand {
		os.Exit(sandbox.InitMain(os.Args[2:]))
	}
	if mode := os.Getenv("IPYBOX_BENCH_CHILD"); mode != "" {
		child(mode)
		return
	}
	os.Exit(m.Run())
}

// anchor runs bench/anchor.py with args and decodes its JSON line.
func anchor(b *testing.B, args ...string) map[string]any {
	b.Helper()
	py := "/usr/bin/python3"
	if out, err := exec.Command(py, "-c", "import jupyter_client").CombinedOutput(); err != nil {
		testenv.Missing(b, "jupyter_client for the anchor (apt-get install python3-jupyter-client): %s", out)
	}
	cmd := exec.Command(py, append([]string{"anchor.py"}, args...)...)
	cmd.Env = append(os.Environ(), "PYDEVD_DISABLE_FILE_VALIDATION=1")
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("anchor %v: %v", args, err)
	}
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		b.Fatalf("anchor %v: %q: %v", args, out, err)
	}
	return v
}

func start(b *testing.B) *ipybox.Executor {
	b.Helper()
	py := testenv.NeedsPython(b)
	ex, err := ipybox.Start(context.Background(), &ipybox.Options{Python: py, WorkDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ex.Close() })
	return ex
}

// BenchmarkLifecycle is Reset and Close of an Executor that has run a
// cell, and `ipybox exec -c pass` as a whole process, beside
// jupyter_client's restart_kernel, shutdown_kernel, and its start, execute
// and shutdown. Target: Close under 100 ms.
func BenchmarkLifecycle(b *testing.B) {
	py := testenv.NeedsPython(b)
	bin := testenv.Binary(b)
	ctx := context.Background()
	var reset, closing, whole []float64
	for range b.N {
		ex, err := ipybox.Start(ctx, &ipybox.Options{Python: py, WorkDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := ex.Execute(ctx, "1", nil); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if err := ex.Reset(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := ex.Execute(ctx, "1", nil); err != nil { // Reset is done when a cell can run
			b.Fatal(err)
		}
		reset = append(reset, ms(time.Since(t0)))
		t0 = time.Now()
		ex.Close()
		closing = append(closing, ms(time.Since(t0)))
		t0 = time.Now()
		if out, err := exec.Command(bin, "exec", "--workspace", b.TempDir(), "--python", py, "-c", "pass").CombinedOutput(); err != nil {
			b.Fatalf("ipybox exec -c pass: %v\n%s", err, out)
		}
		whole = append(whole, ms(time.Since(t0)))
	}
	a := anchor(b, "lifecycle", strconv.Itoa(max(b.N, 5)))
	r, c, w := median(reset), median(closing), median(whole)
	ar, ac, aw := a["restart_ms"].(float64), a["shutdown_ms"].(float64), a["whole_ms"].(float64)
	b.ReportMetric(c, "close-ms")
	b.ReportMetric(slices.Max(closing), "close-max-ms")
	b.ReportMetric(r, "reset-ms")
	b.ReportMetric(w, "exec-pass-ms")
	b.Logf("medians of %d: Close %.0f ms (max %.0f) vs shutdown_kernel %.0f ms (max %.0f), ratio %.2f (target < 100 ms); "+
		"Reset to the next result %.0f ms vs restart_kernel %.0f ms, ratio %.2f; "+
		"ipybox exec -c pass (whole process) %.0f ms vs start+execute+shutdown %.0f ms, ratio %.2f",
		b.N, c, slices.Max(closing), ac, a["shutdown_max_ms"].(float64), c/ac, r, ar, r/ar, w, aw, w/aw)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkExecutePass is the `pass` round trip through the Executor.
// Target: at most 0.9x jupyter_client's execute_interactive.
func BenchmarkExecutePass(b *testing.B) {
	ex := start(b)
	ctx := context.Background()
	// As many samples as the anchor takes (at least 200), whatever b.N.
	n := max(b.N, 200)
	ours := passP50(b, ctx, ex, n)
	a := anchor(b, "roundtrip", strconv.Itoa(n))["p50_ms"].(float64)
	b.ReportMetric(ours, "p50-ms")
	b.ReportMetric(a, "anchor-p50-ms")
	b.ReportMetric(ours/a, "ratio")
	b.Logf("pass round trip p50: ipybox %.2f ms, jupyter_client %.2f ms, ratio %.2f (target <= 0.9)", ours, a, ours/a)
}

// BenchmarkColdStart is start to first result, each in a fresh process.
// Target: at most 0.6x jupyter_client's KernelManager start + execute.
func BenchmarkColdStart(b *testing.B) {
	testenv.NeedsPython(b)
	var ours, theirs []float64
	for range b.N {
		ours = append(ours, childRun(b, "start")["ms"])
		theirs = append(theirs, anchor(b, "start")["ms"].(float64))
	}
	o, a := median(ours), median(theirs)
	b.ReportMetric(o, "ms")
	b.ReportMetric(a, "anchor-ms")
	b.ReportMetric(o/a, "ratio")
	b.Logf("start to first result (median of %d): ipybox %.0f ms, jupyter_client %.0f ms, ratio %.2f (target <= 0.6)", b.N, o, a, o/a)
}

// BenchmarkPoolStart is start to first result from a warm Pool: Get, then
// the first Execute. Target (docs/design.md): under 50 ms.
func BenchmarkPoolStart(b *testing.B) {
	py := testenv.NeedsPython(b)
	benchWarmPool(b, "", &ipybox.Options{Python: py, WorkDir: b.TempDir()})
}

// benchWarmPool times a session's first result from a warm pool of
// executors started with opts; what names the backend in the log.
func benchWarmPool(b *testing.B, what string, opts *ipybox.Options) {
	pool := ipybox.NewPool(1, opts)
	defer pool.Close()
	ctx := context.Background()
	var times []float64
	for range b.N {
		for pool.Ready() == 0 { // measure the warm path only
			time.Sleep(10 * time.Millisecond)
		}
		t0 := time.Now()
		ex, err := pool.Get(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := ex.Execute(ctx, "1", nil); err != nil {
			b.Fatal(err)
		}
		times = append(times, float64(time.Since(t0).Microseconds())/1000)
		ex.Close()
	}
	m := median(times)
	b.ReportMetric(m, "warm-ms")
	b.Logf("%sstart to first result from a warm pool (median of %d): %.1f ms (target < 50 ms)", what, b.N, m)
}

// BenchmarkSandboxStart is start to first result with the kernel in the
// bwrap sandbox, beside the same start unsandboxed, alternating in one run.
// Target: at most 1.15x.
func BenchmarkSandboxStart(b *testing.B) {
	testenv.NeedsPython(b)
	testenv.NeedsTool(b, "bwrap")
	var plain, boxed []float64
	for range b.N {
		plain = append(plain, childRun(b, "start")["ms"])
		boxed = append(boxed, childRun(b, "start-sandbox")["ms"])
	}
	p, s := median(plain), median(boxed)
	b.ReportMetric(s, "sandboxed-ms")
	b.ReportMetric(p, "plain-ms")
	b.ReportMetric(s/p, "ratio")
	b.Logf("start to first result (median of %d): sandboxed %.0f ms, unsandboxed %.0f ms, ratio %.2f (target <= 1.15)", b.N, s, p, s/p)
}

// BenchmarkOutput10MB and BenchmarkOutput100MB are one cell printing 10
// or 100 MB, in a fresh process so that peak RSS is the client's own.
// Targets: at most 1.2x the time (1.0x for 100 MB) and 0.6x the memory of
// jupyter_client, byte-exact.
func BenchmarkOutput10MB(b *testing.B)  { benchOutput(b, 10, 1.2) }
func BenchmarkOutput100MB(b *testing.B) { benchOutput(b, 100, 1.0) }

func benchOutput(b *testing.B, mb int, target float64) {
	testenv.NeedsPython(b)
	var ours, theirs, oursRSS, theirRSS []float64
	for range b.N {
		r := childRun(b, "output:"+strconv.Itoa(mb))
		if r["exact"] != 1 {
			b.Fatalf("ipybox output not byte-exact: %v", r)
		}
		ours, oursRSS = append(ours, r["ms"]), append(oursRSS, r["rss_kb"])
		a := anchor(b, "output", strconv.Itoa(mb))
		if a["exact"] != true {
			b.Fatalf("anchor output not byte-exact: %v", a)
		}
		theirs, theirRSS = append(theirs, a["ms"].(float64)), append(theirRSS, a["rss_kb"].(float64))
	}
	o, a, om, am := median(ours), median(theirs), median(oursRSS)/1024, median(theirRSS)/1024
	b.ReportMetric(o, "ms")
	b.ReportMetric(a, "anchor-ms")
	b.ReportMetric(o/a, "time-ratio")
	b.ReportMetric(om, "peak-MB")
	b.ReportMetric(am, "anchor-peak-MB")
	b.ReportMetric(om/am, "mem-ratio")
	b.Logf("%d MB output (median of %d): ipybox %.0f ms / %.0f MB peak, jupyter_client %.0f ms / %.0f MB peak; time ratio %.2f (<= %.1f), memory ratio %.2f (<= 0.6); byte-exact",
		mb, b.N, o, om, a, am, o/a, target, om/am)
}

// exactLines reports whether text is n lines of 99 x's (the last without
// its newline), without building a copy to compare with.
func exactLines(text string, n int) bool {
	if len(text) != n*100-1 {
		return false
	}
	for i := 0; i < len(text); i++ {
		want := byte('x')
		if i%100 == 99 {
			want = '\n'
		}
		if text[i] != want {
			return false
		}
	}
	return true
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// childRun runs this test binary in mode and decodes its JSON result.
func childRun(b *testing.B, mode string) map[string]float64 {
	b.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "IPYBOX_BENCH_CHILD="+mode)
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("child %s: %v: %s", mode, err, out)
	}
	var v map[string]float64
	if err := json.Unmarshal(out, &v); err != nil {
		b.Fatalf("child %s: %q", mode, out)
	}
	return v
}

func child(mode string) {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ipybox-bench")
	defer os.RemoveAll(dir)
	res := map[string]float64{}
	opts := &ipybox.Options{WorkDir: dir}
	switch mode {
	case "start-sandbox":
		opts.Sandbox = ipybox.DefaultSandbox()
		mode = "start"
	case "start-container":
		opts.Container = containerOptions(dir)
		mode = "start"
	}
	t0 := time.Now()
	ex, err := ipybox.Start(ctx, opts)
	if err != nil {
		panic(err)
	}
	defer func() {
		ex.Close()
		json.NewEncoder(os.Stdout).Encode(res)
	}()
	switch mode {
	case "start":
		if _, err := ex.Execute(ctx, "1", nil); err != nil {
			panic(err)
		}
		res["ms"] = float64(time.Since(t0).Microseconds()) / 1000
	default:
		mb, err := strconv.Atoi(strings.TrimPrefix(mode, "output:"))
		if err != nil {
			panic(mode)
		}
		runtime.GC()
		code := fmt.Sprintf("import sys\nline = 'x' * 99 + '\\n'\nfor _ in range(%d * 10000):\n    sys.stdout.write(line)", mb)
		t1 := time.Now()
		// Keep all of it, as the anchor does (the default keeps 64 MiB).
		r, err := ex.Execute(ctx, code, &ipybox.ExecOptions{KeepText: -1})
		if err != nil {
			panic(err)
		}
		res["ms"] = float64(time.Since(t1).Microseconds()) / 1000
		// Peak memory first: checking the text must not add to it.
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		res["rss_kb"] = float64(ru.Maxrss)
		if exactLines(r.Text, mb*10000) {
			res["exact"] = 1
		}
	}
}

// passP50 runs `pass` n times through ex, after 20 to warm up as the
// anchors do, and returns the median round trip in milliseconds.
func passP50(b *testing.B, ctx context.Context, ex *ipybox.Executor, n int) float64 {
	for range 20 {
		ex.Execute(ctx, "pass", nil)
	}
	times := make([]time.Duration, 0, n)
	b.ResetTimer()
	for range n {
		t0 := time.Now()
		if _, err := ex.Execute(ctx, "pass", nil); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(times)
	return float64(times[len(times)/2].Microseconds()) / 1000
}
