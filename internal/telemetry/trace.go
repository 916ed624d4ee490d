// Package telemetry is ipybox's observability: OpenTelemetry spans for what
// a team running `ipybox mcp --http` asks about (which cell made which tool
// call; where the time went: the kernel, the approval wait or the MCP
// server; what failed), Prometheus metrics, trace context in MCP's _meta,
// and log lines that carry their trace.
//
// The rest of ipybox calls it at one hook per place: a cell's start and
// end (the façade's Stream), a tool call and a shell command that asked
// for approval (the tool server), the approval wait (the façade), an
// egress decision (the egress proxy), a kernel's start, restart and death
// (the kernel package, through the Kernel that rides on Start's context),
// RegisterMCPServer, and a session's start (mcpserver).
//
//	tr := telemetry.New(tp, false)      // nil tp: tracing off
//	ctx, sp := tr.StartCell(ctx, session, code)
//	defer tr.EndCell(sp, "ok", "")
//
// A nil *Tracer is tracing off: every method returns at once, without
// allocating, and spans are neither made nor exported. Metrics are
// counted either way (a few atomic additions per operation); they live in
// one process-wide registry (Handler).
//
// Attributes never carry a secret or a cell's output: names, sizes,
// outcomes and decisions only. A cell's code is put on its span only when
// asked for (New's includeCode), and a shell command never is, because
// IPython has expanded its variables into it.
package telemetry

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of ipybox's spans.
const ScopeName = "github.com/ipybox/ipybox"

// Span names.
const (
	SpanCell          = "ipybox.cell"
	SpanToolCall      = "ipybox.tool_call"
	SpanMCPCall       = "ipybox.mcp.call"
	SpanShell         = "ipybox.shell"
	SpanApproval      = "ipybox.approval"
	SpanEgress        = "ipybox.egress"
	SpanKernelStart   = "ipybox.kernel.start"
	SpanKernelRestart = "ipybox.kernel.restart"
	SpanKernelDeath   = "ipybox.kernel.death"
	SpanRegister      = "ipybox.register_mcp_server"
	SpanSessionStart  = "ipybox.session.start"
	// SpanSessionRestore is reserved for resuming a hibernated session
	// (durable sessions); nothing makes it yet.
	SpanSessionRestore = "ipybox.session.restore"
)

// Attribute keys. The MCP ones follow OpenTelemetry's semantic conventions
// for MCP and generative AI tools; the rest are ipybox's own.
const (
	KeySession      = attribute.Key("ipybox.session.id")
	KeyOutcome      = attribute.Key("ipybox.outcome")
	KeyCodeBytes    = attribute.Key("ipybox.cell.code_bytes")
	KeyCode         = attribute.Key("ipybox.cell.code")
	KeyErrorName    = attribute.Key("ipybox.cell.error_name")
	KeyMCPMethod    = attribute.Key("mcp.method.name")
	KeyToolName     = attribute.Key("gen_ai.tool.name")
	KeyServer       = attribute.Key("ipybox.mcp.server")
	KeyTransport    = attribute.Key("ipybox.mcp.transport")
	KeyTools        = attribute.Key("ipybox.mcp.tools")
	KeyCommandBytes = attribute.Key("ipybox.shell.command_bytes")
	KeyKind         = attribute.Key("ipybox.approval.kind")
	KeyDecision     = attribute.Key("ipybox.approval.decision")
	KeyDecidedBy    = attribute.Key("ipybox.approval.by")
	KeyRule         = attribute.Key("ipybox.approval.rule")
	KeyTarget       = attribute.Key("ipybox.egress.target")
	KeyEgress       = attribute.Key("ipybox.egress.decision")
	KeyEgressRule   = attribute.Key("ipybox.egress.rule")
	KeyBackend      = attribute.Key("ipybox.kernel.backend")
	KeyCause        = attribute.Key("ipybox.kernel.cause")
	KeyPooled       = attribute.Key("ipybox.session.pooled")
	KeyRestored     = attribute.Key("ipybox.session.restored")
	KeyMissing      = attribute.Key("ipybox.session.missing")
)

// MaxCode bounds the code put on a cell's span (--otel-include-code): its
// first MaxCode bytes.
const MaxCode = 4096

// maxName bounds a name that kernel code chose (a tool, an exception).
const maxName = 256

// Tracer makes ipybox's spans. A nil *Tracer is tracing off.
type Tracer struct {
	t    trace.Tracer
	code bool
}

// New returns a Tracer over tp, or nil (tracing off) when tp is nil.
// includeCode puts each cell's code on its span.
func New(tp trace.TracerProvider, includeCode bool) *Tracer {
	if tp == nil {
		return nil
	}
	return &Tracer{t: tp.Tracer(ScopeName), code: includeCode}
}

// Span is a started operation: its span (nil when tracing is off) and its
// start, which the metrics measure from.
type Span struct {
	s     trace.Span
	start time.Time
}

// Context returns the span's context (invalid when tracing is off).
func (s Span) Context() trace.SpanContext {
	if s.s == nil {
		return trace.SpanContext{}
	}
	return s.s.SpanContext()
}

// TraceParent returns the span's W3C traceparent, or "" when tracing is
// off.
func (s Span) TraceParent() string { return TraceParent(s.Context()) }

// Since returns the time since the span started.
func (s Span) Since() time.Duration { return time.Since(s.start) }

func (t *Tracer) start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, Span) {
	var s trace.Span
	ctx, s = t.t.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	return ctx, Span{s: s, start: time.Now()}
}

// end ends a span with its outcome; an outcome other than ok marks it as
// an error, with the outcome as the description (never an error's text,
// which may quote what kernel code or a server sent).
func (s Span) end(outcome string, attrs ...attribute.KeyValue) {
	if s.s == nil {
		return
	}
	s.s.SetAttributes(append(attrs, KeyOutcome.String(outcome))...)
	if outcome != "ok" {
		s.s.SetStatus(codes.Error, outcome)
	}
	s.s.End()
}

// withParent returns ctx with parent as its span context, when parent is
// valid and ctx has no span of its own.
func withParent(ctx context.Context, parent trace.SpanContext) context.Context {
	if parent.IsValid() && !trace.SpanContextFromContext(ctx).IsValid() {
		return trace.ContextWithSpanContext(ctx, parent)
	}
	return ctx
}

// StartCell starts a cell's span, a child of ctx's span (a traceparent in
// the MCP request's _meta, or the application's own span).
func (t *Tracer) StartCell(ctx context.Context, session, code string) (context.Context, Span) {
	if t == nil {
		return ctx, Span{start: time.Now()}
	}
	attrs := []attribute.KeyValue{KeySession.String(session), KeyCodeBytes.Int(len(code))}
	if t.code {
		attrs = append(attrs, KeyCode.String(clip(code, MaxCode)))
	}
	return t.start(ctx, SpanCell, trace.SpanKindInternal, attrs...)
}

// Cell outcomes.
const (
	CellOK         = "ok"
	CellError      = "error" // a Python exception
	CellTimeout    = "timeout"
	CellKernelDied = "kernel_died"
	CellCancelled  = "cancelled"
	CellFailed     = "failed" // any other error
)

// EndCell ends a cell and counts it. errName is the Python exception's
// name for CellError.
func (t *Tracer) EndCell(s Span, outcome, errName string) {
	metrics.cells.WithLabelValues(outcome).Inc()
	metrics.cellSeconds.Observe(s.Since().Seconds())
	if s.s == nil {
		return
	}
	if errName != "" {
		s.end(outcome, KeyErrorName.String(clip(errName, maxName)))
		return
	}
	s.end(outcome)
}

// StartToolCall starts the span of a tool call that kernel code made,
// under parent (its cell's span). server is a registered server's name;
// tool is what kernel code asked for.
func (t *Tracer) StartToolCall(ctx context.Context, parent trace.SpanContext, server, tool string) (context.Context, Span) {
	if t == nil {
		return ctx, Span{start: time.Now()}
	}
	return t.start(withParent(ctx, parent), SpanToolCall, trace.SpanKindInternal,
		KeyServer.String(server), KeyToolName.String(clip(tool, maxName)))
}

// EndToolCall ends a tool call and counts it under its server. outcome is
// "ok", "is_error" (a result with isError) or the tool server's error
// kind ("rejected", "approval_timeout", "timeout", ...).
func (t *Tracer) EndToolCall(s Span, server, outcome string) {
	metrics.toolCalls.WithLabelValues(server, outcome).Inc()
	metrics.toolSeconds.WithLabelValues(server).Observe(s.Since().Seconds())
	s.end(outcome)
}

// StartMCPCall starts the span of the MCP request of an approved tool
// call, a child of ctx's span (the tool call): the MCP server's part of
// the time, and the span whose traceparent the request carries in _meta.
func (t *Tracer) StartMCPCall(ctx context.Context, server, tool string) (context.Context, Span) {
	if t == nil {
		return ctx, Span{}
	}
	return t.start(ctx, SpanMCPCall, trace.SpanKindClient,
		KeyMCPMethod.String("tools/call"), KeyServer.String(server), KeyToolName.String(clip(tool, maxName)))
}

// EndMCPCall ends an MCP request's span: "ok", "is_error" (a result
// with isError) or "error" (no result).
func (t *Tracer) EndMCPCall(s Span, outcome string) { s.end(outcome) }

// StartShell starts the span of a shell command that asks for approval,
// under parent (its cell's span). The command itself is never recorded:
// IPython has expanded variables into it.
func (t *Tracer) StartShell(ctx context.Context, parent trace.SpanContext, commandBytes int) (context.Context, Span) {
	if t == nil {
		return ctx, Span{start: time.Now()}
	}
	return t.start(withParent(ctx, parent), SpanShell, trace.SpanKindInternal, KeyCommandBytes.Int(commandBytes))
}

// EndShell ends a shell command's span.
func (t *Tracer) EndShell(s Span, outcome string) { s.end(outcome) }

// StartApproval starts an approval wait of kind ("tool" or "shell"), a
// child of ctx's span (the tool call or shell command).
func (t *Tracer) StartApproval(ctx context.Context, kind string) (context.Context, Span) {
	if t == nil {
		return ctx, Span{start: time.Now()}
	}
	return t.start(ctx, SpanApproval, trace.SpanKindInternal, KeyKind.String(kind))
}

// EndApproval ends an approval wait with its decision ("allow", "deny",
// "timeout", "abandoned"), who decided ("rule", "session", "default",
// "application", "nobody"...) and the policy rule that decided, if any
// (its ID and place, not its text).
func (t *Tracer) EndApproval(s Span, kind, decision, by, rule string) {
	metrics.approvals.WithLabelValues(kind, decision).Inc()
	metrics.approvalSeconds.WithLabelValues(kind).Observe(s.Since().Seconds())
	if s.s == nil {
		return
	}
	attrs := []attribute.KeyValue{KeyDecision.String(decision), KeyDecidedBy.String(by)}
	if rule != "" {
		attrs = append(attrs, KeyRule.String(rule))
	}
	s.s.SetAttributes(attrs...)
	if decision != "allow" {
		s.s.SetStatus(codes.Error, decision)
	}
	s.s.End()
}

// Egress records one decision of the egress proxy: a span of no length
// under parent (the cell that runs, if any), and the count. target is
// "host:port"; rule is the entry that allowed it or the refusal's reason.
func (t *Tracer) Egress(parent trace.SpanContext, target string, allowed bool, rule string) {
	decision := "deny"
	if allowed {
		decision = "allow"
	}
	metrics.egress.WithLabelValues(decision).Inc()
	if t == nil {
		return
	}
	// bound: starting a span waits for nothing (the cell is its parent)
	_, s := t.start(withParent(context.Background(), parent), SpanEgress, trace.SpanKindInternal,
		KeyTarget.String(clip(target, maxName)), KeyEgress.String(decision), KeyEgressRule.String(clip(rule, 512)))
	if !allowed {
		s.s.SetStatus(codes.Error, "deny")
	}
	s.s.End()
}

// StartRegister starts RegisterMCPServer's span: the server's name and
// transport, never its command, URL or headers.
func (t *Tracer) StartRegister(ctx context.Context, server, transport string) (context.Context, Span) {
	if t == nil {
		return ctx, Span{start: time.Now()}
	}
	return t.start(ctx, SpanRegister, trace.SpanKindClient,
		KeyServer.String(server), KeyTransport.String(transport), KeyMCPMethod.String("tools/list"))
}

// EndRegister ends RegisterMCPServer's span with the number of tools.
func (t *Tracer) EndRegister(s Span, tools int, err error) {
	if err != nil {
		s.end("error")
		return
	}
	s.end("ok", KeyTools.Int(tools))
}

// StartSession starts a session's start: its kernel, from the pool or
// started now.
func (t *Tracer) StartSession(ctx context.Context) (context.Context, Span) {
	if t == nil {
		return ctx, Span{start: time.Now()}
	}
	return t.start(ctx, SpanSessionStart, trace.SpanKindInternal)
}

// EndSession ends a session's start.
func (t *Tracer) EndSession(s Span, session string, pooled bool, err error) {
	if s.s == nil {
		return
	}
	if err != nil {
		s.end("error", KeyPooled.Bool(pooled))
		return
	}
	s.end("ok", KeySession.String(session), KeyPooled.Bool(pooled))
}

// StartRestore starts a hibernated session's restore: its namespace
// loaded into a fresh kernel.
func (t *Tracer) StartRestore(ctx context.Context) (context.Context, Span) {
	if t == nil {
		return ctx, Span{start: time.Now()}
	}
	return t.start(ctx, SpanSessionRestore, trace.SpanKindInternal)
}

// EndRestore ends a restore: outcome is "ok", "no_snapshot" or "error";
// restored and missing count the names that came back and those that did
// not.
func (t *Tracer) EndRestore(s Span, session, outcome string, restored, missing int) {
	if s.s == nil {
		return
	}
	s.end(outcome, KeySession.String(session), KeyRestored.Int(restored), KeyMissing.Int(missing))
}

// clip returns s's first n bytes, without a rune cut in two.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
