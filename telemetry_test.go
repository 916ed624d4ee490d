package ipybox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/telemetry"
	"github.com/ipybox/ipybox/internal/testenv"
	"github.com/ipybox/ipybox/mcpserver"
)

// TestTracing runs one cell that makes three tool calls, each approved
// through Stream, under a span of the application's, with a recording
// TracerProvider: the cell's span is the child of the application's, each
// call's is the cell's child with its approval and its MCP request below
// it, the MCP server gets the request's traceparent in _meta, kernel code
// reads the cell's,
// the log lines of a call carry its trace, and no attribute holds a
// secret.
func TestTracing(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	var logs testenv.Buffer
	const secret = "s3cret-header-value-4821"
	ex := start(t, &ipybox.Options{
		TracerProvider: tp,
		Logger:         slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		DotEnv:         map[string]string{"TRACING_TEST_SECRET": secret},

		ApproveShellCommands: true,
	})
	var mu sync.Mutex
	var seen []string // traceparents the MCP server got
	url := mcptest.StartHTTP(t, "http", &mcptest.Options{TraceParent: func(tool, tp string) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, tp)
	}})
	register(t, ex, "go", ipybox.ServerConfig{URL: url, Headers: map[string]string{"X-Secret": "${TRACING_TEST_SECRET}"}})

	// The application's own span: the cell's parent.
	app := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		Remote:  true, TraceFlags: trace.FlagsSampled,
	})
	ctx, cancel := context.WithTimeout(trace.ContextWithRemoteSpanContext(context.Background(), app), 60*time.Second)
	defer cancel()
	code := `import os, ipybox_runtime
from mcptools.go import tool_1, tool_2, traceparent
tool_1.run(tool_1.Params(s="x"))
tool_2.run(tool_2.Params())
print("server", traceparent.run(traceparent.Params()))
print("kernel", ipybox_runtime.traceparent())
print("token", os.environ["IPYBOX_TOOL_TOKEN"])
!echo $IPYBOX_TOOL_TOKEN > /dev/null`
	var out strings.Builder
	approvals := 0
	for ev, err := range ex.Stream(ctx, code, nil) {
		if err != nil {
			t.Fatalf("cell: %v\n%s", err, out.String())
		}
		switch ev := ev.(type) {
		case *ipybox.Output:
			out.WriteString(ev.Text)
		case *ipybox.ApprovalRequest:
			approvals++
			ev.Accept()
		}
	}
	if approvals != 4 {
		t.Fatalf("%d approval requests, want 4 (3 tool calls, 1 shell command)", approvals)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		k, v, _ := strings.Cut(l, " ")
		lines[k] = v
	}

	spans := rec.Ended()
	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	cells := byName[telemetry.SpanCell]
	if len(cells) != 1 {
		t.Fatalf("%d cell spans, want 1 (spans: %v)", len(cells), names(spans))
	}
	cell := cells[0]
	if cell.Parent().SpanID() != app.SpanID() || cell.SpanContext().TraceID() != app.TraceID() {
		t.Errorf("the cell's parent is %v, want the application's span %v", cell.Parent(), app)
	}
	calls := byName[telemetry.SpanToolCall]
	if len(calls) != 3 {
		t.Fatalf("%d tool call spans, want 3 (spans: %v)", len(calls), names(spans))
	}
	callIDs := map[trace.SpanID]bool{}
	for _, c := range calls {
		callIDs[c.SpanContext().SpanID()] = true
		if c.Parent().SpanID() != cell.SpanContext().SpanID() {
			t.Errorf("tool call %v: parent %v, want the cell %v", attr(c, telemetry.KeyToolName), c.Parent().SpanID(), cell.SpanContext().SpanID())
		}
		if got := attr(c, telemetry.KeyOutcome); got != "ok" {
			t.Errorf("tool call outcome %q, want ok", got)
		}
	}
	shells := byName[telemetry.SpanShell]
	if len(shells) != 1 || shells[0].Parent().SpanID() != cell.SpanContext().SpanID() {
		t.Fatalf("shell spans %v: want one, the cell's child", shells)
	}
	apps := byName[telemetry.SpanApproval]
	if len(apps) != 4 {
		t.Fatalf("%d approval spans, want 4", len(apps))
	}
	for _, a := range apps {
		if !callIDs[a.Parent().SpanID()] && a.Parent().SpanID() != shells[0].SpanContext().SpanID() {
			t.Errorf("approval's parent %v is no tool call nor the shell command", a.Parent().SpanID())
		}
		if d, by := attr(a, telemetry.KeyDecision), attr(a, telemetry.KeyDecidedBy); d != "allow" || by != "application" {
			t.Errorf("approval decision %q by %q, want allow by application", d, by)
		}
	}
	// Each call's MCP request has a span of its own, and the MCP server
	// got it as its parent.
	reqIDs := map[trace.SpanID]bool{}
	for _, r := range byName[telemetry.SpanMCPCall] {
		reqIDs[r.SpanContext().SpanID()] = true
		if !callIDs[r.Parent().SpanID()] {
			t.Errorf("an MCP request's parent %v is no tool call", r.Parent().SpanID())
		}
	}
	if len(reqIDs) != 3 {
		t.Errorf("%d MCP request spans, want 3", len(reqIDs))
	}
	mu.Lock()
	if len(seen) != 3 {
		t.Errorf("the server saw %d tools/call requests, want 3", len(seen))
	}
	for _, tp := range seen {
		sc := parseTP(t, tp)
		if sc.TraceID() != app.TraceID() || !reqIDs[sc.SpanID()] {
			t.Errorf("the server got traceparent %q: not an MCP request span of trace %v", tp, app.TraceID())
		}
	}
	mu.Unlock()
	if lines["server"] != seen[2] {
		t.Errorf("the traceparent tool answered %q, want what it got, %q", lines["server"], seen[2])
	}
	if want := telemetry.TraceParent(cell.SpanContext()); lines["kernel"] != want {
		t.Errorf("ipybox_runtime.traceparent() = %q, want the cell's %q", lines["kernel"], want)
	}
	if len(byName[telemetry.SpanRegister]) != 1 || len(byName[telemetry.SpanKernelStart]) != 1 {
		t.Errorf("spans %v: want one %s and one %s", names(spans), telemetry.SpanRegister, telemetry.SpanKernelStart)
	}

	// No attribute holds a secret: the ${VAR} value, the tool server's
	// token, the code.
	token := lines["token"]
	if len(token) < 32 {
		t.Fatalf("no tool token read: %q", out.String())
	}
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			v := kv.Value.String()
			if strings.Contains(v, secret) || strings.Contains(v, token) || strings.Contains(v, "IPYBOX_TOOL_TOKEN") {
				t.Errorf("span %s: attribute %s = %q holds a secret or the code", s.Name(), kv.Key, v)
			}
		}
	}

	// The tool server's log line of each call carries the call's span.
	n := 0
	for _, l := range bytes.Split([]byte(logs.String()), []byte("\n")) {
		var rec map[string]any
		if json.Unmarshal(l, &rec) != nil || rec["msg"] != "toolserver: call" {
			continue
		}
		n++
		sid, _ := rec[telemetry.LogSpanID].(string)
		if rec[telemetry.LogTraceID] != app.TraceID().String() || !callIDs[mustSpanID(t, sid)] {
			t.Errorf("log line %s: not in a tool call's span", l)
		}
	}
	if n != 3 {
		t.Errorf("%d tool call log lines, want 3:\n%s", n, logs.String())
	}
}

// TestTracingIncludeCode puts the code on the cell's span when asked, and
// makes a cell that fails an error span with the exception's name only.
func TestTracingIncludeCode(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ex := start(t, &ipybox.Options{TracerProvider: tp, TraceCode: true})
	code := "x = 'printed-value'\nprint(x)\nraise KeyError(x)"
	if _, err := ex.Execute(context.Background(), code, nil); err == nil {
		t.Fatal("the cell did not fail")
	}
	var cell sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == telemetry.SpanCell {
			cell = s
		}
	}
	if cell == nil {
		t.Fatalf("no cell span: %v", names(rec.Ended()))
	}
	if got := attr(cell, telemetry.KeyCode); got != code {
		t.Errorf("code attribute %q, want %q", got, code)
	}
	if o, n := attr(cell, telemetry.KeyOutcome), attr(cell, telemetry.KeyErrorName); o != "error" || n != "KeyError" {
		t.Errorf("outcome %q, error name %q; want error, KeyError", o, n)
	}
	if cell.Status().Description != "error" {
		t.Errorf("status %+v: want an error whose description is the outcome, not the exception's value", cell.Status())
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) string {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value.String()
		}
	}
	return ""
}

func parseTP(t *testing.T, tp string) trace.SpanContext {
	t.Helper()
	parts := strings.Split(tp, "-")
	if len(parts) != 4 {
		t.Errorf("traceparent %q: want 4 parts", tp)
		return trace.SpanContext{}
	}
	tid, err1 := trace.TraceIDFromHex(parts[1])
	sid, err2 := trace.SpanIDFromHex(parts[2])
	if err1 != nil || err2 != nil {
		t.Errorf("traceparent %q: %v %v", tp, err1, err2)
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid})
}

func mustSpanID(t *testing.T, s string) trace.SpanID {
	id, err := trace.SpanIDFromHex(s)
	if err != nil {
		t.Errorf("span id %q: %v", s, err)
	}
	return id
}

// TestTracingKernelLifecycle: a kernel's start, its death (with the cause),
// the restart the next cell makes (under that cell), and Reset's restart.
func TestTracingKernelLifecycle(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ex := start(t, &ipybox.Options{TracerProvider: tp})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := ex.Execute(ctx, "import os\nos._exit(3)", nil); !errors.Is(err, ipybox.ErrKernelDied) {
		t.Fatalf("os._exit: %v, want ErrKernelDied", err)
	}
	run(t, ex, "1")
	if err := ex.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	if n := len(byName[telemetry.SpanKernelStart]); n != 1 {
		t.Errorf("%d kernel starts, want 1", n)
	}
	deaths := byName[telemetry.SpanKernelDeath]
	if len(deaths) != 1 {
		t.Fatalf("%d kernel deaths, want 1: %v", len(deaths), names(rec.Ended()))
	}
	// The cause is the first sign the host saw: the exit, or a channel
	// that closed.
	if c := attr(deaths[0], telemetry.KeyCause); c == "" || attr(deaths[0], telemetry.KeySession) != ex.SessionID() {
		t.Errorf("death: cause %q, session %q", c, attr(deaths[0], telemetry.KeySession))
	}
	cells := byName[telemetry.SpanCell]
	if len(cells) != 2 || attr(cells[0], telemetry.KeyOutcome) != telemetry.CellKernelDied {
		t.Fatalf("cells %v: want 2, the first kernel_died", names(cells))
	}
	restarts := byName[telemetry.SpanKernelRestart]
	if len(restarts) != 2 {
		t.Fatalf("%d restarts, want 2 (the next cell's, Reset's)", len(restarts))
	}
	if restarts[0].Parent().SpanID() != cells[1].SpanContext().SpanID() {
		t.Errorf("the restart a cell made is not that cell's child")
	}
	if restarts[1].Parent().IsValid() {
		t.Errorf("Reset's restart has a parent %v, want none (Reset's ctx had no span)", restarts[1].Parent())
	}
	if b := attr(restarts[0], telemetry.KeyBackend); b != telemetry.BackendLocal {
		t.Errorf("backend %q, want %q", b, telemetry.BackendLocal)
	}
}

// TestTracingEgress: each decision of a sandbox's egress proxy is a span
// under the cell that made the request, with the entry that allowed it or
// the reason it was refused.
func TestTracingEgress(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	cfg := ipybox.DefaultSandbox()
	cfg.Network.AllowedDomains = append(cfg.Network.AllowedDomains, "localhost")
	ex := startSandboxed(t, &ipybox.Options{TracerProvider: tp, Sandbox: cfg})
	// CONNECT through the proxy by hand: urllib would skip it for
	// localhost (NO_PROXY).
	res := run(t, ex, `import os, socket, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
for target in ["localhost:9", "denied.example:443"]:
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=20)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    print(target, s.recv(64).split(b"\r\n")[0].decode())
    s.close()`)
	if strings.Count(res.Text, " 403 ") != 2 {
		t.Fatalf("the proxy did not refuse both: %q", res.Text)
	}
	var cell sdktrace.ReadOnlySpan
	var egress []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch s.Name() {
		case telemetry.SpanEgress:
			egress = append(egress, s)
		case telemetry.SpanCell:
			cell = s
		}
	}
	var got []string
	for _, s := range egress {
		if s.Parent().SpanID() != cell.SpanContext().SpanID() {
			t.Errorf("egress span %v: parent %v, want the cell", attrs(s), s.Parent().SpanID())
		}
		got = append(got, attr(s, telemetry.KeyTarget)+" "+attr(s, telemetry.KeyEgress)+": "+attr(s, telemetry.KeyEgressRule))
	}
	want := []string{
		`localhost:9 allow: allowedDomains entry "localhost"`,
		`localhost:9 deny: localhost:9 resolves only to loopback`,
		`denied.example:443 deny: denied.example:443 is not in allowedDomains`,
	}
	if len(got) != len(want) {
		t.Fatalf("egress spans %q, want %q", got, want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("egress span %d: %q, want %q...", i, got[i], want[i])
		}
	}
}

func attrs(s sdktrace.ReadOnlySpan) map[string]string {
	out := map[string]string{}
	for _, kv := range s.Attributes() {
		out[string(kv.Key)] = kv.Value.String()
	}
	return out
}

// TestTracingRemote: a Remote's Execute under a span of the program's
// carries it to the server, whose cell is its child.
func TestTracingRemote(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	const tok = "remote-trace-token-0123456789"
	srv, err := mcpserver.New(&mcpserver.Options{
		Workspace:      t.TempDir(),
		TracerProvider: tp,
		Sessions: mcpserver.SessionOptions{
			StartTimeout: 90 * time.Second,
		},
		HTTP: mcpserver.HTTPOptions{
			AuthToken: tok,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	r, err := ipybox.Dial(t.Context(), hs.URL+"/mcp", &ipybox.RemoteOptions{Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s, err := r.CreateSession(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// The program's own tracer: its span is the parent.
	ctx, span := sdktrace.NewTracerProvider().Tracer("app").Start(t.Context(), "request")
	if _, err := s.Execute(ctx, "pass", nil); err != nil {
		t.Fatal(err)
	}
	span.End()
	var cell sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if sp.Name() == telemetry.SpanCell {
			cell = sp
		}
	}
	if cell == nil {
		t.Fatalf("no cell span: %v", names(rec.Ended()))
	}
	if cell.Parent().SpanID() != span.SpanContext().SpanID() || cell.SpanContext().TraceID() != span.SpanContext().TraceID() {
		t.Errorf("the cell's parent is %v, want the program's span %v", cell.Parent(), span.SpanContext())
	}
}
