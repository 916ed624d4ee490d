package mcpserver

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

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
