// Package egress is the one way out of a sandbox to the network: an HTTP
// proxy on a unix socket of the host, which a sandboxed kernel (bwrap) or
// a kernel container reaches through a loopback port forwarded to it,
// with HTTP_PROXY and HTTPS_PROXY pointing there. Neither has a network of
// its own, so nothing else leaves; without allowed domains there is no
// proxy either.
//
// # What it serves
//
// [Proxy] answers CONNECT (a tunnel, for HTTPS and anything else over
// TCP) and absolute-URI HTTP requests (forwarded with
// [net/http/httputil.ReverseProxy]). A refused request gets 403 with the
// reason and the settings that decide; a destination that fails gets 502.
// [Proxy.Close] ends the listener and every open tunnel, and waits for
// them; it is idempotent. One Proxy holds at most 128 tunnels at once, and
// the Proxies of the process together at most 4096 (each may hold 8
// whatever the others hold); one more is answered 503 without a dial.
//
// # How it decides
//
// [Rules], from the sandbox settings' network.allowedDomains and
// network.deniedDomains ([Lists]), decide each target, host and port:
// a denied entry first, then an allowed one; nothing matches, nothing
// passes. An entry is a name, a "*.suffix" wildcard (which does not match
// the bare suffix), [AnyPublicDomain], an IP address or a CIDR range, and
// may end in ":port".
//
// A name that passes is then resolved once, and only its public unicast
// addresses are dialed, in order: loopback, private, link-local and the
// reserved ranges are refused unless an IP entry lists them, and an IPv6
// address that embeds an IPv4 one (NAT64, IPv4-compatible...) is judged by
// the IPv4 address. The address dialed is one that was checked, so a
// second DNS answer (rebinding) cannot change it.
//
// # Who is told
//
// [Options].Decided is told of every decision (the target, and the entry
// that allowed it or the reason for the refusal): the sandbox's log and
// telemetry take it from there. The other [Options] are test hooks that
// no settings file can set.
package egress
