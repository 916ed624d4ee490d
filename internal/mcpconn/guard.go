package mcpconn

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"

	"github.com/ipybox/ipybox/internal/egress"
)

// A URL server that an MCP client registered is dialled by this host, on
// the client's word: without a guard, a client of ipybox mcp makes the
// host send requests to its own loopback services (ipybox's HTTP port,
// a local model or database server), to the cloud's metadata address and
// to the private network behind it (write-side SSRF). Its connections
// (the MCP endpoint, every redirect, the OAuth discovery, registration and
// token requests) therefore go through a transport that dials public
// addresses only, judged on the address dialled after the name is
// resolved, so that a name that resolves (or comes to resolve) to such an
// address is refused too. Options.ClientPrivateURLs lifts it; the
// operator's servers are not guarded.

// publicOnlyTransport is an HTTP transport whose connections go only to
// addresses that public accepts (egress.PublicAddr when nil), directly:
// through no proxy of the environment, which would make the request to
// whatever address on the host's behalf.
func publicOnlyTransport(public func(netip.AddrPort) bool) *http.Transport {
	if public == nil {
		public = func(ap netip.AddrPort) bool { return egress.PublicAddr(ap.Addr()) }
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%s: not an address and port to check: %w", address, err)
			}
			if !public(ap) {
				return &PrivateAddrError{Addr: ap}
			}
			return nil
		}}
	t.DialContext = d.DialContext
	return t
}

// PrivateAddrError is the refusal of a client's URL server's connection
// to an address that is not public.
type PrivateAddrError struct{ Addr netip.AddrPort }

func (e *PrivateAddrError) Error() string {
	return fmt.Sprintf("%s is a loopback, private, link-local or reserved address, and a URL server that an MCP client registered reaches only public ones "+
		"(else a client makes this host send requests to its own services); the operator allows them with ipybox mcp --allow-private-urls, or adds the server to --mcp-config", e.Addr)
}

// httpFor is the transport of cfg's HTTP requests: the guarded one for a
// client's config, unless Options.ClientPrivateURLs.
func (m *Manager) httpFor(cfg Config) *http.Transport {
	if cfg.Origin == OriginClient && !m.opts.ClientPrivateURLs {
		return m.guarded
	}
	return m.http
}
