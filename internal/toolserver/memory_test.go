package toolserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
	"github.com/ipybox/ipybox/internal/toolserver"
)

// heapPeak samples the heap (live and not yet collected objects) until
// stop is called, and returns its peak over the level at the start, after
// a GC.
func heapPeak() (stop func() uint64) {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	base := read()
	var peak uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(200 * time.Microsecond)
		defer t.Stop()
		for {
			peak = max(peak, read())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return max(peak, base) - base
	}
}

// bodyOf builds a tool-call body of n bytes whose args hold one big value
// of the given shape: a string, or an array of numbers, of empty objects,
// of empty arrays or of empty strings. Decoded into Go maps and slices,
// the arrays take 20 to 40 times their text.
func bodyOf(shape string, n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"server":"test","tool":"tool_2","args":{"v":`)
	rest := n - b.Len() - 2
	if shape == "string" {
		b.WriteString(`"` + strings.Repeat("x", rest-2) + `"`)
	} else {
		elem := map[string]string{"numbers": "0,", "objects": "{},", "arrays": "[],", "strings": `"",`}[shape]
		k := (rest - 2) / len(elem)
		b.WriteString("[" + strings.Repeat(elem, k))
		b.Truncate(b.Len() - 1)
		b.WriteString(strings.Repeat(" ", rest-2-k*len(elem)+1) + "]")
	}
	b.WriteString("}}")
	return b.Bytes()
}

// TestCallMemoryBounded attacks invariant 10 with the largest bodies kernel
// code may send, shaped to cost the most once decoded, through a real
// go-sdk client to a real MCP server (the Go test server over stdio): one
// call holds at most a small multiple of its body on the host, and four
// at once no more than the server's MaxHeldBytes lets in. Before, one
// such call took 650 MB and four took 2.9 GB.
func TestCallMemoryBounded(t *testing.T) {
	// The heap's peak counts every test's allocations: a process of its
	// own, while the package's other tests run.
	if testenv.Alone(t) {
		return
	}
	bin := mcptest.Build(t)
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t"}, nil).Connect(ctx, &mcp.CommandTransport{Command: exec.Command(bin)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ts := start(t, &sessionCaller{name: "test", cs: cs}, &toolserver.Options{Approver: toolserver.AutoApprove})
	post := func(body []byte) {
		r, err := http.NewRequest("POST", "http://localhost/v1/tools/call", bytes.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		r.Header.Set("Authorization", "Bearer "+ts.Token())
		r.Header.Set("Content-Type", "application/json")
		resp, err := ts.unix.Do(r)
		if err != nil {
			t.Error(err)
			return
		}
		// tool_2 refuses the argument it does not know: a result all
		// the same, the whole way there and back.
		var res struct{ Content []struct{ Text string } }
		err = json.NewDecoder(resp.Body).Decode(&res)
		resp.Body.Close()
		if resp.StatusCode != 200 || err != nil || len(res.Content) != 1 {
			t.Errorf("HTTP %d %v %+v; want tool_2's answer", resp.StatusCode, err, res)
		}
	}
	// Under the go-sdk's 16 MiB limit of one JSON-RPC line, so that the
	// MCP server answers.
	const size = 15 << 20
	// The heap counts garbage not yet collected too: the pacer lets it
	// reach twice what is live (about 4x the body), and a collection
	// that starts late under load adds a little more.
	const perCall, held = 10 * size, 10 * toolserver.DefaultMaxHeldBytes
	for _, shape := range []string{"string", "numbers", "objects"} {
		body := bodyOf(shape, size)
		for _, n := range []int{1, 4} {
			stop := heapPeak()
			rss, _ := rssPeak(t)
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() { post(body) })
			}
			wg.Wait()
			peak := stop()
			grew := rss()
			t.Logf("%-7s ×%d, %d MiB each: the heap grew by %d MB at most, the resident set by %d MB", shape, n, len(body)>>20, peak/1e6, grew/1e6)
			limit := uint64(perCall)
			if n > 1 {
				limit = held
			}
			if peak > limit {
				t.Errorf("%s ×%d: the heap grew by %d MB; want at most %d MB", shape, n, peak/1e6, limit/1e6)
			}
		}
	}
}

// blockingCaller holds every call until release is closed, and counts the
// calls that reached it.
type blockingCaller struct {
	release chan struct{}
	mu      sync.Mutex
	n       int
}

func (c *blockingCaller) CallTool(ctx context.Context, _, _ string, _ json.RawMessage) (*mcp.CallToolResult, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	select {
	case <-c.release:
		return text("done"), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *blockingCaller) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// waitFor polls cond for up to 60 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	// A bound for a wedged test, not a speed check: under CI's load
	// (the race detector, 40 runnable threads on 2 cores) ten held 16 MiB
	// requests took more than 5 s to be admitted.
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 60 s: %s", what)
		}
	}
}

// TestCallsWaitInLine: past MaxConcurrentCalls, calls wait with their
// bodies unread, and go on as earlier ones finish; past four times as
// many waiting, a call is answered 429 "busy" at once.
func TestCallsWaitInLine(t *testing.T) {
	testenv.CheckGoroutines(t)
	c := &blockingCaller{release: make(chan struct{})}
	ts := start(t, c, &toolserver.Options{Approver: toolserver.AutoApprove, MaxConcurrentCalls: 2})
	var wg sync.WaitGroup
	answers := make(chan reply, 10)
	for i := range 10 { // 2 run, 8 wait
		wg.Go(func() { answers <- ts.do(t, req{path: "/v1/tools/call", body: call("s", "t", map[string]int{"i": i})}) })
	}
	waitFor(t, "2 calls reach the caller, 8 wait", func() bool {
		calls, _, _ := ts.Held()
		return c.count() == 2 && calls == 2 && ts.Waiting() == 8
	})
	got := ts.do(t, req{path: "/v1/tools/call", body: call("s", "t", map[string]string{"big": strings.Repeat("x", 1<<20)})})
	if got.status != http.StatusTooManyRequests || got.kind != "busy" {
		t.Errorf("an 11th call: HTTP %d %s %q; want 429 busy", got.status, got.kind, got.msg)
	}
	// The runtime raises it as ToolServerBusyError.
	py := pythons(t)[0]
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "PYTHONDONTWRITEBYTECODE=1",
		"PYTHONPATH=" + filepath.Join(testenv.RepoRoot(t), "internal", "pyruntime"),
		toolserver.EnvURL + "=" + ts.unixURL, toolserver.EnvToken + "=" + ts.Token()}
	want := "ToolServerBusyError | ['ToolServerError', 'ToolRunnerError'] | busy 429 | the tool server already holds 2 requests"
	if out := runPy(t, py, env, pyPrelude+`show(lambda: run_tool("s", "t", {}))`); !strings.HasPrefix(out, want) {
		t.Errorf("from Python:\n%s\nwant it to start with\n%s", out, want)
	}
	close(c.release)
	wg.Wait()
	close(answers)
	for a := range answers {
		if a.status != 200 {
			t.Errorf("a call that waited: HTTP %d %s %q", a.status, a.kind, a.msg)
		}
	}
	if calls, b, total := ts.Held(); calls != 0 || b != 0 || total != 0 {
		t.Errorf("after the calls, held %d calls, %d bytes, %d in the process; want none", calls, b, total)
	}
}

// TestHeldBytesBounded: a kernel's bodies, and the process's, wait in line
// once their bytes would pass MaxHeldBytes, or TotalHeldBytes across
// servers.
func TestHeldBytesBounded(t *testing.T) {
	testenv.CheckGoroutines(t)
	body := call("s", "t", map[string]string{"v": strings.Repeat("x", 600<<10)})
	t.Run("per server", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := &blockingCaller{release: make(chan struct{})}
			ts := startOn(t, testenv.NewNetwork(), c, &toolserver.Options{Approver: toolserver.AutoApprove, MaxBodyBytes: 1 << 20, MaxHeldBytes: 1 << 20})
			var wg sync.WaitGroup
			for range 2 {
				wg.Go(func() {
					if got := ts.do(t, req{path: "/v1/tools/call", body: body}); got.status != 200 {
						t.Errorf("HTTP %d %s %q", got.status, got.kind, got.msg)
					}
				})
			}
			// Both calls as far as they can get: every goroutine blocked.
			synctest.Wait()
			if c.count() != 1 || ts.Waiting() != 1 {
				t.Errorf("%d calls run and %d wait with %d bytes each; want 1 and 1 under MaxHeldBytes 1 MiB", c.count(), ts.Waiting(), len(body))
			}
			close(c.release)
			wg.Wait()
		})
	})
	t.Run("per process", func(t *testing.T) {
		defer toolserver.SetTotalHeldBytes(1 << 20)()
		c := &blockingCaller{release: make(chan struct{})}
		opts := &toolserver.Options{Approver: toolserver.AutoApprove, MaxBodyBytes: 1 << 20}
		a, b := start(t, c, opts), start(t, c, opts)
		var wg sync.WaitGroup
		for _, ts := range []*testServer{a, b} {
			wg.Go(func() {
				if got := ts.do(t, req{path: "/v1/tools/call", body: body}); got.status != 200 {
					t.Errorf("HTTP %d %s %q", got.status, got.kind, got.msg)
				}
			})
		}
		waitFor(t, "one call runs, one waits", func() bool { return c.count() == 1 && a.Waiting()+b.Waiting() == 1 })
		close(c.release)
		wg.Wait()
	})
}

// TestKernelCallsResidentBounded: the host memory of one kernel's calls in
// total, as the process's resident set measures it from a fresh process:
// one kernel sends four 15 MiB calls at once, shaped to cost the most, to
// a real MCP server; the resident set grows by at most 256 MiB (its bodies
// wait in line past MaxHeldBytes, and each holds a small multiple of its
// size). Four kernels of one principal, one such call each, are logged
// beside it: their principal's share of the process's budget admits four.
func TestKernelCallsResidentBounded(t *testing.T) {
	if testenv.Race {
		t.Skip("the race detector's shadow memory is resident too: the heap's bound is TestCallMemoryBounded's")
	}
	for _, kernels := range []int{1, 4} {
		t.Run(fmt.Sprintf("%d kernels", kernels), func(t *testing.T) {
			if testenv.Alone(t) {
				return
			}
			if _, ok := rssPeak(t); !ok {
				testenv.Missing(t, "no /proc/self/clear_refs: the resident set's peak cannot be reset")
			}
			bin := mcptest.Build(t)
			ctx := context.Background()
			var servers []*testServer
			for range kernels {
				cs, err := mcp.NewClient(&mcp.Implementation{Name: "t"}, nil).Connect(ctx, &mcp.CommandTransport{Command: exec.Command(bin)}, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer cs.Close()
				servers = append(servers, start(t, &sessionCaller{name: "test", cs: cs}, &toolserver.Options{Approver: toolserver.AutoApprove}))
			}
			body := bodyOf("numbers", 15<<20)
			calls := 4
			if kernels > 1 {
				calls = 1
			}
			rss, _ := rssPeak(t) // after the MCP servers' start, and the body
			var wg sync.WaitGroup
			for _, ts := range servers {
				for range calls {
					wg.Go(func() {
						if got := ts.do(t, req{path: "/v1/tools/call", body: string(body)}); got.status != 200 {
							t.Errorf("HTTP %d %s %q", got.status, got.kind, got.msg)
						}
					})
				}
			}
			wg.Wait()
			grew := rss()
			t.Logf("%d kernel(s) × %d call(s) of %d MiB at once: the resident set grew by %d MiB", kernels, calls, len(body)>>20, grew>>20)
			if kernels == 1 && grew > 256<<20 {
				t.Errorf("one kernel's calls grew the resident set by %d MiB; want at most 256 MiB", grew>>20)
			}
		})
	}
}
