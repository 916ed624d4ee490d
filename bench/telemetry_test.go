//go:build unix

package bench

import (
	"context"
	"encoding/json"
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
	// A second Executor with tracing off is the control: two kernels
	// differ by themselves, and that difference is the noise floor of
	// on against off.
	off, on, ctl := open(false), open(true), open(false)
	exs := []*ipybox.Executor{off, on, ctl}

	n := max(b.N, 400)
	const block = 10
	cells := make([][]float64, 3)
	calls := make([][]float64, 3)
	cell := func(i int) {
		t0 := time.Now()
		if _, err := exs[i].Execute(ctx, "pass", nil); err != nil {
			b.Fatal(err)
		}
		cells[i] = append(cells[i], ms(time.Since(t0)))
	}
	// The tool call's time as kernel code sees it, each call timed in
	// Python: the cell around the block is not counted.
	callBlock := func(i int) {
		res, err := exs[i].Execute(ctx, `import time, json
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
		calls[i] = append(calls[i], ts...)
	}
	for range 20 { // warm all three
		for i := range exs {
			if _, err := exs[i].Execute(ctx, "pass", nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for r := range n {
		// By turns, each first in its turn, so that the load of a shared
		// machine falls on all three alike.
		for j := range exs {
			cell((r + j) % 3)
		}
		if r%block == 0 {
			for j := range exs {
				callBlock((r + j) % 3)
			}
		}
	}
	b.StopTimer()
	// Each round ran the three cells one after the other: the median of
	// the rounds' differences is what tracing adds with the machine's
	// drift taken out, beside the control's against off.
	pairedDiff := func(x, y []float64) float64 {
		d := make([]float64, len(x))
		for i := range d {
			d[i] = x[i] - y[i]
		}
		return p50(d)
	}
	co, cn, cc := p50(cells[0]), p50(cells[1]), p50(cells[2])
	to, tn, tc := p50(calls[0]), p50(calls[1]), p50(calls[2])
	added, floor := pairedDiff(cells[1], cells[0]), pairedDiff(cells[2], cells[0])
	b.ReportMetric(co, "cell-off-p50-ms")
	b.ReportMetric(cn, "cell-on-p50-ms")
	b.ReportMetric(added, "cell-added-ms")
	b.ReportMetric(floor, "cell-control-ms")
	b.ReportMetric(to, "call-off-p50-ms")
	b.ReportMetric(tn, "call-on-p50-ms")
	b.ReportMetric(tn-to, "call-added-ms")
	tp.ForceFlush(ctx)
	spans, _ := recv.Spans()
	b.Logf("p50 of %d each (OTLP/HTTP to loopback, %d spans received): pass cell off %.3f, on %.3f, control (off) %.3f ms; "+
		"median of the rounds' differences: on-off %+.3f ms (target <= +0.1), control-off %+.3f ms; tool call off %.3f, on %.3f, control %.3f ms (on-off %+.3f ms)",
		len(cells[0]), len(spans), co, cn, cc, added, floor, to, tn, tc, tn-to)
}
