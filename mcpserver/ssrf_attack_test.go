package mcpserver

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestAttackClientURLReachesLoopback: a client's register_mcp_server with
// a URL made this host send requests to its own loopback services (and
// private network): write-side SSRF. The egress proxy's guard now judges
// every address a client's URL server is dialled at: loopback by IP, by
// name, IPv6, the unspecified address, an IPv4-mapped IPv6 literal, an
// oauth block, the SSE transport, the metadata address and private
// ranges all reach nothing, and the error names the flag (the OAuth
// endpoints a public server names: mcpconn's TestAttackClientURLEveryHop).
// The operator's --allow-private-urls (or --allow-host-servers) lets the
// same registration work (the test can fail); --mcp-config servers are
// never limited.
func TestAttackClientURLReachesLoopback(t *testing.T) {
	testenv.NeedsPython(t)
	var hits atomic.Int64
	h, shutdown := mcptest.Handler("http", nil)
	t.Cleanup(shutdown)
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		h.ServeHTTP(w, r)
	}))
	ln, err := net.Listen("tcp", "[::]:0") // loopback of both families
	if err != nil {
		testenv.Missing(t, "a dual-stack listener ([::]:0): %v", err)
	}
	ts.Listener = ln
	ts.Start()
	t.Cleanup(ts.Close)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	urls := []string{
		"http://127.0.0.1:" + port + "/mcp",
		"http://localhost:" + port + "/mcp",
		"http://[::1]:" + port + "/mcp",
		"http://0.0.0.0:" + port + "/mcp",
		"http://[::ffff:127.0.0.1]:" + port + "/mcp",
		"http://127.0.0.1:" + port + "/mcp#oauth",  // discovery of an oauth block
		"http://127.0.0.1:" + port + "/sse#sse",    // the SSE transport
		"http://169.254.169.254/latest/meta-data/", // the cloud's metadata service
		"http://10.0.0.1:" + port + "/mcp",         // the private network
		"http://[fd00::1]:" + port + "/mcp",
	}
	srv := newGatedServer(t, &Options{Workspace: t.TempDir(), Sessions: SessionOptions{NoZygote: true}})
	cs := connect(t, srv, nil)
	for i, u := range urls {
		base, frag, _ := strings.Cut(u, "#")
		params := map[string]any{"url": base}
		switch frag {
		case "oauth":
			params["oauth"] = map[string]any{"clientId": "c"}
		case "sse":
			params["type"] = "sse"
		}
		res := call(t, cs, "register_mcp_server", map[string]any{"server_name": "ssrf" + string(rune('a'+i)), "server_params": params})
		if !res.IsError || !strings.Contains(text(res), "--allow-private-urls") {
			t.Errorf("a client's %s: error %v, want a refusal that names --allow-private-urls: %s", u, res.IsError, short(text(res)))
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the loopback service got %d requests from the host on a client's behalf", n)
	}

	allowed := newGatedServer(t, &Options{Workspace: t.TempDir(), Sessions: SessionOptions{NoZygote: true}, AllowPrivateURLs: true})
	res := call(t, connect(t, allowed, nil), "register_mcp_server", map[string]any{"server_name": "mine", "server_params": map[string]any{"url": urls[0]}})
	if res.IsError || hits.Load() == 0 {
		t.Errorf("with AllowPrivateURLs, the client's loopback server: %s", short(text(res)))
	}
}
