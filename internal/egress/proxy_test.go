package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv"
)

// proxyFixture runs the egress proxy in process, on a unix socket, in front
// of an HTTP server on loopback that test names resolve to.
type proxyFixture struct {
	sock    string
	port    string // the fixture server's port
	mu      sync.Mutex
	lookups map[string]int
	dialed  []string
}

func newProxyFixture(t *testing.T, network Lists, hosts map[string][]string, allowLoopback bool) *proxyFixture {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "fixture %s %s host=%s", r.Method, r.URL.Path, r.Host)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	f := &proxyFixture{port: u.Port(), lookups: map[string]int{}}
	r, err := NewRules(network)
	if err != nil {
		t.Fatal(err)
	}
	opts := &Options{
		Resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
			f.mu.Lock()
			f.lookups[host]++
			f.mu.Unlock()
			var out []netip.Addr
			for _, a := range hosts[host] {
				out = append(out, netip.MustParseAddr(a))
			}
			if len(out) == 0 {
				return nil, fmt.Errorf("no such host %s", host)
			}
			return out, nil
		},
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			f.mu.Lock()
			f.dialed = append(f.dialed, addr)
			f.mu.Unlock()
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	if allowLoopback {
		// Only the fixture's address passes the guard; 10/8 and the rest
		// stay refused.
		opts.AllowPrivate = func(a netip.Addr) bool { return a == netip.MustParseAddr("127.0.0.1") }
	}
	p := New(r, opts, slog.New(slog.DiscardHandler))
	f.sock = filepath.Join(t.TempDir(), "proxy.sock")
	ln, err := net.Listen("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	p.Serve(ln)
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("proxy close: %v", err)
		}
	})
	return f
}

// client returns an HTTP client that uses the proxy for every request.
func (f *proxyFixture) client() *http.Client {
	tr := &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", f.sock)
		},
		DisableKeepAlives: true,
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func (f *proxyFixture) get(t *testing.T, rawURL string) (int, string) {
	t.Helper()
	resp, err := f.client().Get(strings.ReplaceAll(rawURL, "PORT", f.port))
	if err != nil {
		t.Fatalf("GET %s: %v", rawURL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// connect sends CONNECT target and, when it is accepted, a GET through the
// tunnel.
func (f *proxyFixture) connect(t *testing.T, target string) (int, string) {
	t.Helper()
	target = strings.ReplaceAll(target, "PORT", f.port)
	c, err := net.Dial("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// The GET follows the CONNECT header at once, the way eager clients
	// send it: the proxy must pass on what it has already buffered.
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nGET /tunneled HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	inner, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("GET through tunnel to %s: %v", target, err)
	}
	b, _ := io.ReadAll(inner.Body)
	return resp.StatusCode, string(b)
}

func TestProxyRules(t *testing.T) {
	testenv.CheckGoroutines(t)
	f := newProxyFixture(t, Lists{
		AllowedDomains: []string{"allowed.test", "*.wild.test", "private.test", "mixed.test"},
		DeniedDomains:  []string{"bad.wild.test"},
	}, map[string][]string{
		"allowed.test":  {"127.0.0.1"},
		"ok.wild.test":  {"127.0.0.1"},
		"bad.wild.test": {"127.0.0.1"},
		"wild.test":     {"127.0.0.1"},
		"private.test":  {"10.1.2.3"},
		"mixed.test":    {"10.1.2.3", "127.0.0.1"},
	}, true)

	tests := []struct {
		name     string
		connect  bool
		target   string
		wantCode int
		wantBody string
	}{
		{"allowed GET", false, "http://allowed.test:PORT/x", 200, "fixture GET /x host=allowed.test:PORT"},
		{"allowed GET, odd spelling", false, "http://ALLOWED.test.:PORT/x", 200, "fixture GET /x"},
		{"allowed CONNECT", true, "allowed.test:PORT", 200, "fixture GET /tunneled"},
		{"wildcard GET", false, "http://ok.wild.test:PORT/", 200, "fixture GET /"},
		{"not allowed GET", false, "http://other.test:PORT/", 403, "other.test:PORT is not in allowedDomains"},
		{"not allowed CONNECT", true, "other.test:PORT", 403, "not in allowedDomains"},
		{"wildcard does not match bare", false, "http://wild.test:PORT/", 403, "not in allowedDomains"},
		{"denied under wildcard GET", false, "http://bad.wild.test:PORT/", 403, "deniedDomains"},
		{"denied under wildcard CONNECT", true, "bad.wild.test:PORT", 403, "deniedDomains"},
		{"IP literal GET", false, "http://127.0.0.1:PORT/", 403, "IP literals are refused"},
		{"IP literal CONNECT", true, "93.184.216.34:443", 403, "IP literals are refused"},
		{"IPv6 literal CONNECT", true, "[::1]:PORT", 403, "IP literals are refused"},
		{"private GET", false, "http://private.test:PORT/", 403, "resolves only to loopback, private"},
		{"private CONNECT", true, "private.test:PORT", 403, "resolves only to loopback, private"},
		{"mixed uses the allowed address", false, "http://mixed.test:PORT/", 200, "fixture GET /"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var code int
			var body string
			if tt.connect {
				code, body = f.connect(t, tt.target)
			} else {
				code, body = f.get(t, tt.target)
			}
			want := strings.ReplaceAll(tt.wantBody, "PORT", f.port)
			if code != tt.wantCode || !strings.Contains(body, want) {
				t.Errorf("%s %s = %d %q; want %d and %q", map[bool]string{true: "CONNECT", false: "GET"}[tt.connect],
					tt.target, code, body, tt.wantCode, want)
			}
		})
	}

	// Each request resolved its name once and dialed only checked
	// addresses: no second lookup for DNS rebinding to change.
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := f.lookups["allowed.test"]; n != 3 {
		t.Errorf("allowed.test was resolved %d times for 3 requests", n)
	}
	for _, a := range f.dialed {
		if a != "127.0.0.1:"+f.port {
			t.Errorf("the proxy dialed %s, which no check allowed", a)
		}
	}
}

func TestProxyGuardOnByDefault(t *testing.T) {
	testenv.CheckGoroutines(t)
	// Without the test hook, a name that resolves to loopback is refused.
	f := newProxyFixture(t, Lists{AllowedDomains: []string{"allowed.test"}},
		map[string][]string{"allowed.test": {"127.0.0.1"}}, false)
	if code, body := f.get(t, "http://allowed.test:PORT/"); code != 403 || !strings.Contains(body, "loopback") {
		t.Errorf("GET = %d %q, want 403 for a loopback address", code, body)
	}
	if code, _ := f.connect(t, "allowed.test:PORT"); code != 403 {
		t.Errorf("CONNECT = %d, want 403 for a loopback address", code)
	}
}

// TestProxyExplicitIPPassesGuard: without the test hook, a loopback
// address that allowedDomains lists explicitly (as an IP or a range) is
// reached; a loopback address outside it, or reached through "*", is not.
func TestProxyExplicitIPPassesGuard(t *testing.T) {
	testenv.CheckGoroutines(t)
	f := newProxyFixture(t, Lists{AllowedDomains: []string{"*", "127.0.0.1/32"}},
		map[string][]string{"named.test": {"127.0.0.2"}}, false)
	if code, body := f.get(t, "http://127.0.0.1:PORT/"); code != 200 {
		t.Errorf("GET 127.0.0.1 (listed) = %d %q, want 200", code, body)
	}
	if code, _ := f.connect(t, "127.0.0.1:PORT"); code != 200 {
		t.Errorf("CONNECT 127.0.0.1 (listed) = %d, want 200", code)
	}
	if code, body := f.get(t, "http://named.test:PORT/"); code != 403 {
		t.Errorf("GET a name resolving to 127.0.0.2 through \"*\" = %d %q, want 403", code, body)
	}
	if code, _ := f.connect(t, "127.0.0.2:PORT"); code != 403 {
		t.Errorf("CONNECT 127.0.0.2 (not listed) = %d, want 403", code)
	}
}

func TestProxyBadRequests(t *testing.T) {
	testenv.CheckGoroutines(t)
	f := newProxyFixture(t, Lists{AllowedDomains: []string{"allowed.test"}}, nil, true)
	c, err := net.Dial("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /relative HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("relative request: %d, want 400", resp.StatusCode)
	}
	if code, body := f.get(t, "http://allowed.test:PORT/"); code != 502 || !strings.Contains(body, "no such host") {
		t.Errorf("unresolvable allowed name: %d %q, want 502", code, body)
	}
}

func TestProxyCloseEndsTunnels(t *testing.T) {
	testenv.CheckGoroutines(t)
	// A tunnel to a server that never answers must not keep close waiting.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	r, _ := NewRules(Lists{AllowedDomains: []string{"silent.test"}})
	p := New(r, &Options{
		Resolve: func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
		AllowPrivate: func(netip.Addr) bool { return true },
	}, slog.New(slog.DiscardHandler))
	sock := filepath.Join(t.TempDir(), "p.sock")
	pl, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	p.Serve(pl)
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	fmt.Fprintf(c, "CONNECT silent.test:%s HTTP/1.1\r\nHost: silent.test\r\n\r\n", port)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	up := <-accepted
	defer up.Close()
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("close did not end an open tunnel")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

// TestProxyTunnelLimit: one proxy (one sandbox) holds at most maxTunnels
// tunnels at once; one more is answered 503 with the limit, without a
// dial, and a tunnel that ends frees its place (acc3, attack 19).
func TestProxyTunnelLimit(t *testing.T) {
	testenv.CheckGoroutines(t)
	f := newProxyFixture(t, Lists{AllowedDomains: []string{"allowed.test"}}, map[string][]string{"allowed.test": {"127.0.0.1"}}, true)
	open := func() (net.Conn, string) {
		c, err := net.Dial("unix", f.sock)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT allowed.test:%s HTTP/1.1\r\nHost: allowed.test:%s\r\n\r\n", f.port, f.port)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return c, line
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range maxTunnels {
		c, line := open()
		held = append(held, c)
		if !strings.Contains(line, " 200") {
			t.Fatalf("tunnel %d: %q", i, line)
		}
	}
	f.mu.Lock()
	dialed := len(f.dialed)
	f.mu.Unlock()
	c, line := open()
	c.Close()
	if !strings.Contains(line, " 503") {
		t.Fatalf("tunnel past the limit: %q, want 503", line)
	}
	f.mu.Lock()
	if len(f.dialed) != dialed {
		t.Errorf("the refused tunnel was dialed")
	}
	f.mu.Unlock()
	held[0].Close()
	held = held[1:]
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, line := open()
		if strings.Contains(line, " 200") {
			held = append(held, c)
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("a tunnel after one ended: %q", line)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestProxyTunnelFloor: when the process's tunnels are all taken (by
// other sandboxes), a sandbox still opens minTunnels of its own, and no
// more.
func TestProxyTunnelFloor(t *testing.T) {
	allTunnels.Lock()
	allTunnels.n += maxTunnelsAll
	allTunnels.Unlock()
	defer func() {
		allTunnels.Lock()
		allTunnels.n -= maxTunnelsAll
		allTunnels.Unlock()
	}()
	p := New(&Rules{}, nil, slog.New(slog.DiscardHandler))
	defer p.Close()
	for i := range minTunnels {
		if err := p.takeSlot(); err != nil {
			t.Fatalf("tunnel %d of the floor: %v", i, err)
		}
	}
	if err := p.takeSlot(); err == nil || !strings.Contains(err.Error(), "limit of the process") {
		t.Errorf("past the floor with the process full: %v", err)
	}
	for range minTunnels {
		p.releaseSlot()
	}
}
