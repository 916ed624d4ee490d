package telemetry

import (
	"context"
	"reflect"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// W3C trace context keys, as MCP's trace-context convention puts them in a
// request's _meta.
const (
	MetaTraceParent = "traceparent"
	MetaTraceState  = "tracestate"
)

var w3c = propagation.TraceContext{}

// TraceParent returns sc as a W3C traceparent, or "" when sc is invalid.
func TraceParent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	w3c.Inject(trace.ContextWithSpanContext(context.Background(), sc), c) // bound: formats a string
	return c[MetaTraceParent]
}

// WithSpanOf returns ctx with the span context of from (a request's, which
// may be remote), for work that runs on a context of its own but belongs
// to the request's trace: a cell that outlives the request that started
// it. ctx is returned as it is when from has none.
func WithSpanOf(ctx, from context.Context) context.Context {
	if sc := trace.SpanContextFromContext(from); sc.IsValid() {
		return trace.ContextWithSpanContext(ctx, sc)
	}
	return ctx
}

// metaCarrier reads and writes the trace context of an MCP request's
// _meta. Only string values count: the request's sender chose the rest.
type metaCarrier struct{ m mcp.Meta }

func (c metaCarrier) Get(key string) string {
	s, _ := c.m[key].(string)
	return s
}

func (c metaCarrier) Set(key, value string) { c.m[key] = value }

func (c metaCarrier) Keys() []string {
	out := make([]string, 0, len(c.m))
	for k := range c.m {
		out = append(out, k)
	}
	return out
}

// InjectMeta is a sending middleware for an MCP client (mcp.Client's
// AddSendingMiddleware): a request sent while a span is current carries its
// traceparent (and tracestate) in _meta, so that a server that traces
// joins the trace. Without a span it does nothing.
func InjectMeta(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			if p := params(req); p != nil {
				m := p.GetMeta()
				if m == nil {
					m = mcp.Meta{}
				}
				w3c.Inject(ctx, metaCarrier{m})
				p.SetMeta(m)
			}
		}
		return next(ctx, method, req)
	}
}

// ExtractMeta is a receiving middleware for an MCP server (mcp.Server's
// AddReceivingMiddleware): a request whose _meta holds a valid traceparent
// is handled under that remote span, so that the spans it makes (a cell)
// are its children. Install it only when tracing is on.
func ExtractMeta(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if p := params(req); p != nil {
			if m := p.GetMeta(); m != nil {
				if _, ok := m[MetaTraceParent].(string); ok {
					ctx = w3c.Extract(ctx, metaCarrier{m})
				}
			}
		}
		return next(ctx, method, req)
	}
}

// params returns req's params, or nil for none (a nil pointer among them:
// their GetMeta would panic).
func params(req mcp.Request) mcp.Params {
	if req == nil {
		return nil
	}
	p := req.GetParams()
	if p == nil {
		return nil
	}
	if v := reflect.ValueOf(p); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil
	}
	return p
}
