package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func recorder(t *testing.T) (*Tracer, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return New(tp, false), rec
}

func TestOffIsNil(t *testing.T) {
	if New(nil, true) != nil {
		t.Fatal("New(nil) is not nil: tracing would be on without a provider")
	}
	var tr *Tracer
	ctx := context.Background()
	c, sp := tr.StartCell(ctx, "s", "pass")
	if c != ctx || sp.s != nil || sp.TraceParent() != "" {
		t.Error("a nil Tracer made a span")
	}
	tr.EndCell(sp, CellOK, "")
	tr.Egress(trace.SpanContext{}, "example.com:443", true, "x")
	k := tr.Kernel(BackendLocal, "s")
	_, ks := k.StartProcess(ctx, false)
	k.EndProcess(ks, false, nil)
}

// TestOffAllocatesNothing: tracing off costs a cell or a tool call no
// allocation (the metrics' label lookups aside, which allocate nothing).
func TestOffAllocatesNothing(t *testing.T) {
	var tr *Tracer
	ctx := context.Background()
	n := testing.AllocsPerRun(100, func() {
		c, sp := tr.StartCell(ctx, "s", "pass")
		tr.EndCell(sp, CellOK, "")
		c, sp = tr.StartToolCall(c, trace.SpanContext{}, "go", "tool")
		tr.EndToolCall(sp, "go", "ok")
		_, sp = tr.StartApproval(c, "tool")
		tr.EndApproval(sp, "tool", "allow", "rule", "")
	})
	if n != 0 {
		t.Errorf("%v allocations per cell with tracing off, want 0", n)
	}
}

func TestParentage(t *testing.T) {
	tr, rec := recorder(t)
	ctx, cell := tr.StartCell(context.Background(), "sess", "print(1)")
	// The tool server's request has no span of its own: the cell's is
	// given as the parent.
	cctx, call := tr.StartToolCall(context.Background(), cell.Context(), "go", "tool_2")
	_, appr := tr.StartApproval(cctx, "tool")
	tr.EndApproval(appr, "tool", "deny", "rule", "abcd1234")
	tr.EndToolCall(call, "go", "rejected")
	tr.Egress(cell.Context(), "pypi.org:443", false, "pypi.org:443 is not in allowedDomains")
	tr.EndCell(cell, CellError, "ValueError")
	_ = ctx
	got := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		got[s.Name()] = s
	}
	cellID := got[SpanCell].SpanContext().SpanID()
	for name, parent := range map[string]trace.SpanID{
		SpanToolCall: cellID,
		SpanEgress:   cellID,
		SpanApproval: got[SpanToolCall].SpanContext().SpanID(),
	} {
		if got[name] == nil {
			t.Fatalf("no %s span", name)
		}
		if got[name].Parent().SpanID() != parent {
			t.Errorf("%s: parent %v, want %v", name, got[name].Parent().SpanID(), parent)
		}
	}
	if a := attrs(got[SpanApproval]); a[string(KeyDecision)] != "deny" || a[string(KeyRule)] != "abcd1234" {
		t.Errorf("approval attributes %v", a)
	}
	if a := attrs(got[SpanCell]); a[string(KeyCode)] != "" || a[string(KeyErrorName)] != "ValueError" {
		t.Errorf("cell attributes %v: want no code, the error's name", a)
	}
}

func TestKernelDeathCause(t *testing.T) {
	tr, rec := recorder(t)
	k := tr.Kernel(BackendSandbox, "s1")
	k.Up()
	k.Down(true, "process exited: signal: killed; last output: my-secret-output")
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != SpanKernelDeath {
		t.Fatalf("spans %v", spans)
	}
	if c := attrs(spans[0])[string(KeyCause)]; c != "process exited: signal: killed" {
		t.Errorf("cause %q: want it without the kernel's last output", c)
	}
}

func TestMetaRoundTrip(t *testing.T) {
	tr, _ := recorder(t)
	ctx, sp := tr.StartCell(context.Background(), "s", "")
	params := &mcp.CallToolParams{Name: "x"}
	var sent mcp.Meta
	InjectMeta(func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		sent = req.GetParams().GetMeta()
		return nil, nil
	})(ctx, "tools/call", &mcp.ClientRequest[*mcp.CallToolParams]{Params: params})
	if sent[MetaTraceParent] != sp.TraceParent() {
		t.Fatalf("_meta %v, want traceparent %s", sent, sp.TraceParent())
	}
	var got trace.SpanContext
	ExtractMeta(func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		got = trace.SpanContextFromContext(ctx)
		return nil, nil
	})(context.Background(), "tools/call", &mcp.ServerRequest[*mcp.CallToolParamsRaw]{Params: &mcp.CallToolParamsRaw{Meta: sent}})
	if !got.IsRemote() || got.SpanID() != sp.Context().SpanID() || got.TraceID() != sp.Context().TraceID() {
		t.Errorf("extracted %v, want the remote %v", got, sp.Context())
	}
	// Nothing without a span, and nil params are no panic.
	InjectMeta(func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if m := req.GetParams().GetMeta(); m != nil {
			t.Errorf("_meta %v without a span", m)
		}
		return nil, nil
	})(context.Background(), "tools/call", &mcp.ClientRequest[*mcp.CallToolParams]{Params: &mcp.CallToolParams{}})
	ExtractMeta(func(context.Context, string, mcp.Request) (mcp.Result, error) { return nil, nil })(ctx, "tools/call", &mcp.ServerRequest[*mcp.CallToolParamsRaw]{})
	InjectMeta(func(context.Context, string, mcp.Request) (mcp.Result, error) { return nil, nil })(ctx, "ping", &mcp.ClientRequest[*mcp.PingParams]{})
}

func TestLogHandler(t *testing.T) {
	tr, _ := recorder(t)
	var buf bytes.Buffer
	log := Logger(slog.New(slog.NewJSONHandler(&buf, nil)))
	if Logger(log) != log {
		t.Error("Logger wrapped its own logger again")
	}
	ctx, sp := tr.StartCell(context.Background(), "s", "")
	log.InfoContext(ctx, "inside")
	log.Info("outside")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var in, out map[string]any
	json.Unmarshal([]byte(lines[0]), &in)
	json.Unmarshal([]byte(lines[1]), &out)
	if in[LogTraceID] != sp.Context().TraceID().String() || in[LogSpanID] != sp.Context().SpanID().String() {
		t.Errorf("line in a span: %v", in)
	}
	if _, ok := out[LogTraceID]; ok {
		t.Errorf("line outside a span: %v", out)
	}
}

func TestMetricsCount(t *testing.T) {
	before := counter(t, MetricToolCalls, map[string]string{"server": "metrics_test", "outcome": "is_error"})
	var tr *Tracer
	_, sp := tr.StartToolCall(context.Background(), trace.SpanContext{}, "metrics_test", "t")
	tr.EndToolCall(sp, "metrics_test", "is_error")
	if got := counter(t, MetricToolCalls, map[string]string{"server": "metrics_test", "outcome": "is_error"}); got != before+1 {
		t.Errorf("%s = %v, want %v", MetricToolCalls, got, before+1)
	}
	remove := Pool(func() int { return 2 })
	defer remove()
	if got := counter(t, MetricKernels, map[string]string{"state": StatePooled}); got < 2 {
		t.Errorf("pooled kernels %v, want at least 2", got)
	}
}

func counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			return value(m)
		}
	}
	return 0
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

func attrs(s sdktrace.ReadOnlySpan) map[string]string {
	out := map[string]string{}
	for _, kv := range s.Attributes() {
		out[string(kv.Key)] = kv.Value.String()
	}
	return out
}

// BenchmarkHooks is what the hooks of one cell, and of one tool call
// (its span, its approval's, its MCP request's and the traceparent in
// _meta), cost with tracing off and on (the SDK's batch processor, its
// exporter discarding): the part of BenchmarkTracing (bench/) that is
// ipybox's own, without the kernel's noise.
func BenchmarkHooks(b *testing.B) {
	next := func(context.Context, string, mcp.Request) (mcp.Result, error) { return nil, nil }
	for _, on := range []bool{false, true} {
		var tr *Tracer
		name := "off"
		if on {
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			b.Cleanup(func() { tp.Shutdown(context.Background()) })
			tr, name = New(tp, false), "on"
		}
		b.Run("cell-"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, sp := tr.StartCell(context.Background(), "0123456789abcdef", "pass")
				_ = sp.TraceParent()
				tr.EndCell(sp, CellOK, "")
			}
		})
		b.Run("call-"+name, func(b *testing.B) {
			b.ReportAllocs()
			send := InjectMeta(next)
			for b.Loop() {
				ctx, call := tr.StartToolCall(context.Background(), trace.SpanContext{}, "go", "tool_2")
				_, appr := tr.StartApproval(ctx, "tool")
				tr.EndApproval(appr, "tool", "allow", "application", "")
				rctx, req := tr.StartMCPCall(ctx, "go", "tool_2")
				send(rctx, "tools/call", &mcp.ClientRequest[*mcp.CallToolParams]{Params: &mcp.CallToolParams{Name: "tool_2"}})
				tr.EndMCPCall(req, "ok")
				tr.EndToolCall(call, "go", "ok")
			}
		})
	}
}
