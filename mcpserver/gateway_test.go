package mcpserver

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestGatewaySessions: with Options.Gateway, each HTTP session gets its
// own kernel on the Jupyter Server, state stays per session, and Close
// leaves no kernel on the server.
func TestGatewaySessions(t *testing.T) {
	j := testenv.JupyterServer(t, nil)
	srv := newServer(t, &Options{
		Workspace: t.TempDir(),
		Gateway:   &ipybox.GatewayConfig{URL: j.URL, Token: j.Token},
	})
	url := serveHTTP(t, srv)
	a := connectHTTP(t, url, nil)
	b := connectHTTP(t, url, nil)
	run(t, a, "x = 'a'")
	run(t, b, "x = 'b'")
	if got := run(t, a, "print(x)"); got != "a" {
		t.Errorf("session a: %q", got)
	}
	if got := run(t, b, "print(x)"); got != "b" {
		t.Errorf("session b: %q", got)
	}
	if n := len(gatewayKernels(t, j)); n < 2 {
		t.Errorf("the server has %d kernels for 2 sessions", n)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ks := gatewayKernels(t, j)
		if len(ks) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Close the server still has kernels %v", ks)
		}
	}
}

func gatewayKernels(t *testing.T, j *testenv.Jupyter) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", j.URL+"/api/kernels", nil)
	req.Header.Set("Authorization", "token "+j.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ks []map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&ks); err != nil {
		t.Fatal(err)
	}
	return ks
}
