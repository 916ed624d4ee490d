package egress

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
)

// TestRedteam4UnspecifiedAddr: 0.0.0.0 and :: reach the host's own
// listeners on Linux (a connect to the unspecified address goes to the
// local host), so under an allowlist of one loopback port they are
// other spellings of the host's loopback: by literal, by a name that
// resolves to them, and by an IPv4-mapped or trailing-dot form. Each is
// refused, for the allowed port and for another; with "*" and the
// allowed loopback port alike.
func TestRedteam4UnspecifiedAddr(t *testing.T) {
	p1 := loopbackServer(t, "127.0.0.1", "one")
	p2 := loopbackServer(t, "127.0.0.1", "two")
	// Control: the unspecified address does reach the loopback listener.
	if c, err := net.Dial("tcp", "0.0.0.0:"+p2); err != nil {
		t.Fatalf("control: 0.0.0.0:%s is not the host's loopback here: %v", p2, err)
	} else {
		c.Close()
	}
	r, err := NewRules(Lists{AllowedDomains: []string{"127.0.0.1:" + p1, "*"}})
	if err != nil {
		t.Fatal(err)
	}
	dns := map[string]string{"zero.test": "0.0.0.0", "zero6.test": "::", "mapped0.test": "::ffff:0.0.0.0"}
	p := New(r, &Options{Resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
		if a, ok := dns[host]; ok {
			return []netip.Addr{netip.MustParseAddr(a)}, nil
		}
		return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	}}, slog.New(slog.DiscardHandler))
	f := &proxyFixture{sock: filepath.Join(t.TempDir(), "proxy.sock")}
	ln, err := net.Listen("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	p.Serve(ln)
	t.Cleanup(func() { p.Close() })
	if code, body := f.connect(t, "127.0.0.1:"+p1); code != 200 || !strings.Contains(body, "server one") {
		t.Fatalf("the allowed port: %d %q", code, body)
	}
	for _, port := range []string{p1, p2} {
		for _, h := range []string{"0.0.0.0", "[::]", "[::ffff:0.0.0.0]", "0.0.0.0.", "zero.test", "zero6.test", "mapped0.test", "0", "0.0"} {
			for _, method := range []string{"CONNECT", "GET"} {
				var code int
				var body string
				if method == "CONNECT" {
					code, body = f.connect(t, h+":"+port)
				} else {
					code, body = f.get(t, "http://"+h+":"+port+"/x")
				}
				if code != 403 || strings.Contains(body, "server ") {
					t.Errorf("%s %s:%s = %d %q; want a refusal", method, h, port, code, body)
				}
			}
		}
	}
}
