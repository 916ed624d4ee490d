package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
)

// BenchmarkLauncherOverhead starts `true` directly and in the sandbox, in
// alternation, and reports both times and their ratio (the overhead of
// bwrap, the init and its second stage, seccomp included).
func BenchmarkLauncherOverhead(b *testing.B) {
	x := newSbx(b, nil, nil)
	ctx := context.Background()
	spec := &kernel.Spec{Path: "/usr/bin/true", Env: []string{"PATH=/usr/bin"}, Dir: x.ws, RunDir: x.run}
	run := func(l kernel.Launcher) time.Duration {
		t0 := time.Now()
		p, err := l.Start(ctx, spec)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Wait(context.Background()); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	run(x) // the probe runs once, outside the measurement
	var direct, sandboxed time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		direct += run(kernel.DirectLauncher{})
		sandboxed += run(x)
	}
	b.ReportMetric(float64(direct.Microseconds())/float64(b.N), "direct-µs/op")
	b.ReportMetric(float64(sandboxed.Microseconds())/float64(b.N), "sandbox-µs/op")
	b.ReportMetric(float64(sandboxed)/float64(direct), "ratio")
}
