//go:build linux

package bench

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// Fork and rewind (issue 39), with their anchors in the same run:
//
//	go test ./bench -run '^$' -bench 'Fork' -benchtime 1x -timeout 20m
//
// A kernel holds 1 GiB of numpy arrays (eight of 128 MiB, every page
// written). Reported: the first result in a fork after Fork (p50 of 5),
// 4 forks and their first results in all, the source's cell asked for
// 2 to 40 ms into a fork (p50 and max of 5: during the fork's
// preparation, and while its fork cell holds the source), the PSS of the source and 4 forks that each change 10 MB, and
// the anchors: a cold start to its first result, and Snapshot + Restore
// of the same namespace into a fresh kernel. BenchmarkRewind: one cell of
// a 100 MiB namespace undone, to the next result (p50 of 5), beside a
// cold start and an undo by Snapshot before the cell and Restore after. Both report the load average (load-1m) they ran at.

const gibNamespace = `import numpy as np, os
arrs = [np.ones((128 << 20) // 8) for _ in range(8)]
print(sum(a.nbytes for a in arrs) >> 20, "MiB")`

func fcell(b *testing.B, ex *ipybox.Executor, code string) string {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := ex.Execute(ctx, code, nil)
	if err != nil {
		b.Fatalf("%q: %v", code, err)
	}
	return strings.TrimSpace(res.Text)
}

// pssMiB is the proportional set size of pid, from smaps_rollup.
func pssMiB(b *testing.B, pid int) float64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func kpid(b *testing.B, ex *ipybox.Executor) int {
	pid, err := strconv.Atoi(fcell(b, ex, "print(os.getpid())"))
	if err != nil {
		b.Fatal(err)
	}
	return pid
}

// load1 is the machine's load average over the last minute: the figures
// of a shared 2-core machine are read against it.
func load1(b *testing.B) float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		b.Fatal(err)
	}
	v, _ := strconv.ParseFloat(strings.Fields(string(raw))[0], 64)
	return v
}

func BenchmarkFork(b *testing.B) {
	testenv.NeedsPython(b)
	ctx := context.Background()
	ws := b.TempDir()
	for b.Loop() {
		b.ReportMetric(load1(b), "load-1m")
		// Anchor: a cold start to its first result.
		t0 := time.Now()
		cold, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: ws})
		if err != nil {
			b.Fatal(err)
		}
		fcell(b, cold, "print(1)")
		coldMs := ms(time.Since(t0))
		cold.Close()

		src, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: ws, SnapshotDir: filepath.Join(ws, ".ipybox", "snapshots", "src")})
		if err != nil {
			b.Fatal(err)
		}
		fcell(b, src, gibNamespace)
		var base []float64
		for range 5 {
			t := time.Now()
			fcell(b, src, "pass")
			base = append(base, ms(time.Since(t)))
		}

		var first, srcDuring []float64
		// The source's cell is asked for at several moments of the fork:
		// during the fork's preparation, and when its fork cell runs.
		for _, off := range []time.Duration{2, 8, 15, 25, 40} {
			t := time.Now()
			done := make(chan float64, 1)
			go func() {
				// The source's cell, asked for as the fork is made.
				time.Sleep(off * time.Millisecond)
				t1 := time.Now()
				for {
					c, cancel := context.WithTimeout(ctx, time.Minute)
					_, err := src.Execute(c, "pass", nil)
					cancel()
					if err == nil {
						break
					}
				}
				done <- ms(time.Since(t1))
			}()
			forks, err := src.Fork(ctx, 1, nil)
			if err != nil {
				b.Fatal(err)
			}
			fcell(b, forks[0], "print(len(arrs))")
			first = append(first, ms(time.Since(t)))
			srcDuring = append(srcDuring, <-done)
			forks[0].Close()
		}

		t := time.Now()
		forks, err := src.Fork(ctx, 4, nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range forks {
			fcell(b, f, "print(len(arrs))")
		}
		four := ms(time.Since(t))
		pss := pssMiB(b, kpid(b, src))
		for _, f := range forks {
			fcell(b, f, "arrs[0][: (10 << 20) // 8] += 1")
			pss += pssMiB(b, kpid(b, f))
		}
		for _, f := range forks {
			f.Close()
		}

		// Anchor: Snapshot + Restore of the same namespace.
		t = time.Now()
		if _, err := src.Snapshot(ctx, nil); err != nil {
			b.Fatal(err)
		}
		rest, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: ws, SnapshotDir: filepath.Join(ws, ".ipybox", "snapshots", "src")})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := rest.Restore(ctx); err != nil {
			b.Fatal(err)
		}
		fcell(b, rest, "print(len(arrs))")
		snapMs := ms(time.Since(t))
		rest.Close()
		src.Close()

		b.ReportMetric(p50(first), "fork-first-result-p50-ms")
		b.ReportMetric(four, "4-forks-first-results-ms")
		b.ReportMetric(p50(base), "source-cell-p50-ms")
		b.ReportMetric(p50(srcDuring), "source-cell-during-fork-p50-ms")
		b.ReportMetric(slices.Max(srcDuring), "source-cell-during-fork-max-ms")
		b.ReportMetric(pss, "pss-source+4-forks-MiB")
		b.ReportMetric(coldMs, "anchor-cold-start-ms")
		b.ReportMetric(snapMs, "anchor-snapshot+restore-ms")
	}
}

func BenchmarkRewind(b *testing.B) {
	testenv.NeedsPython(b)
	ctx := context.Background()
	for b.Loop() {
		b.ReportMetric(load1(b), "load-1m")
		// Anchor: a cold start to its first result.
		t0 := time.Now()
		cold, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		fcell(b, cold, "print(1)")
		b.ReportMetric(ms(time.Since(t0)), "anchor-cold-start-ms")
		cold.Close()

		ex, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: b.TempDir(), RewindDepth: 1})
		if err != nil {
			b.Fatal(err)
		}
		fcell(b, ex, "import numpy as np, os\narrs = [np.ones((10 << 20) // 8) for _ in range(10)]")
		var plain, with, rw []float64
		for range 5 {
			t := time.Now()
			fcell(b, ex, "x = 1")
			with = append(with, ms(time.Since(t)))
			t = time.Now()
			if _, err := ex.Rewind(ctx, 1); err != nil {
				b.Fatal(err)
			}
			fcell(b, ex, "pass")
			rw = append(rw, ms(time.Since(t)))
		}
		ex.Close()
		ws := b.TempDir()
		ex, err = ipybox.Start(ctx, &ipybox.Options{WorkDir: ws, SnapshotDir: filepath.Join(ws, ".ipybox", "snapshots", "rewind")})
		if err != nil {
			b.Fatal(err)
		}
		fcell(b, ex, "import numpy as np, os\narrs = [np.ones((10 << 20) // 8) for _ in range(10)]")
		var snap, restore []float64
		for range 5 {
			t := time.Now()
			fcell(b, ex, "x = 1")
			plain = append(plain, ms(time.Since(t)))
		}
		// Anchor: undo by snapshot, a Snapshot before the cell and a
		// Restore after it, to the next result.
		for range 3 {
			t := time.Now()
			if _, err := ex.Snapshot(ctx, nil); err != nil {
				b.Fatal(err)
			}
			snap = append(snap, ms(time.Since(t)))
			fcell(b, ex, "x = 1")
			t = time.Now()
			if _, err := ex.Restore(ctx); err != nil {
				b.Fatal(err)
			}
			fcell(b, ex, "pass")
			restore = append(restore, ms(time.Since(t)))
		}
		ex.Close()
		b.ReportMetric(p50(snap), "anchor-snapshot-p50-ms")
		b.ReportMetric(p50(restore), "anchor-restore-to-next-result-p50-ms")
		b.ReportMetric(p50(rw), "rewind-1-cell-to-next-result-p50-ms")
		b.ReportMetric(p50(with), "cell-keeping-a-boundary-p50-ms")
		b.ReportMetric(p50(plain), "cell-without-rewind-p50-ms")
	}
}

// BenchmarkRewindSnapshot measures rewind for a sandboxed kernel, whose
// boundaries are snapshots of the namespace (a small one, and 100 MiB of
// numpy arrays): what keeping one adds to each cell, against the same
// cell in a session that keeps none, and a rewind of one cell to the next
// result (a kernel restart and a load).
func BenchmarkRewindSnapshot(b *testing.B) {
	testenv.NeedsPython(b)
	testenv.NeedsTool(b, "bwrap")
	ctx := context.Background()
	for b.Loop() {
		b.ReportMetric(load1(b), "load-1m")
		for _, ns := range []struct{ name, code string }{
			{"small", "xs = list(range(100))\nd = {'a': 1}"},
			{"100mib", "import numpy as np\narrs = [np.ones((10 << 20) // 8) for _ in range(10)]"},
		} {
			var plain, with, rw []float64
			for _, depth := range []int{0, 1} {
				ws := b.TempDir()
				ex, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: ws, Sandbox: ipybox.DefaultSandbox(), RewindDepth: depth,
					SnapshotDir: filepath.Join(ws, ".ipybox", "snapshots", "s")})
				if err != nil {
					b.Fatal(err)
				}
				fcell(b, ex, ns.code)
				for range 5 {
					t := time.Now()
					fcell(b, ex, "x = 1")
					if depth == 0 {
						plain = append(plain, ms(time.Since(t)))
						continue
					}
					with = append(with, ms(time.Since(t)))
					t = time.Now()
					if _, err := ex.Rewind(ctx, 1); err != nil {
						b.Fatal(err)
					}
					fcell(b, ex, "pass")
					rw = append(rw, ms(time.Since(t)))
				}
				ex.Close()
			}
			b.ReportMetric(p50(plain), ns.name+"-cell-without-rewind-p50-ms")
			b.ReportMetric(p50(with), ns.name+"-cell-keeping-a-snapshot-boundary-p50-ms")
			b.ReportMetric(p50(rw), ns.name+"-rewind-1-cell-to-next-result-p50-ms")
		}
		b.ReportMetric(load1(b), "load-1m-after")
	}
}
