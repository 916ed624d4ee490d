// Package gateway is a client of the Jupyter kernels API, as Jupyter
// Server, Kernel Gateway and Enterprise Gateway serve it: start, interrupt,
// restart and delete kernels over REST, and speak the Jupyter messaging
// protocol to one over its channels websocket, with the
// v1.kernel.websocket.jupyter.org subprotocol when the server picks it and
// the legacy JSON frames when it does not.
//
// The gateway is not trusted with the host: every response body and every
// websocket message is bounded (jupyter.MaxMessage), a body that does not
// parse is an error, and nothing the server sends can make the client
// allocate more than those bounds. The token travels only in the
// Authorization header; no error or log line carries it.
package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Config says which gateway to use and how.
type Config struct {
	// URL is the server's base URL, http:// or https:// (a base path such
	// as /jupyter is kept). https uses the system's root certificates.
	URL string
	// Token is sent as "Authorization: token <Token>". Empty sends none.
	Token string
	// KernelName is the kernelspec to start. Empty means "python3".
	KernelName string
	// HTTPClient overrides the client (tests). Nil means a client whose
	// transport disables Nagle (Go's default) and uses system roots.
	HTTPClient *http.Client
}

// DefaultKernelName is the kernelspec a gateway starts when Config names none.
const DefaultKernelName = "python3"

// maxBody bounds a REST response the client reads.
const maxBody = 1 << 20

// Client talks to one gateway.
type Client struct {
	base       *url.URL
	token      string
	kernelName string
	http       *http.Client
}

// New checks cfg and returns a client. It does not contact the server.
func New(cfg Config) (*Client, error) {
	if cfg.URL == "" {
		return nil, errors.New("gateway: no URL; pass --gateway-url or set JUPYTER_GATEWAY_URL")
	}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("gateway: URL %q does not parse: %v; use http://HOST:PORT or https://HOST:PORT", redactURL(cfg.URL), err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("gateway: URL %q has scheme %q; use http:// or https://", redactURL(cfg.URL), u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("gateway: URL %q has no host; use http://HOST:PORT", redactURL(cfg.URL))
	}
	if u.User != nil || u.Query().Has("token") {
		return nil, fmt.Errorf("gateway: URL %q carries a credential; pass the token with --gateway-token-file or JUPYTER_GATEWAY_AUTH_TOKEN instead", redactURL(cfg.URL))
	}
	if strings.ContainsAny(cfg.Token, "\r\n") {
		return nil, errors.New("gateway: the token holds a line break; check the token file")
	}
	u.RawQuery, u.Fragment = "", ""
	u.Path = strings.TrimSuffix(u.Path, "/")
	c := &Client{base: u, token: cfg.Token, kernelName: cfg.KernelName, http: cfg.HTTPClient}
	if c.kernelName == "" {
		c.kernelName = DefaultKernelName
	}
	if c.http == nil {
		c.http = &http.Client{Transport: newTransport()}
	}
	return c, nil
}

// newTransport is a transport for one gateway. Go's dialer sets TCP_NODELAY
// on every TCP connection, so a small message leaves at once (Nagle would
// hold it up to ~40 ms for the peer's delayed ACK); quickAck spares the
// server's messages the same wait on our side.
func newTransport() *http.Transport {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return quickAck(c), nil
	}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dial,
		ForceAttemptHTTP2:     false, // the channels websocket needs HTTP/1.1
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
	}
}

// URL returns the base URL, without credentials.
func (c *Client) URL() string { return c.base.String() }

// KernelName returns the kernelspec the client starts.
func (c *Client) KernelName() string { return c.kernelName }

// redactURL drops userinfo and the query from a URL for an error message.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User = nil
	u.RawQuery = ""
	return u.String()
}

// KernelModel is a kernel as the API describes it.
type KernelModel struct {
	ID             string `json:"id"`
	Name           string `json:"name"`
	ExecutionState string `json:"execution_state"`
}

// ErrNotFound is a kernel the server does not know (deleted or culled).
var ErrNotFound = errors.New("gateway: no such kernel")

// An HTTPError is a response with an unexpected status.
type HTTPError struct {
	Method, Path string
	Status       int
	Detail       string // a short excerpt of the body, token redacted
}

func (e *HTTPError) Error() string {
	msg := fmt.Sprintf("gateway: %s %s: %d %s", e.Method, e.Path, e.Status, http.StatusText(e.Status))
	switch e.Status {
	case http.StatusUnauthorized, http.StatusForbidden:
		msg += "; the gateway refused the token: check --gateway-token-file or JUPYTER_GATEWAY_AUTH_TOKEN"
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

func (e *HTTPError) Is(target error) bool {
	return target == ErrNotFound && e.Status == http.StatusNotFound
}

func (c *Client) endpoint(p string) string {
	u := *c.base
	u.Path = c.base.Path + p
	return u.String()
}

func (c *Client) authorize(h http.Header) {
	if c.token != "" {
		h.Set("Authorization", "token "+c.token)
	}
}

// redact removes the token from text the server sent back.
func (c *Client) redact(s string) string {
	if c.token != "" {
		s = strings.ReplaceAll(s, c.token, "[token]")
	}
	return s
}

// do sends one request and decodes a JSON answer into out (nil: none).
func (c *Client) do(ctx context.Context, method, p string, in, out any, want ...int) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("gateway: encode %s %s: %w", method, p, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.endpoint(p), body)
	if err != nil {
		return fmt.Errorf("gateway: %s %s: %w", method, p, err)
	}
	c.authorize(req.Header)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("gateway: %s %s: %s", method, p, c.redact(transportError(err)))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return fmt.Errorf("gateway: %s %s: read response: %s", method, p, c.redact(err.Error()))
	}
	ok := false
	for _, w := range want {
		ok = ok || resp.StatusCode == w
	}
	if !ok {
		detail := string(raw)
		if len(detail) > 200 {
			detail = detail[:200] + "..."
		}
		return &HTTPError{Method: method, Path: p, Status: resp.StatusCode, Detail: c.redact(strings.ToValidUTF8(strings.TrimSpace(detail), "?"))}
	}
	if len(raw) > maxBody {
		return fmt.Errorf("gateway: %s %s: the response is over %d bytes; is this a Jupyter server?", method, p, maxBody)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("gateway: %s %s: the response is not the JSON of the kernels API (%v); is %s a Jupyter server?", method, p, err, c.URL())
		}
	}
	return nil
}

// transportError describes a failed request without the URL's query.
func transportError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// StartRequest is what POST /api/kernels carries.
type StartRequest struct {
	// Env is the kernel's environment as the gateway sees it. Jupyter
	// Server 1.x ignores it; Kernel Gateway and Enterprise Gateway pass
	// KERNEL_* variables and their allow-list (EG_ENV_PROCESS_WHITELIST,
	// KG_ENV_PROCESS_WHITELIST) to the kernel and drop the rest.
	Env map[string]string
	// Path is the kernel's working directory relative to the server's
	// root. Empty means the root.
	Path string
}

// StartKernel starts a kernel and returns its id.
func (c *Client) StartKernel(ctx context.Context, r *StartRequest) (string, error) {
	body := map[string]any{"name": c.kernelName}
	if r != nil {
		if len(r.Env) > 0 {
			body["env"] = r.Env
		}
		if r.Path != "" {
			body["path"] = r.Path
		}
	}
	var m KernelModel
	if err := c.do(ctx, http.MethodPost, "/api/kernels", body, &m, http.StatusCreated, http.StatusOK); err != nil {
		return "", err
	}
	if !validID(m.ID) {
		return "", fmt.Errorf("gateway: POST /api/kernels returned kernel id %q, not a kernel id", truncate(m.ID, 60))
	}
	return m.ID, nil
}

// ValidID reports whether id can be a kernel's id: what servers issue
// (UUIDs), and nothing that could change the path it is put into.
func ValidID(id string) bool { return validID(id) }

// validID accepts the ids servers issue (UUIDs), and nothing that could
// change the path it is put into.
func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// Kernel returns a kernel's model; ErrNotFound when the server does not
// know it.
func (c *Client) Kernel(ctx context.Context, id string) (*KernelModel, error) {
	var m KernelModel
	if err := c.do(ctx, http.MethodGet, "/api/kernels/"+url.PathEscape(id), nil, &m, http.StatusOK); err != nil {
		return nil, err
	}
	return &m, nil
}

// Kernels lists the server's kernels.
func (c *Client) Kernels(ctx context.Context) ([]KernelModel, error) {
	var ms []KernelModel
	if err := c.do(ctx, http.MethodGet, "/api/kernels", nil, &ms, http.StatusOK); err != nil {
		return nil, err
	}
	return ms, nil
}

// Interrupt interrupts a kernel (the cell gets KeyboardInterrupt).
func (c *Client) Interrupt(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/api/kernels/"+url.PathEscape(id)+"/interrupt", nil, nil, http.StatusNoContent, http.StatusOK)
}

// Restart restarts a kernel in place.
func (c *Client) Restart(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/api/kernels/"+url.PathEscape(id)+"/restart", nil, nil, http.StatusOK, http.StatusNoContent)
}

// Delete shuts a kernel down. A kernel already gone is no error.
func (c *Client) Delete(ctx context.Context, id string) error {
	err := c.do(ctx, http.MethodDelete, "/api/kernels/"+url.PathEscape(id), nil, nil, http.StatusNoContent, http.StatusOK)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}
