package ipybox

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/mcpconn"
	"github.com/ipybox/ipybox/internal/telemetry"
	"github.com/ipybox/ipybox/internal/toolserver"
)

// MetricsHandler serves ipybox's metrics in Prometheus's exposition
// format: cells, tool calls and approvals by outcome and their latency,
// kernel starts by backend and their time, kernels by state and their
// memory, the process's own memory and the Go runtime's. They are the
// process's, for every Executor in it; docs/observability.md lists them.
// It checks no token: serve it on a private address or behind one
// (`ipybox mcp --metrics-addr` does).
func MetricsHandler() http.Handler { return telemetry.Handler() }

// SessionID returns the name of the Executor's session in the approval
// audit log and in traces (Options.SessionID, or a random one).
func (e *Executor) SessionID() string { return e.session }

// backend names the kernel backend of o, for the kernel metrics.
func backend(o *Options) string {
	switch {
	case o.Gateway != nil:
		return telemetry.BackendGateway
	case o.Container != nil:
		return telemetry.BackendContainer
	case o.Sandbox != nil:
		return telemetry.BackendSandbox
	case o.Zygote != nil:
		return telemetry.BackendZygote
	}
	return telemetry.BackendLocal
}

// cellSpan is the span context of the running cell (invalid between cells
// and with tracing off): the parent of the tool calls, shell commands and
// egress decisions that come from kernel code while it runs.
func (e *Executor) cellSpan() trace.SpanContext {
	e.cellMu.Lock()
	defer e.cellMu.Unlock()
	if e.cur == nil {
		return trace.SpanContext{}
	}
	return e.cur.span
}

// endCell ends a cell's span and counts it.
func (e *Executor) endCell(sp telemetry.Span, err error) {
	outcome, name := cellTraceOutcome(err)
	e.tel.EndCell(sp, outcome, name)
}

// cellTraceOutcome classifies how a cell ended, for its span and the metrics.
func cellTraceOutcome(err error) (outcome, errName string) {
	var pe *PythonError
	var kpe *kernel.PythonError // the kernel's form, before the seam converts it
	switch {
	case err == nil:
		return telemetry.CellOK, ""
	case errors.As(err, &pe):
		return telemetry.CellError, pe.Name
	case errors.As(err, &kpe):
		return telemetry.CellError, kpe.Name
	case errors.Is(err, ErrTimeout):
		return telemetry.CellTimeout, ""
	case errors.Is(err, ErrKernelDied):
		return telemetry.CellKernelDied, ""
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, kernel.ErrClosed):
		return telemetry.CellCancelled, ""
	}
	return telemetry.CellFailed, ""
}

// observe is the tool server's Observe hook: a tool call's or a shell
// command's span, under the running cell.
func (e *Executor) observe(ctx context.Context, call *toolserver.ToolCall, shell string) (context.Context, func(outcome string)) {
	parent := e.cellSpan()
	if call != nil {
		ctx, sp := e.tel.StartToolCall(ctx, parent, call.Server, call.Tool)
		server := metricServer(e.registry, call.Server, e.opts.Tenant)
		return ctx, func(outcome string) { e.tel.EndToolCall(sp, server, outcome) }
	}
	ctx, sp := e.tel.StartShell(ctx, parent, len(shell))
	return ctx, func(outcome string) { e.tel.EndShell(sp, outcome) }
}

// callTool is the tool server's Caller: the MCP request of an approved
// call, in its span.
func (e *Executor) callTool(ctx context.Context, server, tool string, args json.RawMessage) (*mcp.CallToolResult, error) {
	ctx, sp := e.tel.StartMCPCall(ctx, server, tool)
	res, err := e.mcp.CallTool(ctx, server, tool, args)
	switch {
	case err != nil:
		e.tel.EndMCPCall(sp, "error")
	case res != nil && res.IsError:
		e.tel.EndMCPCall(sp, "is_error")
	default:
		e.tel.EndMCPCall(sp, "ok")
	}
	return res, err
}

// egressDecided is the egress proxy's hook: a decision, under the running
// cell.
func (e *Executor) egressDecided(target string, allowed bool, rule string) {
	e.tel.Egress(e.cellSpan(), target, allowed, rule)
}

// verdict is how an approval ended, for its span and the metrics: the
// audit log's decision, who decided, and the rule that did.
type verdict struct{ decision, by, rule string }

// traceApproval wraps decide, the approval of r, in its span.
func (e *Executor) traceApproval(ctx context.Context, r *ApprovalRequest, decide func(context.Context, *ApprovalRequest) error) error {
	ctx, sp := e.tel.StartApproval(ctx, string(r.Kind))
	err := decide(ctx, r)
	v := r.verdict
	if v.decision == "" {
		// No policy: nothing was audited; the answer says.
		r.mu.Lock()
		v.by = r.answer.By
		r.mu.Unlock()
		var rej *toolserver.RejectedError
		switch {
		case err == nil:
			v.decision = "allow"
		case errors.Is(err, toolserver.ErrApprovalTimeout):
			v.decision = "timeout"
		case v.by != "" && errors.As(err, &rej):
			v.decision = "deny"
		default:
			v.decision = "abandoned"
		}
		if v.by == "" {
			v.by = "nobody"
		}
	}
	e.tel.EndApproval(sp, string(r.Kind), v.decision, v.by, v.rule)
	return err
}

// clientServers is the metrics' server label of every server that an MCP
// client registered, where principals are tenants.
const clientServers = "(registered by a client)"

// metricServer is the server label of a tool call's metrics. Where
// principals are tenants (Options.Tenant), a server that a client
// registered is counted as clientServers: the metrics are the process's,
// readable with any principal's token, and one principal's server names
// are not the others' to read (nor a label set that a client can grow
// without end). The span keeps the name.
func metricServer(reg *mcpconn.Registry, name string, tenant bool) string {
	if !tenant {
		return name
	}
	if cfg, ok := reg.Get(name); !ok || cfg.Origin == mcpconn.OriginClient {
		return clientServers
	}
	return name
}
