package mcpconn

import (
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
)

// headerTransport adds a server's configured headers to every request and
// remembers the status of the latest POST, which tells whether a failed
// streamable HTTP initialize should fall back to SSE.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
	// lastPOST is the status of the latest POST, or 0 while one is in
	// flight or when it got no response.
	lastPOST atomic.Int32
}

func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if len(t.headers) > 0 {
		req = req.Clone(req.Context())
		for k, v := range t.headers {
			// The SDK's own headers (session id, protocol version, Accept)
			// are not overridden by configured ones.
			if req.Header.Get(k) == "" {
				req.Header.Set(k, v)
			}
		}
	}
	post := req.Method == http.MethodPost
	if post {
		t.lastPOST.Store(0)
	}
	resp, err := t.base.RoundTrip(req)
	if post && err == nil {
		t.lastPOST.Store(int32(resp.StatusCode))
	}
	return resp, err
}

// rejectedPOST reports whether the latest POST was answered with a 4xx
// status: the sign, per the MCP specification's backwards-compatibility
// section, of a server that speaks only the older SSE transport. 401 and
// 403 are not: they are about credentials, which SSE would not fix.
func (t *headerTransport) rejectedPOST() bool {
	s := t.lastPOST.Load()
	return s >= 400 && s < 500 && s != http.StatusUnauthorized && s != http.StatusForbidden
}

// sameOrigin follows a redirect only within the server's origin (scheme,
// host and port): a bearer token or a configured header must not reach
// another port of the same host, another host, or plain HTTP.
func sameOrigin(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	from := via[0].URL
	if req.URL.Scheme != from.Scheme || req.URL.Host != from.Host {
		return fmt.Errorf("the server redirected to another origin (%s://%s); ipybox does not follow it, so that the server's credentials stay with it: configure the URL it redirects to", req.URL.Scheme, req.URL.Host)
	}
	return nil
}
