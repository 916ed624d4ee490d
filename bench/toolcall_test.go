//go:build unix

package bench

import (
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkToolCall is the round trip of a trivial tool (the Go test
// server's tool_2 over stdio) called from kernel code, beside a direct
// go-sdk CallTool to the same server build. Target: ipybox adds at most
// 1.5 ms at p50. It is measured with approval off (the plumbing alone) and
// with approval on, answered at once by Execute (one more hop through the
// application).
func BenchmarkToolCall(b *testing.B) {
	bin := mcptest.Build(b)
	n := max(b.N, 300)

	// The anchor: a go-sdk client calling the server directly.
	ctx := context.Background()
	client := mcp.NewClient(&mcp.Implementation{Name: "bench"}, nil)
	sess, err := client.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(bin)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Close()
	direct := make([]float64, 0, n)
	for i := range n + 20 {
		t0 := time.Now()
		if _, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "tool_2", Arguments: map[string]any{}}); err != nil {
			b.Fatal(err)
		}
		if i >= 20 {
			direct = append(direct, float64(time.Since(t0).Microseconds())/1000)
		}
	}

	fromKernel := func(approve bool) float64 {
		// Approval on: an approver that accepts at once (a nil one rejects).
		py := testenv.NeedsPython(b)
		opts := &ipybox.Options{Python: py, WorkDir: b.TempDir(), Approver: ipybox.ApproveAll}
		if !approve {
			opts = &ipybox.Options{Python: py, WorkDir: b.TempDir(), NoToolApproval: true}
		}
		ex, err := ipybox.Start(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		defer ex.Close()
		if _, err := ex.RegisterMCPServer(ctx, "go", ipybox.ServerConfig{Command: bin}); err != nil {
			b.Fatal(err)
		}
		res, err := ex.Execute(ctx, `import time, json
from mcptools.go.tool_2 import Params, run
p = Params()
for _ in range(20):
    run(p)
ts = []
for _ in range(`+itoa(n)+`):
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
		return p50(ts)
	}
	b.ResetTimer()
	off := fromKernel(false)
	on := fromKernel(true)
	d := p50(direct)
	b.ReportMetric(d, "direct-p50-ms")
	b.ReportMetric(off, "kernel-p50-ms")
	b.ReportMetric(off-d, "added-ms")
	b.ReportMetric(on-d, "added-approved-ms")
	b.Logf("tool_2 over stdio, p50 of %d: direct go-sdk %.3f ms; from kernel code %.3f ms (adds %.3f ms, target <= 1.5); with approval answered by Execute %.3f ms (adds %.3f ms)",
		n, d, off, off-d, on, on-d)
}

func p50(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
