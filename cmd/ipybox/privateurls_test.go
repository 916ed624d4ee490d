package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestAllowPrivateURLsFlag: through the real CLI, a client's
// register_mcp_server of a loopback URL is refused by default, with an
// error that names --allow-private-urls, and the loopback server gets no
// request; with --allow-private-urls, and with --allow-host-servers, the
// same registration connects.
func TestAllowPrivateURLsFlag(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	var hits atomic.Int64
	h, shutdown := mcptest.Handler("http", nil)
	t.Cleanup(shutdown)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	register := func(flags ...string) (string, bool) {
		args := append([]string{"mcp", "--workspace", t.TempDir(), "--pool", "0", "--no-sandbox"}, flags...)
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1")
		cs := goClient(t, &mcp.CommandTransport{Command: cmd}, nil)
		defer cs.Close()
		return callText(t, cs, "register_mcp_server", map[string]any{"server_name": "local", "server_params": map[string]any{"url": srv.URL + "/mcp"}})
	}
	if out, isErr := register(); !isErr || !strings.Contains(out, "--allow-private-urls") || hits.Load() != 0 {
		t.Errorf("by default: error %v, %d requests, %q; want a refusal that names --allow-private-urls, and none", isErr, hits.Load(), out)
	}
	for _, flag := range []string{"--allow-private-urls", "--allow-host-servers"} {
		if out, isErr := register(flag); isErr || !strings.Contains(out, "from mcptools.local.") {
			t.Errorf("with %s: %q", flag, out)
		}
	}
}
