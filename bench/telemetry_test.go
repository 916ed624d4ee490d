//go:build unix

package bench

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/telemetry/otlp"
	"github.com/ipybox/ipybox/internal/telemetry/otlptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// BenchmarkTracing is what tracing costs a `pass` cell and a tool call
// from kernel code (the Go test server's tool_2 over stdio, approved by
// Execute's Approver), with tracing off beside tracing on in the same run:
// two Executors, measured by turns (a cell each, a block of calls each) so
// that the load of a shared machine hits both alike. On is the CLI's setup: the SDK's batch
// processor exporting over OTLP/HTTP to a receiver on loopback. Target:
// at most +0.1 ms at p50 per cell when on.
func BenchmarkTracing(b *testing.B) {
	py := testenv.NeedsPython(b)
	bin := mcptest.Build(b)
	ctx := context.Background()
	recv := otlptest.Start(b)
	tp, err := otlp.Start(ctx, &otlp.Config{Endpoint: recv.URL})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tp.Shutdown(context.Background()) })
	open := func(traced bool) *ipybox.Executor {
		o := &ipybox.Options{Python: py, WorkDir: b.TempDir(), Approver: ipybox.ApproveAll}
		if traced {
			o.TracerProvider = tp
		}
		ex, err := ipybox.Start(ctx, o)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ex.Close() })
		if _, err := ex.RegisterMCPServer(ctx, "go", ipybox.ServerConfig{Command: bin}); err != nil {
			b.Fatal(err)
		}
		if _, err := ex.Execute(ctx, "from mcptools.go.tool_2 import Params, run\np = Params()\nfor _ in range(20): run(p)", nil); err != nil {
			b.Fatal(err)
		}
		return ex
	}
	off, on := open(false), open(true)

	n := max(b.N, 400)
	const block = 10
	var cellOff, cellOn, callOff, callOn []float64
	cell := func(ex *ipybox.Executor, into *[]float64) {
		t0 := time.Now()
		if _, err := ex.Execute(ctx, "pass", nil); err != nil {
			b.Fatal(err)
		}
		*into = append(*into, ms(time.Since(t0)))
	}
	// The tool call's time as kernel code sees it, each call timed in
	// Python: the cell around the block is not counted.
	calls := func(ex *ipybox.Executor, into *[]float64) {
		res, err := ex.Execute(ctx, `import time, json
ts = []
for _ in range(`+itoa(block)+`):
    t0 = time.perf_counter()
    run(p)
    ts.append((time.perf_counter() - t0) * 1000)
print(json.dumps(ts))`, nil)
		if err != nil {
			b.Fatal(err)
		}
		var ts []float64
		if err := json.Unmarshal([]byte(res.Text), &ts); err != nil {
			b.Fatalf("%v: %.200s", err, res.Text)
		}
		*into = append(*into, ts...)
	}
	for range 20 { // warm both
		cell(off, new([]float64))
		cell(on, new([]float64))
	}
	b.ResetTimer()
	for i := range n {
		if i%2 == 0 { // neither always goes first
			cell(off, &cellOff)
			cell(on, &cellOn)
		} else {
			cell(on, &cellOn)
			cell(off, &cellOff)
		}
		if i%block == 0 {
			calls(off, &callOff)
			calls(on, &callOn)
		}
	}
	b.StopTimer()
	co, cn, to, tn := p50(cellOff), p50(cellOn), p50(callOff), p50(callOn)
	b.ReportMetric(co, "cell-off-p50-ms")
	b.ReportMetric(cn, "cell-on-p50-ms")
	b.ReportMetric(cn-co, "cell-added-ms")
	b.ReportMetric(to, "call-off-p50-ms")
	b.ReportMetric(tn, "call-on-p50-ms")
	b.ReportMetric(tn-to, "call-added-ms")
	tp.ForceFlush(ctx)
	spans, _ := recv.Spans()
	b.Logf("p50 of %d each, tracing off vs on (OTLP/HTTP to loopback, %d spans received): pass cell %.3f vs %.3f ms (%+.3f ms, target <= +0.1); tool call %.3f vs %.3f ms (%+.3f ms); p90 cell %.3f vs %.3f ms",
		len(cellOff), len(spans), co, cn, cn-co, to, tn, tn-to, pct90(cellOff), pct90(cellOn))
}

func pct90(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)*9/10]
}
