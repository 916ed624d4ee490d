package ipybox_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
	"github.com/ipybox/ipybox/mcpserver"
)

// loopbackProbe is a cell's prelude: fetch(url) through the environment's
// proxies with urllib (or requests), tunnel(host, port) with CONNECT to
// the proxy, each printing what it got or "refused CODE".
const loopbackProbe = `import os, re, urllib.request, urllib.error, http.client
def fetch(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode()
    except urllib.error.HTTPError as e:
        return 'refused %d' % e.code
    except Exception as e:
        return type(e).__name__
def rfetch(url):
    import requests
    try:
        r = requests.get(url, timeout=10)
    except Exception as e:
        return type(e).__name__
    return r.text if r.status_code == 200 else 'refused %d' % r.status_code
def tunnel(host, port):
    c = http.client.HTTPConnection('127.0.0.1', 3128, timeout=10)
    c.set_tunnel(host, port)
    try:
        c.request('GET', '/tunneled')
    except OSError as e:
        m = re.search(r'Tunnel connection failed: (\d{3})', str(e))
        return 'refused ' + m.group(1) if m else type(e).__name__
    return c.getresponse().read().decode()
`

// TestAttackKernelLoopbackAllowlist is issue 34.6 from a real kernel, in
// the bwrap sandbox and in a container: with "127.0.0.1:P1" allowlisted,
// ordinary clients reach the model server on P1 (they could not: NO_PROXY
// sent loopback direct, where nothing answers), and nothing reaches
// ipybox's own HTTP MCP server on the same loopback by any name or
// spelling.
func TestAttackKernelLoopbackAllowlist(t *testing.T) {
	model := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("model " + r.URL.Path))
	}))
	t.Cleanup(model.Close)
	_, p1, _ := net.SplitHostPort(model.Listener.Addr().String())
	srv, err := mcpserver.New(&mcpserver.Options{
		Workspace: t.TempDir(),
		Sessions: mcpserver.SessionOptions{
			StartTimeout: 90 * time.Second,
		},
		HTTP: mcpserver.HTTPOptions{
			Principals: map[string]string{"me": "loopback-token-0123456789"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	own := httptest.NewServer(srv.Handler())
	t.Cleanup(own.Close)
	_, p2, _ := net.SplitHostPort(own.Listener.Addr().String())
	allowed := []string{"127.0.0.1:" + p1, "localhost", "*"}

	cases := []struct{ code, want string }{
		{"print(repr(os.environ.get('NO_PROXY')), repr(os.environ.get('no_proxy')))", "'' ''"},
		{"print(fetch('http://127.0.0.1:" + p1 + "/a'))", "model /a"},
		{"print(fetch('http://localhost:" + p1 + "/b'))", "model /b"},
		{"print(tunnel('127.0.0.1', " + p1 + "))", "model /tunneled"},
		{"print(fetch('http://127.0.0.1:" + p2 + "/mcp'))", "refused 403"},
		{"print(fetch('http://localhost:" + p2 + "/mcp'))", "refused 403"},
		{"print(fetch('http://[::ffff:127.0.0.1]:" + p2 + "/mcp'))", "refused 403"},
		{"print(fetch('http://2130706433:" + p2 + "/mcp'))", "refused 403"},
		{"print(fetch('http://0x7f000001:" + p2 + "/mcp'))", "refused 403"},
		{"print(fetch('http://127.1:" + p2 + "/mcp'))", "refused 403"},
		{"print(fetch('http://[::1]:" + p2 + "/mcp'))", "refused 403"},
		{"print(tunnel('localhost', " + p2 + "))", "refused 403"},
		{"print(tunnel('127.0.0.1', " + p2 + "))", "refused 403"},
	}
	check := func(t *testing.T, ex *ipybox.Executor, cases []struct{ code, want string }) {
		t.Helper()
		for _, tc := range cases {
			got := strings.TrimSpace(run(t, ex, loopbackProbe+tc.code).Text)
			if got != tc.want {
				t.Errorf("%s: got %q, want %q", tc.code, got, tc.want)
			}
		}
	}
	t.Run("sandbox", func(t *testing.T) {
		testenv.NeedsTool(t, "bwrap")
		if err := exec.Command(testenv.NeedsPython(t), "-c", "import requests").Run(); err != nil {
			testenv.Missing(t, "python3 has no requests module (scripts/setup.sh installs python3-requests): %v", err)
		}
		cfg := ipybox.DefaultSandbox()
		cfg.Network.AllowedDomains = append(cfg.Network.AllowedDomains, allowed...)
		ex := start(t, &ipybox.Options{Sandbox: cfg})
		check(t, ex, append(cases,
			struct{ code, want string }{"print(rfetch('http://127.0.0.1:" + p1 + "/r'))", "model /r"},
			struct{ code, want string }{"print(rfetch('http://localhost:" + p2 + "/mcp'))", "refused 403"},
			struct{ code, want string }{fmt.Sprintf("print(rfetch('http://127.0.0.1:%s/mcp'))", p2), "refused 403"},
		))
	})
	t.Run("container", func(t *testing.T) {
		ex := startContainer(t, &ipybox.ContainerConfig{AllowedDomains: allowed}, nil)
		check(t, ex, cases)
	})
}
