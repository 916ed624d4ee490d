package egress

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// FuzzRules checks an allowedDomains entry against a request target with a
// model read from the entry's text alone: a rule never lets through a
// host, an address or a port that its text does not name; the same entry
// in deniedDomains refuses everything it would allow, whatever else is
// allowed; and a target spelled as a name entry is let through.
func FuzzRules(f *testing.F) {
	for _, s := range []struct{ rule, host string }{
		{"example.com", "example.com:443"}, {"example.com", "evilexample.com"}, {"example.com", "example.com.evil.org"},
		{"*.example.com", "a.example.com"}, {"*.example.com", "example.com"}, {"*.example.com", "a.example.com.evil"},
		{"Example.COM.", "EXAMPLE.com."}, {"example.com:8443", "example.com:443"}, {"*", "10.0.0.1"}, {"*", "pypi.org"},
		{"192.0.2.1", "192.0.2.1:80"}, {"192.0.2.1", "[::ffff:192.0.2.1]:80"}, {"[2001:db8::1]:443", "[2001:db8::1]"},
		{"10.1.0.0/16", "10.1.255.255"}, {"10.1.0.0/16", "10.2.0.0"}, {"::ffff:10.0.0.0/104", "10.9.9.9"},
		{"2001:db8::/32", "[2001:db8:ffff::1]:22"}, {"0.0.0.0/0", "localhost"}, {"localhost", "127.0.0.1"},
		{"127.0.0.1", "2130706433"}, {"127.0.0.1", "0x7f.1"}, {"*.corp.example", "x.corp.example:1"},
	} {
		f.Add(s.rule, s.host)
	}
	f.Fuzz(func(t *testing.T, rule, host string) {
		allow, err := NewRules(Lists{AllowedDomains: []string{rule}})
		if err != nil {
			return
		}
		tg, err := parseTarget(host, 443)
		if err != nil {
			return
		}
		if tg.name != "" {
			if _, err := netip.ParseAddr(tg.name); err == nil || numericName(tg.name) || !validName(tg.name) {
				t.Fatalf("parseTarget(%q) gave the name %q, which is an address or not a name", host, tg.name)
			}
		}
		ok, _ := allow.decide(tg)
		if ok {
			if why := outside(rule, tg); why != "" {
				t.Fatalf("allowedDomains [%q] lets %q (%v) through, but %s", rule, host, tg, why)
			}
		}
		// The same entry denied refuses what it would allow, with every
		// name and address allowed besides.
		both, err := NewRules(Lists{AllowedDomains: []string{"*", rule, "0.0.0.0/0", "::/0"}, DeniedDomains: []string{rule}})
		if err != nil {
			t.Fatalf("%q is valid in allowedDomains but not in deniedDomains: %v", rule, err)
		}
		if ok {
			if pass, _ := both.decide(tg); pass {
				t.Fatalf("deniedDomains [%q] does not refuse %q, which the same allowedDomains entry allows", rule, host)
			}
		}
	})
}

// outside returns why the entry rule, read as text, does not cover tg; ""
// when it does.
func outside(rule string, tg target) string {
	if pfx, err := netip.ParsePrefix(rule); err == nil {
		switch {
		case !tg.ip.IsValid():
			return "a CIDR range names no host name"
		case !pfx.Contains(tg.ip) && !pfx.Contains(netip.AddrFrom16(tg.ip.As16())):
			return "the address is outside " + rule
		}
		return ""
	}
	host, port := rule, ""
	if strings.HasPrefix(rule, "[") {
		end := strings.IndexByte(rule, ']')
		host, port = rule[1:end], strings.TrimPrefix(rule[end+1:], ":")
	} else if h, p, ok := strings.Cut(rule, ":"); ok {
		host, port = h, p
	}
	if port != "" && port != strconv.Itoa(int(tg.port)) {
		return "the port is not " + port
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if a, err := netip.ParseAddr(host); err == nil {
		if !tg.ip.IsValid() || tg.ip.Unmap() != a.Unmap() {
			return "the target is not the address " + host
		}
		return ""
	}
	if tg.ip.IsValid() {
		return "a name or wildcard names no IP literal"
	}
	switch {
	case host == "*":
		return ""
	case strings.HasPrefix(host, "*."):
		if !strings.HasSuffix(tg.name, host[1:]) {
			return "the name is not below " + host[2:]
		}
		return ""
	case tg.name != host:
		return "the name is not " + host
	}
	return ""
}

// FuzzNameRuleAllows: a name entry lets through the name it spells, in any
// case and with a trailing dot, on its port.
func FuzzNameRuleAllows(f *testing.F) {
	for _, s := range []string{"example.com", "Example.COM.", "localhost", "a-b_c.d9:8443", "pypi.org:443"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rule string) {
		h, err := parseHostRule(rule, false)
		if err != nil || h.name == "" || h.wildcard {
			return
		}
		hostport := strings.ToUpper(h.name) + "."
		if h.port != 0 {
			hostport += ":" + strconv.Itoa(int(h.port))
		}
		r, _ := NewRules(Lists{AllowedDomains: []string{rule}})
		tg, err := parseTarget(hostport, 443)
		if err != nil {
			if numericName(h.name) {
				return // an address in disguise is refused as a target
			}
			t.Fatalf("the name of entry %q does not parse as a target (%q): %v", rule, hostport, err)
		}
		if ok, why := r.decide(tg); !ok {
			t.Fatalf("allowedDomains [%q] refuses %q: %s", rule, hostport, why)
		}
	})
}
