//go:build unix

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
	"github.com/ipybox/ipybox/mcpserver"
)

// Durable sessions (docs/durable.md):
//
//	go test ./bench -run '^$' -bench 'Durable' -benchtime 5x -timeout 30m
//
// BenchmarkDurableResume and BenchmarkDurableCheckpoint run the MCP server
// in process (its heap is then this process's, and measurable);
// BenchmarkDurableRestart and BenchmarkDurableGatewayRestart run the
// binary and stop it with real signals.

// durableNamespace is 100 MiB of numpy arrays (ten of 10 MiB) and 1,000
// small objects, each under a name of its own.
const durableNamespace = `import numpy as np
arrs = [np.random.rand(1310720) for _ in range(10)]
g = globals()
for i in range(1000):
    g["o%d" % i] = {"i": i, "s": str(i)}
del g, i`

// durableCheck reads what durableNamespace made.
const durableCheck = `print(round(sum(a.nbytes for a in arrs) / 2**20), o999["s"])`

// inProc is an MCP server of this process, served over HTTP on loopback,
// and a 2026-07-28 client of it.
type inProc struct {
	srv *mcpserver.Server
	cs  *mcp.ClientSession
	ws  string
}

func startInProc(b *testing.B, o *mcpserver.Options) *inProc {
	b.Helper()
	py := testenv.NeedsPython(b)
	o.Python, o.HTTP.NoAuth = py, true
	if o.Workspace == "" {
		o.Workspace = b.TempDir()
	}
	srv, err := mcpserver.New(o)
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	b.Cleanup(func() { srv.Close(); hs.Close() })
	c := mcp.NewClient(&mcp.Implementation{Name: "ipybox-bench", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: hs.URL, DisableStandaloneSSE: true}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close() })
	return &inProc{srv: srv, cs: cs, ws: o.Workspace}
}

// handle calls create_session on cs.
func handle(b *testing.B, cs *mcp.ClientSession) string {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_session", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		b.Fatalf("create_session: %v %v", err, res)
	}
	var out struct{ Session string }
	raw, _ := json.Marshal(res.StructuredContent)
	if json.Unmarshal(raw, &out) != nil || out.Session == "" {
		b.Fatalf("create_session: %s", raw)
	}
	return out.Session
}

// cellIn runs code in session h and returns its text.
func cellIn(ctx context.Context, cs *mcp.ClientSession, h, code string) (string, error) {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_ipython_cell", Arguments: map[string]any{"code": code, "session": h, "timeout": 120}})
	if err != nil {
		return "", err
	}
	text := resultText(res)
	if res.IsError {
		return text, fmt.Errorf("error result: %.300s", text)
	}
	return strings.TrimSpace(text), nil
}

func mustCell(b *testing.B, cs *mcp.ClientSession, h, code string) string {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	out, err := cellIn(ctx, cs, h, code)
	if err != nil {
		b.Fatalf("cell %.60q: %v", code, err)
	}
	return out
}

// hibernated reports whether list_sessions shows session h hibernated.
func hibernated(cs *mcp.ClientSession, h string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), callBound)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_sessions", Arguments: map[string]any{}})
	if err != nil {
		return false
	}
	var out struct {
		Sessions []struct {
			Session    string
			Kernel     bool
			Hibernated bool
		}
	}
	raw, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(raw, &out)
	for _, s := range out.Sessions {
		if s.Session == h {
			return s.Hibernated && !s.Kernel
		}
	}
	return false
}

// heapMB is the live heap after a collection, in MiB.
func heapMB() float64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc) / (1 << 20)
}

// kernelProcs counts this process's descendants that run ipykernel.
func kernelProcs() int {
	n := 0
	for _, p := range testenv.Descendants(os.Getpid()) {
		if strings.Contains(p.Cmdline, "ipykernel") && !strings.Contains(p.Cmdline, "jupyter_server") {
			n++
		}
	}
	return n
}

// BenchmarkDurableResume is a session of 100 MiB of numpy arrays and
// 1,000 small objects that hibernates (--hibernate-after 1s: its kernel
// saves the namespace and stops) and is resumed by its next call: the
// time to that call's first result, which restores the namespace into a
// pooled kernel, unsandboxed and in the default sandbox. Beside it, in
// the same run, by turns: jupyter_client's cold start
// (KernelManager + first execute), the anchor of docs/design.md's target
// (resume <= 1 s p50). While hibernated: the session's kernel processes
// (target 0), and the server's heap per hibernated session, measured over
// 10 small sessions (target < 1 MiB).
func BenchmarkDurableResume(b *testing.B) {
	n := max(b.N, 3)
	var cold []float64
	var t strings.Builder
	fmt.Fprintf(&t, "resume of 100 MiB of arrays + 1,000 objects, to the first result (ms); target: p50 <= 1000\n")
	fmt.Fprintf(&t, "%-30s %9s %8s %8s %14s\n", "", "snapshot", "p50", "max", "session kernels")
	for _, c := range []struct {
		name string
		o    *mcpserver.Options
	}{
		{"nosandbox", &mcpserver.Options{Durability: mcpserver.DurabilityOptions{HibernateAfter: time.Second}, Sessions: mcpserver.SessionOptions{Pool: 1, NoZygote: true}}},
		{"sandbox", &mcpserver.Options{Sandbox: ipybox.DefaultSandbox(), Durability: mcpserver.DurabilityOptions{HibernateAfter: time.Second}, Sessions: mcpserver.SessionOptions{Pool: 1}}},
	} {
		if c.o.Sandbox != nil {
			if _, err := exec.LookPath("bwrap"); err != nil {
				fmt.Fprintf(&t, "%-30s skipped: no bwrap\n", c.name)
				continue
			}
		}
		resume, snapMB, asleep := resumeCase(b, c.o, n, func() { cold = append(cold, anchor(b, "start")["ms"].(float64)) })
		r := median(resume)
		b.ReportMetric(r, c.name+"-resume-p50-ms")
		fmt.Fprintf(&t, "%-30s %6.0f MiB %8.0f %8.0f %14d\n", c.name, snapMB, r, slices.Max(resume), asleep)
	}
	a := median(cold)
	b.ReportMetric(a, "anchor-cold-ms")
	fmt.Fprintf(&t, "%-30s %9s %8.0f %8.0f\n", "jupyter_client cold start", "", a, slices.Max(cold))

	// Memory: 10 small sessions, hibernated.
	q := startInProc(b, &mcpserver.Options{Durability: mcpserver.DurabilityOptions{HibernateAfter: time.Second}, Sessions: mcpserver.SessionOptions{Pool: 1, NoZygote: true}})
	settle(os.Getpid(), 30*time.Second)
	before := heapMB()
	const nsmall = 10
	var hs []string
	for range nsmall {
		hs = append(hs, handle(b, q.cs))
	}
	for _, sh := range hs {
		mustCell(b, q.cs, sh, "x = list(range(100))\nimport json")
	}
	if !waitFor(2*time.Minute, func() bool { return q.srv.KernelCount() == 0 }) {
		b.Fatal("the small sessions did not hibernate within 2 minutes")
	}
	perSession := (heapMB() - before) / nsmall * 1024
	procs := kernelProcs()
	b.ReportMetric(perSession, "heap-KiB/hibernated")
	fmt.Fprintf(&t, "hibernated: %d session kernels (target 0); %d ipykernel processes in this process's tree (the warm pools' kernels, none a session's); server heap %.0f KiB per hibernated session (target < 1024)",
		q.srv.KernelCount(), procs, perSession)
	b.Log(t.String())
}

// resumeCase hibernates a session of durableNamespace n times in a
// server with o, and times each resume; between, it calls between (the
// anchor, measured in turns with the resumes).
func resumeCase(b *testing.B, o *mcpserver.Options, n int, between func()) (resume []float64, snapMB float64, asleep int) {
	p := startInProc(b, o)
	h := handle(b, p.cs)
	mustCell(b, p.cs, h, durableNamespace)
	for i := range n {
		if !waitFor(2*time.Minute, func() bool { return hibernated(p.cs, h) }) {
			b.Fatal("the session did not hibernate within 2 minutes")
		}
		if i == 0 {
			asleep = p.srv.KernelCount()
			snapMB = float64(dirSize(filepath.Join(p.ws, ".ipybox", "snapshots"))) / (1 << 20)
		}
		// Let the pool refill, as it would in the minutes a session sleeps.
		settle(os.Getpid(), 30*time.Second)
		t0 := time.Now()
		out := mustCell(b, p.cs, h, durableCheck)
		resume = append(resume, msSince(t0))
		if !strings.HasSuffix(out, "100 999") || !strings.Contains(out, "names came back") {
			b.Fatalf("after the resume: %q", out)
		}
		between()
	}
	return resume, snapMB, asleep
}

// dirSize sums the sizes of the regular files below dir.
func dirSize(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// BenchmarkDurableCheckpoint is the cost of --checkpoint cell per cell,
// for a small namespace: cells run one after another in a session with
// checkpoints and in one without, by turns; each cell waits for the
// checkpoint of the one before (it holds the kernel), so the difference
// of the p50s is what a checkpoint costs a session that runs cells back
// to back. An agent's think time between cells hides it.
func BenchmarkDurableCheckpoint(b *testing.B) {
	off := startInProc(b, &mcpserver.Options{Sessions: mcpserver.SessionOptions{Pool: 1, NoZygote: true}})
	on := startInProc(b, &mcpserver.Options{Sessions: mcpserver.SessionOptions{Pool: 1, NoZygote: true}, Durability: mcpserver.DurabilityOptions{Checkpoint: mcpserver.CheckpointCell}})
	const setup = "import json, math\nd = {str(i): i for i in range(100)}\nxs = list(range(1000))\nk = 0"
	hoff, hon := handle(b, off.cs), handle(b, on.cs)
	mustCell(b, off.cs, hoff, setup)
	mustCell(b, on.cs, hon, setup)
	n := max(b.N, 100)
	var toff, ton []float64
	for range n {
		for _, c := range []struct {
			p  *inProc
			h  string
			ts *[]float64
		}{{off, hoff, &toff}, {on, hon, &ton}} {
			t0 := time.Now()
			mustCell(b, c.p.cs, c.h, "k += 1")
			*c.ts = append(*c.ts, msSince(t0))
		}
	}
	o, w := median(toff), median(ton)
	b.ReportMetric(o, "none-p50-ms")
	b.ReportMetric(w, "cell-p50-ms")
	b.ReportMetric(w-o, "cost-ms")
	b.Logf("cell `k += 1` back to back, %d each: --checkpoint none p50 %.1f ms, --checkpoint cell p50 %.1f ms: +%.1f ms per cell (small namespace: 1,100 values, a module)", n, o, w, w-o)
}

// durableBinary is `ipybox mcp --http` run by a benchmark, with its
// token, for a restart on the same one.
type durableBinary struct {
	*mcpServer
	tokFile string
}

func startDurable(b *testing.B, bin, ws, py, tokFile string, args ...string) *durableBinary {
	b.Helper()
	return &durableBinary{startMCPWith(b, bin, "127.0.0.1:0", ws, py, tokFile, args...), tokFile}
}

func (s *durableBinary) client(b *testing.B) *mcp.ClientSession {
	b.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "ipybox-bench", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: s.url, DisableStandaloneSSE: true, HTTPClient: s.hc}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close() })
	return cs
}

func tokenFile(b *testing.B) string {
	f := filepath.Join(b.TempDir(), "token")
	if err := os.WriteFile(f, []byte("durable-bench-token-0123456789\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	return f
}

// restartOnce makes sessions sessions in a server started with args, stops
// it with sig, starts it again with the same workspace and token, and
// calls every handle at once: it returns how long the stop took, each
// session's time from the common start to its first result, and the
// failures. check is each session's first cell after the restart; want
// the end of its output.
func restartOnce(b *testing.B, bin, py string, sessions int, sig syscall.Signal, args []string, setup, check, want string) (stop time.Duration, ms []float64, errs []string, s2 *durableBinary) {
	ws, tok := b.TempDir(), tokenFile(b)
	s := startDurable(b, bin, ws, py, tok, args...)
	cs := s.client(b)
	hs := make([]string, sessions)
	var wg sync.WaitGroup
	for i := range sessions {
		hs[i] = handle(b, cs)
	}
	for i := range sessions {
		wg.Go(func() { mustCell(b, cs, hs[i], fmt.Sprintf(setup, i)) })
	}
	wg.Wait()
	cs.Close()
	t0 := time.Now()
	syscall.Kill(s.pid(), sig)
	select {
	case <-s.exited:
	case <-time.After(2 * time.Minute):
		b.Fatalf("ipybox mcp did not exit within 2 minutes of %v", sig)
	}
	stop = time.Since(t0)
	s2 = startDurable(b, bin, ws, py, tok, args...)
	cs2 := s2.client(b)
	var mu sync.Mutex
	go1 := make(chan struct{})
	var start time.Time
	for i := range sessions {
		wg.Go(func() {
			<-go1
			ctx, cancel := context.WithTimeout(context.Background(), callBound)
			defer cancel()
			out, err := cellIn(ctx, cs2, hs[i], check)
			d := msSince(start)
			mu.Lock()
			defer mu.Unlock()
			if err == nil && !strings.HasSuffix(out, fmt.Sprintf(want, i)) {
				err = fmt.Errorf("output %.300q, want it to end with %q", out, fmt.Sprintf(want, i))
			}
			if err != nil {
				errs = append(errs, fmt.Sprintf("session %d after %.0f ms: %v", i, d, err))
				return
			}
			ms = append(ms, d)
		})
	}
	start = time.Now()
	close(go1)
	wg.Wait()
	return stop, ms, errs, s2
}

// BenchmarkDurableRestart is 20 sessions with their variables, the
// server stopped with SIGTERM (every session hibernates) and started
// again on the same workspace and token, then each handle's first result,
// all called at once. Target: 20 of 20 with their variables, the last in
// under 5 s on 2 cores. Beside it, the same 20 first cells as fresh
// sessions of a restarted server (what a restart cost before: a cold
// kernel, no state).
func BenchmarkDurableRestart(b *testing.B) {
	py := testenv.NeedsPython(b)
	bin := testenv.Binary(b)
	const sessions = 20
	var t strings.Builder
	fmt.Fprintf(&t, "%d sessions: SIGTERM, restart, every handle's first result at once (ms from the common start); target: 20/20, max < 5000 on 2 cores\n", sessions)
	fmt.Fprintf(&t, "%-34s %9s %8s %8s %6s\n", "", "stop (ms)", "median", "max", "ok")
	for _, c := range []struct {
		name string
		args []string
	}{
		{"nosandbox", []string{"--no-sandbox"}},
		{"sandbox", nil},
	} {
		if c.args == nil {
			if _, err := exec.LookPath("bwrap"); err != nil {
				fmt.Fprintf(&t, "%-34s skipped: no bwrap\n", "default flags (sandbox, pool 1)")
				continue
			}
		}
		for range b.N {
			stop, ms, errs, _ := restartOnce(b, bin, py, sessions, syscall.SIGTERM, c.args,
				"v = {'i': %d, 'xs': list(range(1000))}\ndef f(): return v['i']\nimport json",
				"print(f(), len(v['xs']), json.dumps(1))", "%d 1000 1")
			for _, e := range errs {
				b.Errorf("%s: %s", c.name, e)
			}
			label := "ipybox mcp " + strings.Join(c.args, " ")
			if c.args == nil {
				label = "default flags (sandbox, pool 1)"
			}
			if len(ms) == 0 {
				fmt.Fprintf(&t, "%-34s %9.0f %8s %8s %3d/%d\n", label, ms64(stop), "-", "-", 0, sessions)
				continue
			}
			fmt.Fprintf(&t, "%-34s %9.0f %8.0f %8.0f %3d/%d\n", label, ms64(stop), median(ms), slices.Max(ms), len(ms), sessions)
			b.ReportMetric(slices.Max(ms), c.name+"-max-ms")
			b.ReportMetric(ms64(stop), c.name+"-stop-ms")
		}
	}
	b.Log(strings.TrimSuffix(t.String(), "\n"))
}

func ms64(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// BenchmarkDurableGatewayRestart is a front end on a Jupyter Server with
// 5 sessions, killed with SIGKILL and started again: each handle's first
// result (at once) comes from the same kernel, its state intact, with no
// snapshot written; the gateway runs as many kernels as before.
func BenchmarkDurableGatewayRestart(b *testing.B) {
	py := testenv.NeedsPython(b)
	bin := testenv.Binary(b)
	j := testenv.JupyterServer(b, nil)
	gtok := filepath.Join(b.TempDir(), "gateway-token")
	if err := os.WriteFile(gtok, []byte(j.Token+"\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	const sessions = 5
	args := []string{"--gateway-url", j.URL, "--gateway-token-file", gtok, "--pool", "0"}
	for range b.N {
		_, ms, errs, s2 := restartOnce(b, bin, py, sessions, syscall.SIGKILL, args,
			"v = %d", "print(v)", "%d")
		for _, e := range errs {
			b.Errorf("%s", e)
		}
		_ = s2
		kernels := gatewayKernelCount(b, j)
		if kernels != sessions {
			b.Errorf("the gateway runs %d kernels after the restart, want the %d it ran", kernels, sessions)
		}
		if len(ms) > 0 {
			b.ReportMetric(slices.Max(ms), "max-ms")
			b.Logf("gateway front end: SIGKILL, restart, %d/%d sessions reattached with their state (no snapshot: a gateway session has no snapshot folder), first results at once: median %.0f ms, max %.0f ms; gateway kernels after: %d", len(ms), sessions, median(ms), slices.Max(ms), kernels)
		}
	}
}

// gatewayKernelCount counts the kernels j runs.
func gatewayKernelCount(b *testing.B, j *testenv.Jupyter) int {
	req, _ := http.NewRequest("GET", j.URL+"/api/kernels", nil)
	req.Header.Set("Authorization", "token "+j.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var ks []map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&ks); err != nil {
		b.Fatal(err)
	}
	return len(ks)
}
