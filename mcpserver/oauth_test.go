package mcpserver

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/mcptest"
)

// TestOAuthSignInByURLElicitation: a remote server that needs an OAuth
// sign-in is signed in to through the MCP client, with URL-mode
// elicitation; a client without it gets an error naming
// `ipybox auth login SERVER`.
func TestOAuthSignInByURLElicitation(t *testing.T) {
	ws := sharedWorkspace(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // the token file
	s := mcptest.NewOAuthServer(nil)
	t.Cleanup(s.Close)
	srv := newServer(t, &Options{Workspace: ws})
	url := serveHTTP(t, srv)
	params := map[string]any{"server_name": "oauth_el", "server_params": map[string]any{"url": s.URL}}

	// A client that cannot open URLs.
	plain := connectHTTP(t, url, nil)
	res, err := plain.CallTool(t.Context(), &mcp.CallToolParams{Name: "register_mcp_server", Arguments: params})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(text(res), "ipybox auth login oauth_el") || !strings.Contains(text(res), "URL-mode elicitation") {
		t.Errorf("client without URL elicitation: %s", text(res))
	}

	// A client that can: it opens the page (headlessly here).
	var asked atomic.Int32
	var gotMode, gotURL atomic.Value
	cs := connectHTTP(t, url, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(ctx context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			asked.Add(1)
			gotMode.Store(r.Params.Mode)
			gotURL.Store(r.Params.URL)
			go func() {
				c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
				if resp, err := c.Get(r.Params.URL); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
			return &mcp.ElicitResult{Action: "accept"}, nil
		},
	})
	res = call(t, cs, "register_mcp_server", params)
	if res.IsError {
		t.Fatalf("register with URL elicitation: %s", text(res))
	}
	if asked.Load() != 1 || gotMode.Load() != "url" || !strings.HasPrefix(gotURL.Load().(string), s.Issuer+"/authorize?") {
		t.Errorf("elicitations: %d, mode %v, url %v", asked.Load(), gotMode.Load(), gotURL.Load())
	}
	if got := run(t, cs, "from mcptools.oauth_el.tool_1 import Params, run\nprint(run(Params(s='signed')))"); got != "tool-1: signed" {
		t.Errorf("tool call after the sign-in: %q", got)
	}
	// The other session now has the stored token: no sign-in needed.
	if got := run(t, plain, "from mcptools.oauth_el.tool_1 import Params, run\nprint(run(Params(s='shared')))"); got != "tool-1: shared" {
		t.Errorf("the other session, with the stored token: %q", got)
	}
	if c := s.Counts(); c.Authorizations != 1 {
		t.Errorf("sign-ins: %+v", c)
	}
}
