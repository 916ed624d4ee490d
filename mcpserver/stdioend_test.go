package mcpserver

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Close() error { return nil }

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestStdioAnswersBeforeEOF: input that ends right after its requests (echo
// '...' | ipybox mcp) still gets every answer, a cell's included.
func TestStdioAnswersBeforeEOF(t *testing.T) {
	t.Parallel()
	srv := newServer(t, &Options{Workspace: sharedWorkspace(t)})
	in := strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"echo","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"execute_ipython_cell","arguments":{"code":"import time; time.sleep(0.5); print(6*7)"}}}`,
	}, "\n") + "\n"
	out := &lockedBuffer{}
	tr := answerAll{&mcp.IOTransport{Reader: nopReadCloser{strings.NewReader(in)}, Writer: out}}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	if err := srv.Serve(ctx, tr); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{`"id":1,"result"`, `"id":2,"result"`, `"id":3,"result"`, `42`} {
		if !strings.Contains(got, want) {
			t.Errorf("no %s in the output:\n%s", want, short(got))
		}
	}
}

type nopReadCloser struct{ *strings.Reader }

func (nopReadCloser) Close() error { return nil }

// fakeConn reads msgs, then io.EOF.
type fakeConn struct {
	msgs []jsonrpc.Message
}

func (f *fakeConn) Read(context.Context) (jsonrpc.Message, error) {
	if len(f.msgs) == 0 {
		return nil, io.EOF
	}
	m := f.msgs[0]
	f.msgs = f.msgs[1:]
	return m, nil
}
func (f *fakeConn) Write(context.Context, jsonrpc.Message) error { return nil }
func (f *fakeConn) Close() error                                 { return nil }
func (f *fakeConn) SessionID() string                            { return "" }

// TestAnswerAllSkipsListen: an open subscriptions/listen, which the go-sdk
// answers only when the reader ends, does not hold the end of input back
// (the server would never exit); a pending call does, until answered.
func TestAnswerAllSkipsListen(t *testing.T) {
	t.Parallel()
	listen, _ := jsonrpc.MakeID(float64(1))
	callID, _ := jsonrpc.MakeID(float64(2))
	inner := &fakeConn{msgs: []jsonrpc.Message{
		&jsonrpc.Request{ID: listen, Method: "subscriptions/listen"},
		&jsonrpc.Request{ID: callID, Method: "tools/call"},
	}}
	c := &answerAllConn{Connection: inner, pending: map[jsonrpc.ID]bool{}, answered: make(chan struct{}, 1), closed: make(chan struct{})}
	for range 2 {
		if _, err := c.Read(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	eof := make(chan error, 1)
	go func() { _, err := c.Read(t.Context()); eof <- err }() // bound: the answer below
	select {
	case err := <-eof:
		t.Fatalf("the end of input came before the call's answer: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	c.Write(t.Context(), &jsonrpc.Response{ID: callID})
	select {
	case err := <-eof:
		if err != io.EOF {
			t.Errorf("Read: %v, want io.EOF", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the end of input was held back by the open listen")
	}
}
