//go:build unix

package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/testenv"
)

// BenchmarkMCPReset is the MCP reset tool to the next result ("1") of a
// session of `ipybox mcp`: with the default flags (sandboxed, forked, a
// pool of 1, so that a reset swaps in the pooled kernel), with --pool 0
// (a restart in place, forked and cold), and unsandboxed, beside
// jupyter_client's restart_kernel in the same run. Between resets it waits
// 2 s for the pool to refill, and counts the resets that swapped. Target
// (issue 38): < 50 ms.
//
//	go test ./bench -run '^$' -bench MCPReset -benchtime 5x
func BenchmarkMCPReset(b *testing.B) {
	py := testenv.NeedsPython(b)
	bin := testenv.Binary(b)
	testenv.NeedsTool(b, "bwrap")
	a := anchor(b, "lifecycle", strconv.Itoa(max(b.N, 5)))
	ar := a["restart_ms"].(float64)
	var t strings.Builder
	fmt.Fprintf(&t, "reset to the next result, median of %d (ms); target < 50\n", b.N)
	fmt.Fprintf(&t, "%-58s %8s %8s %8s %10s\n", "", "median", "max", "swapped", "x restart")
	for _, c := range []struct {
		name string
		args []string
	}{
		{"default", nil},
		{"pool0-forked", []string{"--pool", "0"}},
		{"pool0-cold", []string{"--pool", "0", "--sandbox-fork-server=false"}},
		{"nosandbox", []string{"--no-sandbox"}},
	} {
		ms, swapped := resetCase(b, bin, py, c.args)
		med, mx := median(ms), 0.0
		for _, v := range ms {
			mx = max(mx, v)
		}
		b.ReportMetric(med, c.name+"-reset-ms")
		label := "ipybox mcp " + strings.Join(c.args, " ")
		if c.args == nil {
			label = "ipybox mcp (default flags: sandbox, forked, pool 1)"
		}
		fmt.Fprintf(&t, "%-58s %8.0f %8.0f %5d/%-2d %10.3f\n", label, med, mx, swapped, len(ms), med/ar)
	}
	b.ReportMetric(ar, "restart_kernel-ms")
	fmt.Fprintf(&t, "%-58s %8.0f\n", "jupyter_client restart_kernel", ar)
	b.Log(strings.TrimSuffix(t.String(), "\n"))
}

// resetCase starts a server with args and times b.N resets of one
// session, each to its next result, 2 s apart.
func resetCase(b *testing.B, bin, py string, args []string) (ms []float64, swapped int) {
	b.Helper()
	s := startMCP(b, bin, "127.0.0.1:0", b.TempDir(), py, args...)
	defer s.stop(b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs, err := s.connect(ctx)
	if err != nil {
		b.Fatalf("session: %v\n%s", err, s.stderr)
	}
	defer closeSessions([]*mcp.ClientSession{cs})
	if out, err := cell(ctx, cs, "x = 1\nprint(x)"); err != nil || out != "1" {
		b.Fatalf("first cell: %q, %v\n%s", out, err, s.stderr)
	}
	for range b.N {
		time.Sleep(2 * time.Second) // the pool refills
		t0 := time.Now()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "reset", Arguments: map[string]any{}})
		if err != nil || res.IsError {
			b.Fatalf("reset: %v %v", err, res)
		}
		if out, err := cell(ctx, cs, "print('x' in globals())"); err != nil || out != "False" {
			b.Fatalf("after reset: %q, %v", out, err)
		}
		ms = append(ms, msSince(t0))
		if strings.Contains(resultText(res), "started in advance") {
			swapped++
		}
	}
	return ms, swapped
}
