package toolserver_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/toolserver"
)

// TestListenTLS: the served certificate is the one whose fingerprint
// ListenTLS returned; the Host must be the listener's address; a wildcard
// address is refused; the token is required as on every listener.
func TestListenTLS(t *testing.T) {
	s, err := toolserver.New(toolserver.CallerFunc(func(context.Context, string, string, json.RawMessage) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, bad := range []string{"0.0.0.0", "[::]:0", ":7000", ""} {
		if _, _, err := s.ListenTLS(bad); err == nil || !strings.Contains(err.Error(), "wildcard") {
			t.Errorf("ListenTLS(%q) = %v, want a refusal", bad, err)
		}
	}
	url, fp, err := s.ListenTLS("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(url, "https://127.0.0.1:") || len(fp) != 64 {
		t.Fatalf("url %q, fingerprint %q", url, fp)
	}
	// VerifyConnection runs in the transport's dialing goroutine, which may
	// still run (a connection dialed for a request that another one served)
	// when the test reads seen.
	var mu sync.Mutex
	var seen string
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			sum := sha256.Sum256(cs.PeerCertificates[0].Raw)
			mu.Lock()
			seen = hex.EncodeToString(sum[:])
			mu.Unlock()
			return nil
		},
	}}}
	for _, tc := range []struct {
		name, host, auth string
		want             int
	}{
		{"token and Host", "", "Bearer " + s.Token(), 200},
		{"no token", "", "", 401},
		{"foreign Host", "evil.example", "Bearer " + s.Token(), 403},
		{"localhost instead of the address", "localhost:" + url[strings.LastIndex(url, ":")+1:], "Bearer " + s.Token(), 403},
	} {
		req, _ := http.NewRequest("GET", url+"/v1/health", nil)
		if tc.host != "" {
			req.Host = tc.host
		}
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if seen != fp {
		t.Errorf("served certificate %s, ListenTLS said %s", seen, fp)
	}
}
