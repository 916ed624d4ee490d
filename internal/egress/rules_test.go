package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseHostRule(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		denied  bool
		wantErr string
	}{
		{in: "example.com"},
		{in: "Example.COM."},
		{in: "localhost"},
		{in: "*.example.com"},
		{in: "example.com:443"},
		{in: "*.example.com:8443"},
		{in: "192.0.2.1"},
		{in: "192.0.2.1:80"},
		{in: "[2001:db8::1]"},
		{in: "[2001:db8::1]:443"},
		{in: "*", denied: true},
		{in: "*:22", denied: true},
		{in: "", wantErr: "empty"},
		{in: "*"}, // AnyPublicDomain
		{in: "*.com", wantErr: "too broad"},
		{in: "a.*.com", wantErr: `leading "*."`},
		{in: "https://example.com", wantErr: "not a URL"},
		{in: "example.com/path", wantErr: "not a URL"},
		{in: "example", wantErr: "at least one dot"},
		{in: "exa mple.com", wantErr: "not a URL"},
		{in: "ex!ample.com", wantErr: "invalid characters"},
		{in: "2001:db8::1", wantErr: "brackets"},
		{in: "[example.com]", wantErr: "IPv6"},
		{in: "example.com:0", wantErr: "port"},
		{in: "example.com:99999", wantErr: "port"},
		{in: "example.com:http", wantErr: "port"},
		{in: "192.168.1.0/24"},
		{in: "10.0.0.0/8"},
		{in: "2001:db8::/32"},
		{in: "127.0.0.1/32"},
		{in: "192.168.1.1/24", wantErr: "write 192.168.1.0/24"},
		{in: "192.168.1.0/33", wantErr: "CIDR range"},
		{in: "example.com/24", wantErr: "not a URL"},
		{in: "192.168.1.0/24:80", wantErr: "CIDR range"},
	}
	for _, tt := range tests {
		_, err := parseHostRule(tt.in, tt.denied)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("parseHostRule(%q) = %v, want ok", tt.in, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("parseHostRule(%q) error = %v, want %q", tt.in, err, tt.wantErr)
		}
	}
}

// TestCIDRRules: a CIDR entry allows the IP literals in its range, and an
// explicit IP or range (never "*" or a name) passes the private-address
// guard for that range only.
func TestCIDRRules(t *testing.T) {
	t.Parallel()
	r, err := NewRules(Lists{AllowedDomains: []string{"*", "example.com", "10.1.0.0/16", "127.0.0.1", "2001:db8::/32"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ip              string
		decide, explict bool
	}{
		{"10.1.2.3", true, true},
		{"10.2.0.1", false, false},
		{"127.0.0.1", true, true},
		{"127.0.0.2", false, false},
		{"2001:db8::5", true, true},
		{"2001:db9::5", false, false},
		{"192.168.0.1", false, false},
	} {
		a := netip.MustParseAddr(tc.ip)
		if ok, _ := r.decide(target{ip: a, port: 80}); ok != tc.decide {
			t.Errorf("decide(%s) = %v, want %v", tc.ip, ok, tc.decide)
		}
		if got := r.explicit(a, 80); got != tc.explict {
			t.Errorf("explicit(%s) = %v, want %v", tc.ip, got, tc.explict)
		}
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	r, err := NewRules(Lists{
		AllowedDomains: []string{"pypi.org", "*.github.com", "api.example.com:443", "192.0.2.7", "[2001:db8::7]", "*.corp.example"},
		DeniedDomains:  []string{"evil.github.com", "*.internal.corp.example"},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		target string
		ok     bool
		why    string
	}{
		{"pypi.org:443", true, ""},
		{"PyPI.org.:443", true, ""},
		{"files.pypi.org:443", false, "not in allowedDomains"},
		{"raw.github.com:443", true, ""},
		{"a.b.github.com:443", true, ""},
		{"github.com:443", false, "not in allowedDomains"}, // *.suffix does not match the suffix
		{"evil.github.com:443", false, "deniedDomains"},
		{"EVIL.github.com.:443", false, "deniedDomains"},
		{"api.example.com:443", true, ""},
		{"api.example.com:80", false, "not in allowedDomains"},
		{"x.internal.corp.example:443", false, "deniedDomains"},
		{"x.corp.example:443", true, ""},
		{"192.0.2.7:443", true, ""},
		{"192.0.2.8:443", false, "IP literals are refused"},
		{"[2001:db8::7]:443", true, ""},
		{"[::ffff:192.0.2.7]:443", true, ""}, // IPv4-mapped is the same address
		{"[2001:db8::8]:443", false, "IP literals are refused"},
		{"127.0.0.1:80", false, "IP literals are refused"},
	}
	for _, tt := range tests {
		tg, err := parseTarget(tt.target, 0)
		if err != nil {
			t.Errorf("parseTarget(%q): %v", tt.target, err)
			continue
		}
		ok, why := r.decide(tg)
		if ok != tt.ok || !strings.Contains(why, tt.why) {
			t.Errorf("decide(%q) = %v, %q; want %v, %q", tt.target, ok, why, tt.ok, tt.why)
		}
	}
	// IP literals in every spelling, and numeric names.
	for _, bad := range []string{"example.com", "example.com:0", "[::1", "a b:80", "[fe80::1%eth0]:80",
		"2130706433:80", "0x7f.1:80", "127.1:80", "017700000001:80", "0x7f000001:80", "127.0.0.1%2e:80", "[::127.0.0.1%25lo]:80"} {
		if _, err := parseTarget(bad, 0); err == nil {
			t.Errorf("parseTarget(%q) succeeded", bad)
		}
	}
}

// TestAnyPublicDomain: "*" allows every name, no IP literal, and denied
// entries still win.
func TestAnyPublicDomain(t *testing.T) {
	t.Parallel()
	r, err := NewRules(Lists{AllowedDomains: []string{AnyPublicDomain}, DeniedDomains: []string{"*.evil.example"}})
	if err != nil {
		t.Fatal(err)
	}
	for target, want := range map[string]bool{
		"pypi.org:443": true, "files.pythonhosted.org:443": true, "x.evil.example:443": false,
		"93.184.216.34:443": false, "[::127.0.0.1]:443": false, "[::]:80": false, "0.0.0.0:80": false,
		"[2606:2800:220:1:248:1893:25c8:1946]:443": false,
	} {
		tg, err := parseTarget(target, 0)
		if err != nil {
			t.Fatalf("parseTarget(%q): %v", target, err)
		}
		if ok, why := r.decide(tg); ok != want {
			t.Errorf("decide(%q) = %v (%s), want %v", target, ok, why, want)
		}
	}
}

func TestPublicAddr(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr string
		want bool
	}{
		{"93.184.216.34", true},
		{"2606:2800:220:1:248:1893:25c8:1946", true},
		{"127.0.0.1", false},
		{"127.8.9.10", false},
		{"::1", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"192.168.1.1", false},
		{"169.254.169.254", false}, // cloud metadata
		{"fe80::1", false},
		{"fc00::1", false},
		{"0.0.0.0", false},
		{"::", false},
		{"100.64.0.1", false},
		{"224.0.0.1", false},
		{"255.255.255.255", false},
		{"::ffff:127.0.0.1", false},
		{"::ffff:10.0.0.1", false},
		{"64:ff9b::a00:1", false},    // NAT64 of 10.0.0.1
		{"64:ff9b::5db8:d822", true}, // NAT64 of 93.184.216.34
		{"2002:a00:1::1", false},     // 6to4 of 10.0.0.1
		{"2002:5db8:d822::1", true},  // 6to4 of 93.184.216.34
		{"::127.0.0.1", false},       // IPv4-compatible
		{"::7f00:1", false},          // the same, zero-compressed
		{"0:0:0:0:0:0:127.0.0.1", false},
		{"::10.0.0.1", false},
		{"::ffff:0:7f00:1", false},     // IPv4-translated (SIIT)
		{"64:ff9b:1::7f00:1", false},   // local-use NAT64 of 127.0.0.1
		{"2001:0:4136:e378::1", false}, // Teredo
		{"192.0.2.1", false},           // documentation
		{"2001:db8::1", false},
		{"::", false},
	}
	for _, tt := range tests {
		if got := publicAddr(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("publicAddr(%s) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}
