package mcpserver

import (
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ipybox/ipybox/internal/telemetry"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestHibernationObserved: a hibernated session counts as hibernated in
// the sessions gauge, and its restore is a span that says how many names
// came back.
func TestHibernationObserved(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(t.Context()) })
	srv := newServer(t, &Options{Workspace: t.TempDir(), TracerProvider: tp, Durability: DurabilityOptions{HibernateAfter: time.Second}, Sessions: SessionOptions{NoZygote: true}})
	cs := connectHTTPAs(t, serveHTTP(t, srv), testToken, newVersion, nil)
	h := createSession(t, cs)
	runIn(t, cs, h, "x = 41\ny = 'kept'")
	if a, hib := srv.sessionStates(); a != 1 || hib != 0 {
		t.Errorf("before: %d active, %d hibernated; want 1 and 0", a, hib)
	}
	waitHibernated(t, srv, cs, h, 30*time.Second)
	if a, hib := srv.sessionStates(); a != 0 || hib != 1 {
		t.Errorf("hibernated: %d active, %d hibernated; want 0 and 1", a, hib)
	}
	if got := runIn(t, cs, h, "print(x + 1, y)"); !strings.Contains(got, "42 kept") {
		t.Fatalf("after the restore: %q", got)
	}
	var found bool
	for _, s := range rec.Ended() {
		if s.Name() != telemetry.SpanSessionRestore {
			continue
		}
		found = true
		attrs := map[string]any{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.AsInterface()
		}
		if attrs[string(telemetry.KeyOutcome)] != "ok" || attrs[string(telemetry.KeyRestored)].(int64) < 2 {
			t.Errorf("restore span attributes: %v; want outcome ok and at least x and y restored", attrs)
		}
	}
	if !found {
		t.Error("no ipybox.session.restore span")
	}
	if a, hib := srv.sessionStates(); a != 1 || hib != 0 {
		t.Errorf("after: %d active, %d hibernated; want 1 and 0", a, hib)
	}
}
