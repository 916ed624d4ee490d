package telemetry

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Kernel backends, the label of the kernel metrics.
const (
	BackendLocal     = "local"
	BackendZygote    = "zygote"
	BackendSandbox   = "sandbox"
	BackendContainer = "container"
	BackendGateway   = "gateway"
)

// Kernel observes one Executor's kernel: its process starts, restarts and
// deaths, and its memory. The façade makes one and hands it to
// kernel.Start on the context (WithKernel); the kernel keeps it for its
// life, so that its restarts and deaths are observed too. Its methods are
// safe on a nil *Kernel, which observes nothing.
type Kernel struct {
	t       *Tracer
	backend string
	session string
}

// Kernel returns the observer of a kernel of backend that serves session.
// It is never nil: the metrics count with tracing off too.
func (t *Tracer) Kernel(backend, session string) *Kernel {
	return &Kernel{t: t, backend: backend, session: session}
}

type kernelKey struct{}

// WithKernel returns ctx carrying k, for kernel.Start.
func WithKernel(ctx context.Context, k *Kernel) context.Context {
	if k == nil {
		return ctx
	}
	return context.WithValue(ctx, kernelKey{}, k)
}

// KernelFrom returns the Kernel WithKernel put on ctx, or nil.
func KernelFrom(ctx context.Context) *Kernel {
	k, _ := ctx.Value(kernelKey{}).(*Kernel)
	return k
}

// StartProcess starts the span of a kernel process's start; restart says
// that it replaces one (a reset, a death, an interrupt that was ignored).
// It is a child of ctx's span: a cell's, when the cell found its kernel
// dead.
func (k *Kernel) StartProcess(ctx context.Context, restart bool) (context.Context, Span) {
	if k == nil || k.t == nil {
		return ctx, Span{start: time.Now()}
	}
	name := SpanKernelStart
	if restart {
		name = SpanKernelRestart
	}
	return k.t.start(ctx, name, trace.SpanKindInternal, KeyBackend.String(k.backend), KeySession.String(k.session))
}

// EndProcess ends a process start and counts it.
func (k *Kernel) EndProcess(s Span, restart bool, err error) {
	if k == nil {
		return
	}
	kind := "start"
	if restart {
		kind = "restart"
	}
	outcome := "ok"
	if err != nil {
		outcome = "error"
	} else {
		metrics.kernelStartSeconds.WithLabelValues(k.backend).Observe(s.Since().Seconds())
	}
	metrics.kernelStarts.WithLabelValues(k.backend, kind, outcome).Inc()
	s.end(outcome)
}

// live counts kernel processes that are up, of every Executor.
var live atomic.Int64

// Up counts a kernel process that is ready. Each Up is matched by one
// Down.
func (k *Kernel) Up() {
	if k != nil {
		live.Add(1)
	}
}

// Down counts a kernel process that ended. died says it ended by itself
// (not closed or replaced by ipybox): it is then counted as a death, with
// a span that says how it ended. cause is the kernel package's account;
// what follows its first ';' (the kernel's last output) is left out.
func (k *Kernel) Down(died bool, cause string) {
	if k == nil {
		return
	}
	live.Add(-1)
	if !died {
		return
	}
	metrics.kernelDeaths.WithLabelValues(k.backend).Inc()
	if k.t == nil {
		return
	}
	cause, _, _ = strings.Cut(cause, ";")
	// bound: starting a span waits for nothing (it is a root span)
	_, s := k.t.start(context.Background(), SpanKernelDeath, trace.SpanKindInternal,
		KeyBackend.String(k.backend), KeySession.String(k.session), KeyCause.String(clip(cause, maxName)))
	s.s.SetStatus(codes.Error, "kernel died")
	s.s.End()
}

// pools are the warm pools, each with how many kernels it keeps ready
// now, asked at each scrape.
var pools sync.Map // *int (a key of its own) -> func() int

// Pool reports the kernels a warm pool keeps ready (ready, asked at each
// scrape), until remove.
func Pool(ready func() int) (remove func()) {
	key := new(int)
	pools.Store(key, ready)
	return func() { pools.Delete(key) }
}

// pooled sums what the pools keep ready.
func pooled() int64 {
	var n int64
	pools.Range(func(_, v any) bool {
		n += int64(v.(func() int)())
		return true
	})
	return n
}

// watched are the kernels whose memory is reported, by their observer.
var watched sync.Map // *Kernel -> func() int

// Watch reports the memory of the kernel whose current process pid
// returns (0: none, or a backend with no local process), until stop.
func (k *Kernel) Watch(pid func() int) (stop func()) {
	if k == nil {
		return func() {}
	}
	watched.Store(k, pid)
	return func() { watched.Delete(k) }
}
