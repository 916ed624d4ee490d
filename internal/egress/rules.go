package egress

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// hostRule is one allowedDomains or deniedDomains entry.
type hostRule struct {
	raw      string
	any      bool         // "*": every host (in allowedDomains: every public name, never an IP literal)
	wildcard bool         // "*.suffix": names below suffix, not suffix itself
	name     string       // lower-case name, or the suffix of a wildcard
	ip       netip.Addr   // an IP literal entry
	prefix   netip.Prefix // a CIDR range entry ("10.1.0.0/16")
	port     uint16       // 0: any port
}

// parseHostRule parses and validates an entry the way srt does: a name
// ("example.com", "localhost"), a wildcard ("*.example.com", with at least
// two labels after "*."), an IPv4 literal or a bracketed IPv6 literal, each
// with an optional ":port", or a CIDR range ("192.168.1.0/24",
// "2001:db8::/32"; no port). In deniedDomains a bare "*" denies
// everything.
func parseHostRule(s string, denied bool) (hostRule, error) {
	r := hostRule{raw: s}
	bad := func(why string) (hostRule, error) {
		return hostRule{}, fmt.Errorf("invalid domain pattern %q: %s; use a name (\"example.com\"), "+
			"a wildcard (\"*.example.com\"), an IP literal (\"192.0.2.1\", \"[2001:db8::1]\"), "+
			"optionally followed by \":port\", or a CIDR range (\"192.0.2.0/24\")", s, why)
	}
	if s == "" {
		return bad("empty")
	}
	if addr, bits, ok := strings.Cut(s, "/"); ok && isAddr(addr) {
		pf, err := netip.ParsePrefix(s)
		if err != nil || pf.Addr().Zone() != "" {
			return bad("a CIDR range is an address and a prefix length, such as 192.0.2.0/24")
		}
		if pf.Masked() != pf {
			return bad(fmt.Sprintf("%s has host bits set past /%s; write %s", addr, bits, pf.Masked()))
		}
		r.prefix = netip.PrefixFrom(pf.Addr().Unmap(), pf.Bits()-unmapBits(pf.Addr()))
		return r, nil
	}
	if strings.Contains(s, "://") || strings.ContainsAny(s, "/ \t\r\n?#@") {
		return bad("a pattern is a host name, not a URL")
	}
	host, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return bad("unclosed '['")
		}
		host, port = s[1:end], s[end+1:]
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return bad("brackets hold an IPv6 address")
		}
		if port != "" {
			if !strings.HasPrefix(port, ":") {
				return bad("text after ']'")
			}
			port = port[1:]
		}
	case strings.Count(s, ":") > 1:
		return bad("an IPv6 literal must be in brackets")
	case strings.Contains(s, ":"):
		host, port, _ = strings.Cut(s, ":")
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return bad("port must be 1-65535")
		}
		r.port = uint16(n)
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		r.ip = a.Unmap()
		return r, nil
	}
	switch {
	case host == "*":
		// In allowedDomains, "*" is any public name (AnyPublicDomain):
		// the proxy's guard still refuses IP literals and names that
		// resolve to loopback, private or link-local addresses.
		r.any = true
		return r, nil
	case strings.HasPrefix(host, "*."):
		suffix := host[2:]
		if strings.Count(suffix, ".") < 1 {
			return bad("a wildcard needs at least two labels after \"*.\" (\"*.com\" is too broad)")
		}
		if !validName(suffix) {
			return bad("invalid characters")
		}
		r.wildcard, r.name = true, suffix
		return r, nil
	case strings.Contains(host, "*"):
		return bad(`"*" is allowed only as a leading "*." label`)
	}
	if !validName(host) {
		return bad("invalid characters")
	}
	if host != "localhost" && !strings.Contains(host, ".") {
		return bad("a name needs at least one dot (or use \"localhost\")")
	}
	r.name = host
	return r, nil
}

func isAddr(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// unmapBits is what a prefix length loses when an IPv4-mapped IPv6
// address is unmapped.
func unmapBits(a netip.Addr) int {
	if a.Is4In6() {
		return 96
	}
	return 0
}

// explicit reports whether a:port was allowed by an IP literal or a CIDR
// range of allowedDomains: such an address passes the proxy's
// private-address guard, for that range, and for that port when the entry
// names one ("*" and names never do). "127.0.0.1:11434" opens port 11434
// of the host's loopback, not its other ports, whatever name the request
// used to get there.
func (r *Rules) explicit(a netip.Addr, port uint16) bool {
	for _, h := range r.allow {
		if h.port != 0 && h.port != port {
			continue
		}
		if h.ip.IsValid() && h.ip == a || h.prefix.IsValid() && h.prefix.Contains(a) {
			return true
		}
	}
	return false
}

// deniedAddr reports the deniedDomains entry (an IP literal or a range)
// that covers the address a name resolved to: a denied address stays
// denied under every name.
func (r *Rules) deniedAddr(a netip.Addr, port uint16) (string, bool) {
	for _, d := range r.deny {
		if (d.ip.IsValid() || d.prefix.IsValid()) && d.match("", a, port) {
			return d.raw, true
		}
	}
	return "", false
}

// NoProxy is the NO_PROXY value for a process whose HTTP clients use the
// proxy: "localhost,127.0.0.1", so that a server the process runs on its
// own loopback is reached directly; or empty when allowedDomains names a
// loopback address, which only the proxy can reach (the process's
// loopback is not the host's).
func (r *Rules) NoProxy() string {
	for _, h := range r.allow {
		if h.ip.IsValid() && h.ip.IsLoopback() || h.prefix.IsValid() && (h.prefix.Overlaps(loopback4) || h.prefix.Overlaps(loopback6)) {
			return ""
		}
	}
	return "localhost,127.0.0.1"
}

var (
	loopback4 = netip.MustParsePrefix("127.0.0.0/8")
	loopback6 = netip.MustParsePrefix("::1/128")
)

// validName reports whether s is a dot-separated list of non-empty labels
// of letters, digits, '-' and '_'.
func validName(s string) bool {
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return len(s) <= 253
}

// match reports whether the rule covers a request target. name is the
// normalized host name (empty for an IP literal), ip the literal.
func (r hostRule) match(name string, ip netip.Addr, port uint16) bool {
	if r.port != 0 && r.port != port {
		return false
	}
	switch {
	case r.any:
		return true
	case r.ip.IsValid():
		return ip.IsValid() && r.ip == ip
	case r.prefix.IsValid():
		return ip.IsValid() && r.prefix.Contains(ip)
	case name == "":
		return false
	case r.wildcard:
		return strings.HasSuffix(name, "."+r.name)
	default:
		return name == r.name
	}
}

// rules is the egress policy.
// Rules decide which destinations the proxy lets through: denied first,
// then allowed.
type Rules struct {
	allow, deny []hostRule
}

// AnyPublicDomain is the allowedDomains entry that lets through any
// public host; IP literals and names that resolve to loopback, private or
// link-local addresses are still refused.
const AnyPublicDomain = "*"

// Lists are the host patterns of sandbox-runtime's network settings.
type Lists struct {
	AllowedDomains, DeniedDomains []string
}

// NewRules parses the lists: names, "*.suffix" wildcards, "*" (any public
// name: AnyPublicDomain), IP addresses and CIDR ranges.
func NewRules(n Lists) (*Rules, error) {
	r := &Rules{}
	for _, d := range n.AllowedDomains {
		h, err := parseHostRule(d, false)
		if err != nil {
			return nil, err
		}
		r.allow = append(r.allow, h)
	}
	for _, d := range n.DeniedDomains {
		h, err := parseHostRule(d, true)
		if err != nil {
			return nil, err
		}
		r.deny = append(r.deny, h)
	}
	return r, nil
}

// target is a normalized request target.
type target struct {
	name string     // lower-case host name without a trailing dot; "" for an IP
	ip   netip.Addr // valid for an IP literal
	port uint16
}

func (t target) String() string {
	if t.ip.IsValid() {
		return netip.AddrPortFrom(t.ip, t.port).String()
	}
	return t.name + ":" + strconv.Itoa(int(t.port))
}

// parseTarget normalizes "host:port" (or "host" with defPort) from a
// request.
func parseTarget(hostport string, defPort uint16) (target, error) {
	host, port := hostport, ""
	if strings.HasPrefix(hostport, "[") {
		end := strings.IndexByte(hostport, ']')
		if end < 0 {
			return target{}, fmt.Errorf("invalid host %q", hostport)
		}
		host, port = hostport[1:end], strings.TrimPrefix(hostport[end+1:], ":")
	} else if i := strings.LastIndexByte(hostport, ':'); i >= 0 {
		host, port = hostport[:i], hostport[i+1:]
	}
	t := target{port: defPort}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return target{}, fmt.Errorf("invalid port in %q", hostport)
		}
		t.port = uint16(n)
	}
	if t.port == 0 {
		return target{}, fmt.Errorf("missing port in %q", hostport)
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return target{}, fmt.Errorf("invalid host %q: zoned address", hostport)
		}
		t.ip = a.Unmap()
		return t, nil
	}
	if !validName(host) {
		return target{}, fmt.Errorf("invalid host %q", hostport)
	}
	if numericName(host) {
		// 2130706433, 0x7f.1, 127.1, 017700000001: IPv4 addresses in
		// disguise, which some resolvers turn into 127.0.0.1.
		return target{}, fmt.Errorf("host %q is an IP address in numeric disguise; IP literals must be written plainly and listed", hostport)
	}
	t.name = host
	return t, nil
}

// numericName reports whether every label of a name is a number (decimal,
// octal or 0x-hex): what inet_aton would read as an IPv4 address.
func numericName(host string) bool {
	for _, l := range strings.Split(host, ".") {
		digits := strings.TrimPrefix(l, "0x")
		if digits == "" {
			return false
		}
		hex := digits != l
		for _, c := range digits {
			if !(c >= '0' && c <= '9' || hex && (c >= 'a' && c <= 'f')) {
				return false
			}
		}
	}
	return true
}

// decide applies the policy: denied entries first, then IP literals (only
// when listed), then allowed names. The reason explains a refusal, or
// names the entry that allowed.
func (r *Rules) decide(t target) (ok bool, reason string) {
	for _, d := range r.deny {
		if d.match(t.name, t.ip, t.port) {
			return false, fmt.Sprintf("%s matches deniedDomains entry %q", t, d.raw)
		}
	}
	for _, a := range r.allow {
		if a.any && t.ip.IsValid() {
			continue // "*" names no IP literal
		}
		if a.match(t.name, t.ip, t.port) {
			return true, fmt.Sprintf("allowedDomains entry %q", a.raw)
		}
	}
	if t.ip.IsValid() {
		return false, fmt.Sprintf("%s is an IP address; IP literals are refused unless listed in allowedDomains", t)
	}
	return false, fmt.Sprintf("%s is not in allowedDomains", t)
}

// CheckPattern reports whether s is a valid allowedDomains entry (denied
// false) or deniedDomains entry (denied true).
func CheckPattern(s string, denied bool) error {
	_, err := parseHostRule(s, denied)
	return err
}
