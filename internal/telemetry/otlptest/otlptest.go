// Package otlptest is an OTLP/HTTP trace receiver for tests: it serves
// POST /v1/traces on loopback, decodes each export with the OTLP protobuf
// package, and keeps the spans.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Receiver keeps the spans exported to it.
type Receiver struct {
	// URL is the receiver's base URL, for OTEL_EXPORTER_OTLP_ENDPOINT or
	// --otel-endpoint: spans go to URL/v1/traces.
	URL string

	mu      sync.Mutex
	spans   []*tracepb.Span
	exports int
	bad     []string
	header  http.Header // the last export's
}

// Start serves a Receiver until t ends.
func Start(t testing.TB) *Receiver {
	r := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		r.fail("unexpected " + req.Method + " " + req.URL.Path)
		http.NotFound(w, req)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			r.fail("gzip: " + err.Error())
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(io.LimitReader(body, 64<<20))
	if err != nil {
		r.fail("read: " + err.Error())
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var exp coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &exp); err != nil {
		r.fail("decode: " + err.Error())
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.exports++
	r.header = req.Header.Clone()
	for _, rs := range exp.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func (r *Receiver) fail(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bad = append(r.bad, s)
}

// Spans returns the spans received so far, and the problems with what was
// sent (requests that were not OTLP/HTTP exports).
func (r *Receiver) Spans() ([]*tracepb.Span, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...), append([]string(nil), r.bad...)
}

// Header returns a header of the last export ("" before any).
func (r *Receiver) Header(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.header.Get(name)
}

// Wait waits up to d for at least n spans named name, and returns the
// spans received by then.
func (r *Receiver) Wait(name string, n int, d time.Duration) []*tracepb.Span {
	deadline := time.Now().Add(d)
	for {
		spans, _ := r.Spans()
		got := 0
		for _, s := range spans {
			if s.GetName() == name {
				got++
			}
		}
		if got >= n || time.Now().After(deadline) {
			return spans
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Attr returns a span's string (or other, as text) attribute, or "".
func Attr(s *tracepb.Span, key string) string {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return Text(kv.GetValue())
		}
	}
	return ""
}

// Text renders an attribute value as text.
func Text(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case nil:
		return ""
	}
	return v.String()
}

// ID renders a trace or span ID as hex, as a traceparent writes it.
func ID(b []byte) string { return hex.EncodeToString(b) }

// Tree renders the spans of one trace as an indented tree, each with its
// duration and the attributes named in keys: the evidence a person reads.
func Tree(spans []*tracepb.Span, traceID string, keys ...string) string {
	children := map[string][]*tracepb.Span{}
	ids := map[string]bool{}
	for _, s := range spans {
		if ID(s.GetTraceId()) == traceID {
			ids[ID(s.GetSpanId())] = true
		}
	}
	var roots []*tracepb.Span
	for _, s := range spans {
		if ID(s.GetTraceId()) != traceID {
			continue
		}
		p := ID(s.GetParentSpanId())
		if ids[p] {
			children[p] = append(children[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	var walk func(s *tracepb.Span, depth int)
	walk = func(s *tracepb.Span, depth int) {
		d := time.Duration(s.GetEndTimeUnixNano() - s.GetStartTimeUnixNano())
		fmt.Fprintf(&b, "%s%s  %v", strings.Repeat("  ", depth), s.GetName(), d.Round(10*time.Microsecond))
		for _, k := range keys {
			if v := Attr(s, k); v != "" {
				fmt.Fprintf(&b, "  %s=%s", k, v)
			}
		}
		if depth == 0 && len(s.GetParentSpanId()) > 0 {
			fmt.Fprintf(&b, "  (parent %s, not exported here)", ID(s.GetParentSpanId()))
		}
		b.WriteString("\n")
		kids := children[ID(s.GetSpanId())]
		sort.Slice(kids, func(i, j int) bool { return kids[i].GetStartTimeUnixNano() < kids[j].GetStartTimeUnixNano() })
		for _, c := range kids {
			walk(c, depth+1)
		}
	}
	sort.Slice(roots, func(i, j int) bool { return roots[i].GetStartTimeUnixNano() < roots[j].GetStartTimeUnixNano() })
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}
