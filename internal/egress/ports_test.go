package egress

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/testenv"
)

// loopbackServer serves "server NAME" on a fresh port of addr ("127.0.0.1"
// or "::1") and returns the port.
func loopbackServer(t *testing.T, addr, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "server %s %s", name, r.URL.Path)
	})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// TestAttackLoopbackPorts is the attack of issue 34.6 on the proxy: an
// allowlisted "127.0.0.1:P1" must open P1 and no other port of the host's
// loopback, whatever name or spelling the request uses to get there. No
// hook lets loopback through: the allowlist alone decides, and the real
// dialer connects. Names resolve through a hook that stands for DNS
// (evil.test is anyone's name pointed at 127.0.0.1), or through the
// system's resolver (localhost).
func TestAttackLoopbackPorts(t *testing.T) {
	testenv.CheckGoroutines(t)
	p1 := loopbackServer(t, "127.0.0.1", "one")
	p2 := loopbackServer(t, "127.0.0.1", "two") // stands for ipybox's own HTTP server
	p6 := loopbackServer(t, "::1", "six")
	r, err := NewRules(Lists{
		AllowedDomains: []string{"127.0.0.1:" + p1, "[::1]:" + p6, "*", "localhost"},
		DeniedDomains:  []string{"127.0.0.1:" + p6}, // a denied address stays denied under every name
	})
	if err != nil {
		t.Fatal(err)
	}
	dns := map[string][]string{
		"evil.test":   {"127.0.0.1"},
		"six.test":    {"::1"},
		"both.test":   {"::1", "127.0.0.1"},
		"mapped.test": {"::ffff:127.0.0.1"},
	}
	p := New(r, &Options{Resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
		if as, ok := dns[host]; ok {
			var out []netip.Addr
			for _, a := range as {
				out = append(out, netip.MustParseAddr(a))
			}
			return out, nil
		}
		return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	}}, slog.New(slog.DiscardHandler))
	f := &proxyFixture{sock: filepath.Join(t.TempDir(), "proxy.sock")}
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

	ok := func(hostport, name string) struct {
		target string
		code   int
		body   string
	} {
		return struct {
			target string
			code   int
			body   string
		}{hostport, 200, "server " + name}
	}
	no := func(hostport string) struct {
		target string
		code   int
		body   string
	} {
		return struct {
			target string
			code   int
			body   string
		}{hostport, 403, "proxy: refused"}
	}
	for _, tc := range []struct {
		target string
		code   int
		body   string
	}{
		ok("127.0.0.1:"+p1, "one"),
		ok("localhost:"+p1, "one"),
		ok("evil.test:"+p1, "one"),
		ok("both.test:"+p1, "one"),
		ok("[::1]:"+p6, "six"),
		ok("six.test:"+p6, "six"),
		ok("both.test:"+p6, "six"),
		no("127.0.0.1:" + p2),
		no("localhost:" + p2),
		no("LOCALHOST.:" + p2),
		no("evil.test:" + p2),
		no("both.test:" + p2),
		no("mapped.test:" + p2),
		no("six.test:" + p1),
		no("[::1]:" + p1),
		no("[::1]:" + p2),
		no("[::ffff:127.0.0.1]:" + p2),
		no("[::ffff:7f00:1]:" + p2),
		no("[::127.0.0.1]:" + p1),
		no("127.0.0.2:" + p1),
		no("127.1:" + p1),
		no("2130706433:" + p1),
		no("0x7f000001:" + p2),
		no("0x7f.0.0.1:" + p2),
		no("0177.0.0.1:" + p2),
		no("017700000001:" + p2),
		no("127.0.0.1:" + p6), // denied by address, though no rule names it for this port
		no("evil.test:" + p6),
	} {
		for _, method := range []string{"CONNECT", "GET"} {
			var code int
			var body string
			if method == "CONNECT" {
				code, body = f.connect(t, tc.target)
			} else {
				code, body = f.get(t, "http://"+tc.target+"/x")
			}
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Errorf("%s %s = %d %q; want %d and %q", method, tc.target, code, body, tc.code, tc.body)
			}
		}
	}
}

func TestNoProxy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		allowed []string
		want    string
	}{
		{[]string{"pypi.org", "*"}, "localhost,127.0.0.1"},
		{[]string{"localhost"}, "localhost,127.0.0.1"}, // a name passes no guard: only addresses do
		{[]string{"10.0.0.0/8", "192.168.1.5:8080"}, "localhost,127.0.0.1"},
		{[]string{"pypi.org", "127.0.0.1:11434"}, ""},
		{[]string{"127.0.0.2"}, ""},
		{[]string{"[::1]:8080"}, ""},
		{[]string{"127.0.0.0/8"}, ""},
		{[]string{"0.0.0.0/0"}, ""},
		{[]string{"::/0"}, ""},
	} {
		r, err := NewRules(Lists{AllowedDomains: tc.allowed})
		if err != nil {
			t.Fatal(err)
		}
		if got := r.NoProxy(); got != tc.want {
			t.Errorf("NoProxy(%q) = %q, want %q", tc.allowed, got, tc.want)
		}
	}
}
