package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/telemetry"
	"github.com/ipybox/ipybox/internal/telemetry/otlptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestObservability is issue 31's end-to-end test, through the binary:
// `ipybox mcp --http` with --otel-endpoint (a receiver in this test that
// decodes OTLP/HTTP with the OTLP protobuf package) and --metrics-addr,
// which a real Prometheus (Debian's package, started here on loopback)
// scrapes with the bearer token while a session runs. An MCP client sends
// one execute_ipython_cell with a traceparent in _meta; the cell calls
// three tools of a Go test MCP server, two of them approved by
// elicitation. Then:
//   - Prometheus's query API shows the session, the kernel, the cell, the
//     three calls and their approvals, their latencies, the kernel's start
//     and memory and the host's RSS;
//   - one trace holds the request's cell (the child of the request's
//     span), its three tool calls (the cell's children) and their
//     approvals and MCP requests (the calls' children);
//   - the traceparent each call brought the MCP server is that call's
//     MCP request span;
//   - no attribute holds a secret: the ${VAR} value of the server's
//     header, the MCP bearer token, the tool server's token, the
//     collector's key (which reaches the receiver, and no MCP server);
//   - the debug log's tool call lines carry the trace.
func TestObservability(t *testing.T) {
	testenv.NeedsPython(t)
	promBin := testenv.NeedsTool(t, "prometheus")
	recv := otlptest.Start(t)
	var mu sync.Mutex
	var seen []string // traceparents the MCP server got
	mcpURL := mcptest.StartHTTP(t, "http", &mcptest.Options{TraceParent: func(_, tp string) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, tp)
	}})

	const secret = "obs-secret-header-value-77123"
	const collectorKey = "obs-collector-key-90210"
	dir := t.TempDir()
	token := "obs-test-token-" + strconv.Itoa(os.Getpid()) + "-abcdefghijklmnop"
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "ipybox.log")
	ws := t.TempDir()
	b := startHTTPCmd(t, exec.Command(os.Args[0], "mcp", "--http", "127.0.0.1:0", "--auth-token-file", tokenFile,
		"--metrics-addr", "127.0.0.1:0", "--otel-endpoint", recv.URL,
		"--workspace", ws, "--no-sandbox", "--pool", "0", "--allow-host-servers",
		"--approval", "elicit", "--allow-tool", "go.tool_2",
		"--log-level", "debug", "--log-file", logFile),
		"OBS_TEST_SECRET="+secret, "OTEL_BSP_SCHEDULE_DELAY=100",
		"OTEL_EXPORTER_OTLP_HEADERS=x-collector-key="+collectorKey)
	b.token = token
	m := regexp.MustCompile(`serving Prometheus metrics at (http://\S+/metrics)`).FindStringSubmatch(b.stderr.String())
	if m == nil {
		t.Fatalf("no metrics address in the output:\n%s", b.stderr)
	}
	metricsURL := m[1]

	// The endpoint takes --http's token rules.
	if resp, err := http.Get(metricsURL); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("metrics without the token: %v %v; want 401", resp, err)
	}

	prom := startPrometheus(t, promBin, strings.TrimPrefix(strings.TrimSuffix(metricsURL, "/metrics"), "http://"), tokenFile)

	cs := goClient(t, &mcp.StreamableClientTransport{Endpoint: b.url, HTTPClient: b.httpClient()}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{}}, nil
		},
	})
	if out, isErr := callText(t, cs, "register_mcp_server", map[string]any{
		"server_name":   "go",
		"server_params": map[string]any{"url": mcpURL, "headers": map[string]string{"X-Secret": "${OBS_TEST_SECRET}"}},
	}); isErr {
		t.Fatalf("register_mcp_server: %s", out)
	}

	// The agent's request span: the cell's parent.
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{
		Meta: mcp.Meta{"traceparent": "00-" + traceID + "-" + parentID + "-01"},
		Name: "execute_ipython_cell",
		Arguments: map[string]any{"code": `import os, ipybox_runtime
from mcptools.go import tool_1, tool_2, traceparent
tool_1.run(tool_1.Params(s="x"))
tool_2.run(tool_2.Params())
print("server", traceparent.run(traceparent.Params()))
print("kernel", ipybox_runtime.traceparent())
print("token", os.environ["IPYBOX_TOOL_TOKEN"])`},
	})
	if err != nil || res.IsError {
		t.Fatalf("execute_ipython_cell: %v %v", err, res)
	}
	lines := map[string]string{}
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			for _, l := range strings.Split(tc.Text, "\n") {
				k, v, _ := strings.Cut(l, " ")
				lines[k] = v
			}
		}
	}
	toolToken := lines["token"]
	if len(toolToken) < 32 {
		t.Fatalf("no tool token in the output: %v", res.Content)
	}

	// Metrics, through Prometheus, while the session runs.
	for _, q := range []struct {
		query string
		ok    func(float64) bool
		want  string
	}{
		{`up{job="ipybox"}`, eq(1), "1 (scraped with the token)"},
		{`ipybox_sessions{state="active"}`, eq(1), "1"},
		{`ipybox_kernels{state="active"}`, ge(1), ">= 1"},
		{`ipybox_kernels{state="pooled"}`, eq(0), "0 (--pool 0)"},
		{`sum(ipybox_cells_total{outcome="ok"})`, ge(1), ">= 1"},
		{`ipybox_tool_calls_total{server="go",outcome="ok"}`, eq(3), "3"},
		{`ipybox_tool_call_duration_seconds_count{server="go"}`, eq(3), "3"},
		{`ipybox_approvals_total{kind="tool",decision="allow"}`, eq(3), "3"},
		{`ipybox_approval_wait_seconds_count{kind="tool"}`, eq(3), "3"},
		{`ipybox_cell_duration_seconds_count`, ge(1), ">= 1"},
		{`sum(ipybox_kernel_starts_total{kind="start",outcome="ok"})`, ge(1), ">= 1"},
		{`sum(ipybox_kernel_start_duration_seconds_count)`, ge(1), ">= 1"},
		{`sum(ipybox_kernel_memory_bytes)`, ge(10 << 20), ">= 10 MiB"},
		{`process_resident_memory_bytes{job="ipybox"}`, ge(1 << 20), ">= 1 MiB"},
	} {
		got, err := prom.waitFor(q.query, q.ok, 30*time.Second)
		if err != nil {
			t.Errorf("Prometheus: %s = %v, want %s (%v)", q.query, got, q.want, err)
		}
	}

	// The collector's credentials reached the exporter (below), and left
	// the environment: a registered stdio server does not inherit them.
	if out, isErr := callText(t, cs, "register_mcp_server", map[string]any{
		"server_name": "gostdio", "server_params": map[string]any{"command": mcptest.Build(t)},
	}); isErr {
		t.Fatalf("register_mcp_server: %s", out)
	}
	if out := runCell(t, cs, "from mcptools.gostdio import env\nprint(repr(env.run(env.Params(name='OTEL_EXPORTER_OTLP_HEADERS'))))"); out != "''" {
		t.Errorf("a stdio MCP server's OTEL_EXPORTER_OTLP_HEADERS: %s, want ''", out)
	}

	// The traces go out when the server stops, if not before.
	b.stop(t, syscall.SIGTERM)
	spans := recv.Wait(telemetry.SpanToolCall, 3, 10*time.Second)
	_, bad := recv.Spans()
	if got := recv.Header("x-collector-key"); got != collectorKey {
		t.Errorf("the receiver got x-collector-key %q, want OTEL_EXPORTER_OTLP_HEADERS's %q", got, collectorKey)
	}
	if len(bad) > 0 {
		t.Errorf("the receiver got requests that were no OTLP exports: %v", bad)
	}
	var cell *tracepb.Span
	byID := map[string]*tracepb.Span{}
	for _, s := range spans {
		byID[otlptest.ID(s.GetSpanId())] = s
		if s.GetName() == telemetry.SpanCell && otlptest.ID(s.GetTraceId()) == traceID {
			cell = s
		}
	}
	if cell == nil {
		t.Fatalf("no cell span in trace %s; spans: %v", traceID, spanNames(spans))
	}
	t.Logf("trace %s:\n%s", traceID, otlptest.Tree(spans, traceID, "gen_ai.tool.name", "ipybox.approval.decision", "ipybox.approval.by", "ipybox.outcome", "ipybox.kernel.backend"))
	if got := otlptest.ID(cell.GetParentSpanId()); got != parentID {
		t.Errorf("the cell's parent is %s, want the request's span %s", got, parentID)
	}
	cellID := otlptest.ID(cell.GetSpanId())
	calls, approvals := map[string]bool{}, 0
	for _, s := range spans {
		if otlptest.ID(s.GetTraceId()) != traceID {
			continue
		}
		switch s.GetName() {
		case telemetry.SpanToolCall:
			if otlptest.ID(s.GetParentSpanId()) != cellID {
				t.Errorf("tool call %s: parent %s, want the cell %s", otlptest.Attr(s, string(telemetry.KeyToolName)), otlptest.ID(s.GetParentSpanId()), cellID)
			}
			calls[otlptest.ID(s.GetSpanId())] = true
		}
	}
	reqs := map[string]bool{}
	for _, s := range spans {
		if s.GetName() == telemetry.SpanMCPCall && otlptest.ID(s.GetTraceId()) == traceID {
			reqs[otlptest.ID(s.GetSpanId())] = true
			if !calls[otlptest.ID(s.GetParentSpanId())] {
				t.Errorf("an MCP request's parent %s is no tool call of the cell", otlptest.ID(s.GetParentSpanId()))
			}
		}
		if s.GetName() == telemetry.SpanApproval && otlptest.ID(s.GetTraceId()) == traceID {
			approvals++
			if !calls[otlptest.ID(s.GetParentSpanId())] {
				t.Errorf("an approval's parent %s is no tool call of the cell", otlptest.ID(s.GetParentSpanId()))
			}
			if d := otlptest.Attr(s, string(telemetry.KeyDecision)); d != "allow" {
				t.Errorf("approval decision %q, want allow", d)
			}
		}
	}
	if len(calls) != 3 || approvals != 3 {
		t.Errorf("trace %s holds %d tool calls and %d approvals, want 3 and 3; spans: %v", traceID, len(calls), approvals, spanNames(spans))
	}
	mu.Lock()
	for _, tp := range seen {
		parts := strings.Split(tp, "-")
		if len(parts) != 4 || parts[1] != traceID || !reqs[parts[2]] {
			t.Errorf("the MCP server got traceparent %q: not an MCP request span of trace %s", tp, traceID)
		}
	}
	if len(seen) != 3 {
		t.Errorf("the MCP server got %d tools/call requests, want 3", len(seen))
	}
	mu.Unlock()
	if want := "00-" + traceID + "-" + cellID + "-01"; lines["kernel"] != want {
		t.Errorf("ipybox_runtime.traceparent() = %q, want the cell's %q", lines["kernel"], want)
	}
	for _, s := range spans {
		for _, kv := range s.GetAttributes() {
			v := otlptest.Text(kv.GetValue())
			for _, sec := range []string{secret, token, toolToken, collectorKey} {
				if strings.Contains(v, sec) {
					t.Errorf("span %s: attribute %s = %q holds a secret", s.GetName(), kv.GetKey(), v)
				}
			}
		}
	}

	// The log lines of the calls carry the trace.
	log, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(log), "\n") {
		if strings.Contains(l, `msg="toolserver: call" server=go `) {
			n++
			if !strings.Contains(l, "trace_id="+traceID) {
				t.Errorf("a tool call's log line without its trace: %s", l)
			}
		}
	}
	if n != 3 {
		t.Errorf("%d tool call log lines, want 3", n)
	}
}

func eq(want float64) func(float64) bool { return func(v float64) bool { return v == want } }
func ge(want float64) func(float64) bool { return func(v float64) bool { return v >= want } }

func spanNames(spans []*tracepb.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.GetName())
	}
	return out
}

// prometheus is a Prometheus server that this test started.
type prometheus struct{ url string }

// startPrometheus runs Debian's prometheus on a free loopback port,
// scraping target every second with the bearer token in tokenFile, until
// t ends.
func startPrometheus(t *testing.T, bin, target, tokenFile string) *prometheus {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: ipybox
    authorization:
      type: Bearer
      credentials_file: %s
    static_configs:
      - targets: [%q]
`, tokenFile, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var out testenv.Buffer
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	p := &prometheus{url: "http://" + addr}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-exited:
			t.Fatalf("prometheus exited:\n%s", out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready within 30s:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// query runs an instant query through the HTTP API and returns the
// single value of its result (NaN-free), or an error when there is none.
func (p *prometheus) query(q string) (float64, error) {
	resp, err := http.Get(p.url + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, err
	}
	if body.Status != "success" {
		return 0, fmt.Errorf("query %s: %s", q, body.Error)
	}
	if len(body.Data.Result) != 1 {
		return 0, fmt.Errorf("query %s: %d series", q, len(body.Data.Result))
	}
	s, _ := body.Data.Result[0].Value[1].(string)
	return strconv.ParseFloat(s, 64)
}

// waitFor queries q until ok accepts its value, or d has passed (the
// scrape after a change comes within a second or two).
func (p *prometheus) waitFor(q string, ok func(float64) bool, d time.Duration) (float64, error) {
	deadline := time.Now().Add(d)
	for {
		v, err := p.query(q)
		if err == nil && ok(v) {
			return v, nil
		}
		if time.Now().After(deadline) {
			return v, err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestExecTracing: `ipybox exec --otel-endpoint` sends the cell's span
// (and the kernel's start) before it exits; --otel-include-code adds the
// code. Without tracing, --otel-include-code is a usage error.
func TestExecTracing(t *testing.T) {
	testenv.NeedsPython(t)
	recv := otlptest.Start(t)
	_, stderr, code := runBinary(t, "", "exec", "--workspace", t.TempDir(), "--otel-endpoint", recv.URL, "--otel-include-code", "-c", "x = 6 * 7")
	if code != 0 {
		t.Fatalf("exec: exit %d\n%s", code, stderr)
	}
	spans, bad := recv.Spans()
	names := map[string]*tracepb.Span{}
	for _, s := range spans {
		names[s.GetName()] = s
	}
	if len(bad) > 0 || names[telemetry.SpanCell] == nil || names[telemetry.SpanKernelStart] == nil {
		t.Fatalf("spans %v (problems %v): want a cell and a kernel start, flushed at exit", spanNames(spans), bad)
	}
	if got := otlptest.Attr(names[telemetry.SpanCell], string(telemetry.KeyCode)); got != "x = 6 * 7" {
		t.Errorf("the cell's code attribute is %q", got)
	}
	if _, stderr, code := runBinary(t, "", "exec", "--otel-include-code", "-c", "pass"); code != exitUsage || !strings.Contains(stderr, "needs tracing") {
		t.Errorf("--otel-include-code without tracing: exit %d, %s", code, stderr)
	}
}
