package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"sync"
	"time"
)

// Options holds test hooks of the egress proxy. They exist so that a
// test can send an allowed name to a fixture on loopback; a settings file
// cannot set any of them.
type Options struct {
	// Resolve looks up the addresses of a host name. Nil uses
	// net.DefaultResolver.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Dial connects to an address that passed the checks ("ip:port"). Nil
	// uses a net.Dialer with a 10 s timeout.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// AllowPrivate reports whether a loopback, private or link-local
	// address may be dialed anyway. Nil refuses every such address, which
	// is the only safe choice outside tests.
	AllowPrivate func(netip.Addr) bool
	// Decided, unlike the hooks above, is for observers, not tests: it is
	// told of each decision, with the target ("host:port"), and the
	// entry that allowed it or the reason for the refusal. Nil tells
	// nobody.
	Decided func(target string, allowed bool, rule string)
}

// Timeouts of the egress proxy. Tunnels (CONNECT) have no overall time
// limit: they end when either side closes, or when the Sandbox is closed.
// Their number is bounded (maxTunnels, maxTunnelsAll).
const (
	proxyResolveTimeout = 5 * time.Second
	proxyDialTimeout    = 10 * time.Second
	proxyHeaderTimeout  = 10 * time.Second
	proxyResponseWait   = 60 * time.Second
	proxyCloseWait      = 2 * time.Second
)

// Bounds on tunnels (CONNECT) held at once. Each holds two descriptors,
// three goroutines and copy buffers in the host process, which every
// sandbox (every kernel, of every principal, and every sandboxed server)
// shares: one sandbox holds at most maxTunnels, and all the proxies of the
// process together at most maxTunnelsAll, so that one kernel's code cannot
// exhaust the process's descriptors or memory for the others (acc3,
// attack 19). With the default 32 kernels, one principal's kernels (16)
// hold at most half of maxTunnelsAll. A tunnel past a bound is answered
// 503 and its upstream is never dialed. Each sandbox may hold
// minTunnels whatever the others hold, so that no principal's sandboxes
// (its kernels and servers, however many) leave another's none: the
// process holds at most maxTunnelsAll plus minTunnels per sandbox.
const (
	maxTunnels    = 128
	maxTunnelsAll = 4096
	minTunnels    = 8
)

// allTunnels counts the tunnels of every Proxy of the process, and those
// being dialed.
var allTunnels struct {
	sync.Mutex
	n int
}

// refusal is a policy decision, answered with 403.
type refusal struct{ reason string }

func (r *refusal) Error() string { return r.reason }

// proxy is the egress proxy: HTTP CONNECT and absolute-URI HTTP requests,
// filtered by host rules, served on a unix socket.
type Proxy struct {
	rules        *Rules
	resolve      func(ctx context.Context, host string) ([]netip.Addr, error)
	dial         func(ctx context.Context, network, addr string) (net.Conn, error)
	allowPrivate func(netip.Addr) bool
	decided      func(target string, allowed bool, rule string)
	log          *slog.Logger

	srv       *http.Server
	transport *http.Transport
	rp        *httputil.ReverseProxy

	mu        sync.Mutex
	tunnels   map[net.Conn]struct{}
	slots     int // tunnels held or being dialed, at most maxTunnels
	closed    bool
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

func New(r *Rules, o *Options, log *slog.Logger) *Proxy {
	p := &Proxy{rules: r, log: log, tunnels: map[net.Conn]struct{}{}}
	if o != nil {
		p.resolve, p.dial, p.allowPrivate, p.decided = o.Resolve, o.Dial, o.AllowPrivate, o.Decided
	}
	if p.resolve == nil {
		p.resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if p.dial == nil {
		d := &net.Dialer{Timeout: proxyDialTimeout}
		p.dial = d.DialContext
	}
	p.transport = &http.Transport{
		// Proxy is nil: the egress proxy never chains to the host's proxy.
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			t, err := parseTarget(addr, 80)
			if err != nil {
				return nil, err
			}
			return p.connect(ctx, t)
		},
		ResponseHeaderTimeout: proxyResponseWait,
		IdleConnTimeout:       30 * time.Second,
		MaxIdleConnsPerHost:   4,
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = pr.In.URL
			pr.Out.Host = "" // the Host header is the URL's host, which was checked
		},
		Transport: p.transport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.fail(w, r, err)
		},
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: proxyHeaderTimeout,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return p
}

// serve serves on ln until close.
func (p *Proxy) Serve(ln net.Listener) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_ = p.srv.Serve(ln) // returns http.ErrServerClosed after close
	}()
}

// close stops the server and every open tunnel, and waits for them. It is
// idempotent.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() { p.closeErr = p.shutdown() })
	return p.closeErr
}

func (p *Proxy) shutdown() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.tunnels {
		c.Close()
	}
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), proxyCloseWait)
	defer cancel()
	err := p.srv.Shutdown(ctx)
	if err != nil {
		err = p.srv.Close()
	}
	p.transport.CloseIdleConnections()
	p.wg.Wait() // bound: Serve returns once Shutdown or Close closed the listener
	return err
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodConnect:
		p.tunnel(w, r)
	case r.URL.IsAbs() && r.URL.Scheme == "http":
		t, ok := p.admit(w, r, r.URL.Host, 80)
		if !ok {
			return
		}
		p.log.Debug("sandbox proxy: allowed", "method", r.Method, "target", t.String())
		p.rp.ServeHTTP(w, r)
	default:
		http.Error(w, "ipybox sandbox proxy: only CONNECT and absolute http:// URLs are supported\n",
			http.StatusBadRequest)
	}
}

// NoProxy is the NO_PROXY value for the processes that use p ([Rules.NoProxy]).
func (p *Proxy) NoProxy() string { return p.rules.NoProxy() }

// record tells Options.Decided of a decision.
func (p *Proxy) record(t target, allowed bool, rule string) {
	if p.decided != nil {
		p.decided(t.String(), allowed, rule)
	}
}

// admit parses a request's host:port (defaultPort when it has none) and
// decides it by the rules, telling Options.Decided; a refusal is answered
// here, and admit returns false.
func (p *Proxy) admit(w http.ResponseWriter, r *http.Request, hostport string, defaultPort uint16) (target, bool) {
	t, err := parseTarget(hostport, defaultPort)
	if err != nil {
		p.fail(w, r, &refusal{err.Error()})
		return t, false
	}
	ok, why := p.rules.decide(t)
	p.record(t, ok, why)
	if !ok {
		p.fail(w, r, &refusal{why})
	}
	return t, ok
}

// fail answers a refused or failed request.
func (p *Proxy) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ref *refusal
	if errors.As(err, &ref) {
		p.log.Info("sandbox proxy: refused", "method", r.Method, "target", r.Host, "reason", ref.reason)
		http.Error(w, "ipybox sandbox proxy: refused: "+ref.reason+
			"\n(the sandbox's network.allowedDomains / deniedDomains decide which hosts are reachable)\n",
			http.StatusForbidden)
		return
	}
	p.log.Info("sandbox proxy: upstream failed", "method", r.Method, "target", r.Host, "err", err)
	http.Error(w, "ipybox sandbox proxy: "+err.Error()+"\n", http.StatusBadGateway)
}

// takeSlot counts one more tunnel against maxTunnels and maxTunnelsAll,
// or says which is reached.
func (p *Proxy) takeSlot() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.slots >= maxTunnels {
		return fmt.Errorf("this sandbox holds %d tunnels (CONNECT) at once, the limit of one sandbox; close connections it no longer needs", maxTunnels)
	}
	allTunnels.Lock()
	defer allTunnels.Unlock()
	if allTunnels.n >= maxTunnelsAll && p.slots >= minTunnels {
		return fmt.Errorf("the sandboxes of this ipybox hold %d tunnels (CONNECT) at once, the limit of the process; try again later", maxTunnelsAll)
	}
	allTunnels.n++
	p.slots++
	return nil
}

func (p *Proxy) releaseSlot() {
	p.mu.Lock()
	p.slots--
	p.mu.Unlock()
	allTunnels.Lock()
	allTunnels.n--
	allTunnels.Unlock()
}

func (p *Proxy) tunnel(w http.ResponseWriter, r *http.Request) {
	t, ok := p.admit(w, r, r.Host, 0)
	if !ok {
		return
	}
	if err := p.takeSlot(); err != nil {
		p.log.Info("sandbox proxy: refused", "method", r.Method, "target", r.Host, "reason", err)
		http.Error(w, "ipybox sandbox proxy: refused: "+err.Error()+"\n", http.StatusServiceUnavailable)
		return
	}
	defer p.releaseSlot()
	up, err := p.connect(r.Context(), t)
	if err != nil {
		p.fail(w, r, err)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "ipybox sandbox proxy: cannot tunnel on this connection\n", http.StatusInternalServerError)
		return
	}
	down, buf, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	if !p.track(down, up) {
		return
	}
	p.log.Debug("sandbox proxy: tunnel", "target", t.String())
	if _, err := down.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		p.untrack(down, up)
		return
	}
	// Bytes the client sent after the CONNECT header are in buf.
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if n := buf.Reader.Buffered(); n > 0 {
			b, _ := buf.Reader.Peek(n)
			if _, err := up.Write(b); err != nil {
				return
			}
		}
		io.Copy(up, down)
		CloseWrite(up)
	}()
	go func() {
		defer wg.Done()
		io.Copy(down, up)
		CloseWrite(down)
	}()
	wg.Wait() // lifetime: the tunnel; Close closes both ends
	p.untrack(down, up)
}

// CloseWrite half-closes c when it can (TCP, unix), or closes it.
func CloseWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// track registers a tunnel so that close can end it; it refuses (and
// closes both ends) once the proxy is closed. The tunnel's goroutine is
// counted in wg.
func (p *Proxy) track(a, b net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		a.Close()
		b.Close()
		return false
	}
	p.tunnels[a], p.tunnels[b] = struct{}{}, struct{}{}
	p.wg.Add(1)
	return true
}

func (p *Proxy) untrack(a, b net.Conn) {
	a.Close()
	b.Close()
	p.mu.Lock()
	delete(p.tunnels, a)
	delete(p.tunnels, b)
	p.mu.Unlock()
	p.wg.Done()
}

// connect resolves t once, drops addresses the SSRF guard refuses, and
// dials the remaining addresses in order. The address dialed is always one
// that was checked: there is no second lookup that DNS rebinding could
// change.
func (p *Proxy) connect(ctx context.Context, t target) (net.Conn, error) {
	var addrs []netip.Addr
	if t.ip.IsValid() {
		addrs = []netip.Addr{t.ip}
	} else {
		rctx, cancel := context.WithTimeout(ctx, proxyResolveTimeout)
		found, err := p.resolve(rctx, t.name)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", t.name, err)
		}
		addrs = found
	}
	ok, ref := p.checkAddrs(t, addrs)
	if ref != nil {
		p.record(t, false, ref.reason)
		return nil, ref
	}
	var last error
	for _, a := range ok {
		dctx, cancel := context.WithTimeout(ctx, proxyDialTimeout)
		c, err := p.dial(dctx, "tcp", netip.AddrPortFrom(a, t.port).String())
		cancel()
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, fmt.Errorf("connect %s: %w", t, last)
}

// checkAddrs keeps the addresses of t that may be dialed at t's port: not
// covered by a deniedDomains address or range, and public, or listed by an
// allowedDomains address or range for that port. It is the check of what
// is dialed, not of what was asked for: a name that resolves to an
// address is held to the address's rules.
func (p *Proxy) checkAddrs(t target, addrs []netip.Addr) ([]netip.Addr, *refusal) {
	var ok []netip.Addr
	denied := ""
	for _, a := range addrs {
		a = a.Unmap()
		if raw, bad := p.rules.deniedAddr(a, t.port); bad {
			denied = raw
			continue
		}
		if publicAddr(a) || p.rules.explicit(a, t.port) || p.allowPrivate != nil && p.allowPrivate(a) {
			ok = append(ok, a)
		}
	}
	switch {
	case len(ok) > 0:
		return ok, nil
	case denied != "":
		return nil, &refusal{fmt.Sprintf("%s resolves to %v, which deniedDomains entry %q covers", t, addrs, denied)}
	}
	return nil, &refusal{fmt.Sprintf("%s resolves only to loopback, private, link-local or reserved addresses (%v) "+
		"that no allowedDomains address or range lists for port %d", t, addrs, t.port)}
}

// reserved lists ranges that are not reachable public unicast space, beyond
// what netip.Addr's predicates cover.
var reserved = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, broadcast
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("100::/64"),        // discard
	netip.MustParsePrefix("2001::/23"),       // IETF protocol assignments, Teredo among them
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("3fff::/20"),       // documentation
	netip.MustParsePrefix("5f00::/16"),       // segment routing
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated)
}

// embedding lists the IPv6 ranges that carry an IPv4 address, with the
// offset of its four bytes: each is judged by the address it embeds.
var embedding = []struct {
	prefix netip.Prefix
	at     int
}{
	{netip.MustParsePrefix("::/96"), 12},           // IPv4-compatible (::127.0.0.1)
	{netip.MustParsePrefix("::ffff:0:0:0/96"), 12}, // IPv4-translated (SIIT)
	{netip.MustParsePrefix("64:ff9b::/96"), 12},    // NAT64, well-known
	{netip.MustParsePrefix("64:ff9b:1::/48"), 12},  // NAT64, local use
	{netip.MustParsePrefix("2002::/16"), 2},        // 6to4
}

// publicAddr is the SSRF guard: it reports whether a is public unicast
// space. IPv6 forms that embed an IPv4 address (NAT64, 6to4) are judged by
// the embedded address.
func publicAddr(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.Zone() != "" || a.IsLoopback() || a.IsPrivate() || a.IsUnspecified() ||
		a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() || a.IsMulticast() {
		return false
	}
	for _, p := range reserved {
		if p.Contains(a) {
			return false
		}
	}
	if a.Is6() {
		b := a.As16()
		for _, e := range embedding {
			if e.prefix.Contains(a) {
				var v4 [4]byte
				copy(v4[:], b[e.at:e.at+4])
				return publicAddr(netip.AddrFrom4(v4))
			}
		}
	}
	return true
}
