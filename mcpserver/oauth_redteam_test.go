package mcpserver

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestRedteamKernelCannotShapeSignInElicitation: kernel code makes ipybox
// ask the MCP client to open a sign-in page (it calls a tool of a server
// whose grant was revoked) and tries to put its own words and links into
// that question: in the tool's arguments, and by naming servers that are
// not registered. The question the user sees is ipybox's fixed text with
// the registered name and the authorization server's URL, nothing of the
// kernel's; unregistered names ask nothing; declining does not loop (one
// question per call at most); and what kernel code gets back holds no
// sign-in URL (its state) and no token.
func TestRedteamKernelCannotShapeSignInElicitation(t *testing.T) {
	signInFromCell(t, false)
}

// TestRedteamSignInFromCellWithoutStandaloneStream: the same, with a
// client that opens no standalone SSE stream (the MCP specification makes
// that stream optional). The approval questions of a cell reach such a
// client, on the cell's own request stream; the sign-in question does not
// (its context is not the cell's request), so kernel code gets "stream not
// connected or already closed" and the user is never asked.
func TestRedteamSignInFromCellWithoutStandaloneStream(t *testing.T) {
	signInFromCell(t, true)
}

func signInFromCell(t *testing.T, noStandalone bool) {
	ws := sharedWorkspace(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	s := mcptest.NewOAuthServer(nil)
	t.Cleanup(s.Close)
	srv := newServer(t, &Options{Workspace: ws})
	url := serveHTTP(t, srv)

	type asked struct{ msg, url string }
	var mu sync.Mutex
	var got []asked
	decline := false
	cs := connectHTTPStream(t, url, noStandalone, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}},
		ElicitationHandler: func(ctx context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			mu.Lock()
			got = append(got, asked{r.Params.Message, r.Params.URL})
			d := decline
			mu.Unlock()
			if d {
				return &mcp.ElicitResult{Action: "decline"}, nil
			}
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
	res := call(t, cs, "register_mcp_server", map[string]any{"server_name": "oauth_rt", "server_params": map[string]any{"url": s.URL}})
	if res.IsError {
		t.Fatalf("register: %s", text(res))
	}
	mu.Lock()
	got, decline = nil, true
	mu.Unlock()
	s.RevokeAll()

	out := run(t, cs, `import importlib
phish = "ipybox: your session expired. Sign in again at https://evil.example/login\n\nhttps://evil.example/login"
from mcptools.oauth_rt.tool_1 import Params, run
for i in range(3):
    try:
        print("RESULT", run(Params(s=phish)))
    except Exception as e:
        print("ERROR", type(e).__name__, str(e)[:400])
for name in ["evil", "ipybox: sign in at https://evil.example", "../oauth_rt"]:
    try:
        importlib.import_module("mcptools." + name + ".tool_1")
        print("IMPORTED", name)
    except Exception as e:
        print("NOMOD", type(e).__name__)
`)
	t.Logf("kernel:\n%s", out)
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 {
		t.Fatalf("no sign-in was asked for; the test proves nothing:\n%s", out)
	}
	if len(got) > 3 {
		t.Errorf("%d sign-in questions for 3 calls", len(got))
	}
	for _, a := range got {
		if strings.Contains(a.msg, "evil") || strings.Contains(a.url, "evil") {
			t.Errorf("the kernel's text reached the question: %q %q", a.msg, a.url)
		}
		if !strings.Contains(a.msg, "oauth_rt") || !strings.HasPrefix(a.msg, "ipybox: sign in to the MCP server ") {
			t.Errorf("unexpected question text: %q", a.msg)
		}
		if !strings.HasPrefix(a.url, s.Issuer+"/authorize?") {
			t.Errorf("the question's URL is not the authorization server's: %q", a.url)
		}
		if i := strings.Index(a.url, "state="); i >= 0 {
			state := strings.SplitN(a.url[i+len("state="):], "&", 2)[0]
			if strings.Contains(out, state) {
				t.Errorf("kernel code saw the sign-in's state %q", state)
			}
		}
	}
	if strings.Contains(out, "RESULT") {
		t.Errorf("a declined sign-in still called the tool:\n%s", out)
	}
	if strings.Contains(out, "/authorize?") || strings.Contains(out, "code_challenge") {
		t.Errorf("kernel code saw the authorization URL:\n%s", out)
	}
	for _, tok := range s.Tokens() {
		if strings.Contains(out, tok) {
			t.Errorf("kernel code saw a token")
		}
	}
}

// connectHTTPStream is connectHTTP, with or without the standalone SSE
// stream.
func connectHTTPStream(t *testing.T, url string, noStandalone bool, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, copts)
	hc := &http.Client{Transport: testenv.Bearer{Token: testToken}}
	// URL-mode elicitation is a request from the server: 2025-11-25.
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, DisableStandaloneSSE: noStandalone, HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: legacyVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}
