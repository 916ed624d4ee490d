package mcpserver

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestConnectionShareCountsInitialize: a 2025-11-25 connection counts
// from its initialize request: a client that never sends the initialized
// notification still holds a transport session until the idle timeout,
// so alice's initialize-only connections stop at her share, and bob's
// first one is accepted.
func TestConnectionShareCountsInitialize(t *testing.T) {
	t.Parallel()
	srv := newGatedServer(t, &Options{Workspace: t.TempDir(), HTTP: HTTPOptions{Principals: twoPrincipals}})
	url := serveHTTP(t, srv)
	hc := &http.Client{Timeout: 10 * time.Second}
	const init = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + legacyVersion + `","capabilities":{},"clientInfo":{"name":"flood","version":"1"}}}`
	open := func(tok string) (string, string) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(init))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Header.Get("Mcp-Session-Id"), string(b)
	}
	for i := range maxConnections / 2 {
		if sid, body := open(aliceTok); sid == "" {
			t.Fatalf("alice's connection %d refused: %s", i, body)
		}
	}
	if sid, body := open(aliceTok); sid != "" || !strings.Contains(body, "share of one principal") {
		t.Errorf("alice past her share: session %q, %s", sid, body)
	}
	if sid, body := open(bobTok); sid == "" {
		t.Errorf("bob's connection refused: %s", body)
	}
}
