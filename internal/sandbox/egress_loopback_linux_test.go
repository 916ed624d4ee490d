package sandbox

import (
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"testing"

	"github.com/ipybox/ipybox/internal/testenv"
)

// httpOn serves "server NAME" on a fresh port of addr on the host and
// returns the port.
func httpOn(t *testing.T, addr, name string) int {
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
	return ln.Addr().(*net.TCPAddr).Port
}

// TestAttackLoopbackAllowlist is the attack of issue 34.6 from inside the
// real sandbox, through the real egress proxy, with no test hook: a model
// server on the host's 127.0.0.1:P1 is allowlisted, and ordinary clients
// (urllib, requests, a CONNECT tunnel) reach it; no other port of the
// host's loopback is reachable by any name or spelling (P2 stands for
// ipybox's own HTTP server); the tool server's forward still works.
func TestAttackLoopbackAllowlist(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	if err := exec.Command(python, "-c", "import requests").Run(); err != nil {
		testenv.Missing(t, "%s has no requests module (scripts/setup.sh installs python3-requests): %v", python, err)
	}
	p1 := httpOn(t, "127.0.0.1", "model")
	p2 := httpOn(t, "127.0.0.1", "ipybox")
	p6 := httpOn(t, "::1", "six")
	tool := unixEcho(t, "hello from the tool server")
	const fwdPort = 47002
	cfg := DefaultConfig()
	if err := cfg.AllowDomains(fmt.Sprintf("127.0.0.1:%d", p1), fmt.Sprintf("[::1]:%d", p6), "localhost", "*"); err != nil {
		t.Fatal(err)
	}
	x := newSbx(t, cfg, &Options{Forwards: []Forward{{Port: fwdPort, Socket: tool}}})
	x.attempts(t, `
import urllib.request, urllib.error, http.client
def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return (r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        raise OSError(e.code, e.read().decode())
def rget(url):
    import requests
    r = requests.get(url, timeout=10)
    if r.status_code != 200:
        raise OSError(r.status_code, r.text)
    return (r.status_code, r.text)
def connect(host, port):
    c = http.client.HTTPConnection("127.0.0.1", 3128, timeout=10)
    c.set_tunnel(host, port)
    try:
        c.request("GET", "/tunneled")
    except OSError as e:
        raise OSError(0, str(e))
    r = c.getresponse()
    return (r.status, r.read().decode())
def tcp(host, port):
    s = socket.create_connection((host, port), timeout=3)
    try:
        return s.recv(100)
    finally:
        s.close()
`, []check{
		{"env", `"NO_PROXY=[%s] no_proxy=[%s]" % (os.environ["NO_PROXY"], os.environ["no_proxy"])`, true, "NO_PROXY=[] no_proxy=[]"},
		{"urllib-allowed", fmt.Sprintf("get('http://127.0.0.1:%d/a')", p1), true, "server model /a"},
		{"requests-allowed", fmt.Sprintf("rget('http://127.0.0.1:%d/b')", p1), true, "server model /b"},
		{"requests-localhost-allowed", fmt.Sprintf("rget('http://localhost:%d/c')", p1), true, "server model /c"},
		{"connect-allowed", fmt.Sprintf("connect('127.0.0.1', %d)", p1), true, "server model /tunneled"},
		{"urllib-v6-allowed", fmt.Sprintf("get('http://[::1]:%d/d')", p6), true, "server six /d"},
		{"urllib-other-port", fmt.Sprintf("get('http://127.0.0.1:%d/')", p2), false, "403"},
		{"requests-other-port", fmt.Sprintf("rget('http://127.0.0.1:%d/')", p2), false, "403"},
		{"requests-localhost-other-port", fmt.Sprintf("rget('http://localhost:%d/')", p2), false, "403"},
		{"connect-other-port", fmt.Sprintf("connect('127.0.0.1', %d)", p2), false, "403"},
		{"connect-localhost-other-port", fmt.Sprintf("connect('localhost', %d)", p2), false, "403"},
		{"urllib-v6-other-port", fmt.Sprintf("get('http://[::1]:%d/')", p2), false, "403"},
		{"urllib-v6-model-port", fmt.Sprintf("get('http://[::1]:%d/')", p1), false, "403"},
		{"urllib-mapped", fmt.Sprintf("get('http://[::ffff:127.0.0.1]:%d/')", p2), false, "403"},
		{"urllib-decimal", fmt.Sprintf("get('http://2130706433:%d/')", p1), false, "403"},
		{"urllib-hex", fmt.Sprintf("get('http://0x7f000001:%d/')", p1), false, "403"},
		{"urllib-short", fmt.Sprintf("get('http://127.1:%d/')", p2), false, "403"},
		{"urllib-octal", fmt.Sprintf("get('http://0177.0.0.1:%d/')", p2), false, "403"},
		{"direct-socket", fmt.Sprintf("tcp('127.0.0.1', %d)", p1), false, "ECONNREFUSED"}, // only the proxy reaches the host
		{"forward", fmt.Sprintf("tcp('127.0.0.1', %d)", fwdPort), true, "hello from the tool server"},
	})
}
