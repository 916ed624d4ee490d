//go:build unix

package mcpconn

// Red-team tests of the OAuth client: a hostile MCP server or
// authorization server, another local process at the redirect listener,
// and a hostile writer of the token file. Each test asserts the safe
// behaviour; a defence that does not hold is skipped with
// "redteam: FAILS: ..." so that the suite stays green while it is fixed.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/mcptest"

	"github.com/ipybox/ipybox/internal/testenv"
)

// hostileAS is an MCP server with its own authorization server on one
// origin, whose every answer a test can replace. By default it behaves:
// discovery, registration, an authorization endpoint that approves at once
// (code "c1"), and a token endpoint that issues the access token "at-good"
// to any code. Its MCP endpoint accepts "Bearer at-good" (or Accept's
// answer) and serves a tool "whoami" that returns the Authorization header
// it got.
type hostileAS struct {
	URL, Origin string
	srv         *httptest.Server

	// Each hook, when set, answers its endpoint instead.
	PRM, ASMeta, Token, Authorize, MCP http.HandlerFunc
	// Accept reports whether the MCP endpoint accepts an access token;
	// nil accepts "at-good".
	Accept func(string) bool

	tokenHits, authHits atomic.Int32
	// done is closed when the test ends: hooks that hang wait for it.
	done chan struct{}
}

func newHostileAS(t *testing.T) *hostileAS {
	t.Helper()
	h := &hostileAS{done: make(chan struct{})}
	s := mcp.NewServer(&mcp.Implementation{Name: "hostile", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "whoami"}, func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		got := req.Extra.Header.Get("Authorization")
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "you sent " + got}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "whoami_err"}, func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return nil, nil, fmt.Errorf("invalid credentials %s", req.Extra.Header.Get("Authorization"))
	})
	mcpH := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true})
	mux := http.NewServeMux()
	h.srv = httptest.NewServer(mux)
	t.Cleanup(func() { close(h.done); h.srv.CloseClientConnections(); h.srv.Close() })
	h.Origin = h.srv.URL
	h.URL = h.srv.URL + "/mcp"
	prmURL := h.Origin + "/.well-known/oauth-protected-resource/mcp"
	mux.HandleFunc("/.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		if h.PRM != nil {
			h.PRM(w, r)
			return
		}
		writeJSONT(w, 200, map[string]any{"resource": h.URL, "authorization_servers": []string{h.Origin}})
	})
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		if h.ASMeta != nil {
			h.ASMeta(w, r)
			return
		}
		writeJSONT(w, 200, h.meta())
	})
	mux.HandleFunc("/register", func(w http.ResponseWriter, r *http.Request) {
		var md map[string]any
		json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&md)
		md["client_id"] = "hostile-client"
		writeJSONT(w, 201, md)
	})
	mux.HandleFunc("/authorize", func(w http.ResponseWriter, r *http.Request) {
		h.authHits.Add(1)
		if h.Authorize != nil {
			h.Authorize(w, r)
			return
		}
		q := r.URL.Query()
		u, _ := url.Parse(q.Get("redirect_uri"))
		v := u.Query()
		v.Set("code", "c1")
		v.Set("state", q.Get("state"))
		u.RawQuery = v.Encode()
		http.Redirect(w, r, u.String(), http.StatusFound)
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		h.tokenHits.Add(1)
		if h.Token != nil {
			h.Token(w, r)
			return
		}
		writeJSONT(w, 200, map[string]any{"access_token": "at-good", "token_type": "Bearer", "expires_in": 3600})
	})
	verify := func(_ context.Context, tok string, _ *http.Request) (*auth.TokenInfo, error) {
		ok := tok == "at-good"
		if h.Accept != nil {
			ok = h.Accept(tok)
		}
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{Expiration: time.Now().Add(time.Hour)}, nil
	}
	protected := auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{ResourceMetadataURL: prmURL})(mcpH)
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		if h.MCP != nil {
			h.MCP(w, r)
			return
		}
		protected.ServeHTTP(w, r)
	})
	return h
}

func (h *hostileAS) meta() map[string]any {
	return map[string]any{
		"issuer":                                h.Origin,
		"authorization_endpoint":                h.Origin + "/authorize",
		"token_endpoint":                        h.Origin + "/token",
		"registration_endpoint":                 h.Origin + "/register",
		"response_types_supported":              []string{"code"},
		"grant_types_supported":                 []string{"authorization_code", "refresh_token"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_post", "none"},
		"code_challenge_methods_supported":      []string{"S256"},
	}
}

func writeJSONT(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// callErr calls tool of "srv" with a bound and returns the result's text
// or the error.
func callErr(m *Manager, tool string, d time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	r, err := m.CallTool(ctx, "srv", tool, map[string]any{"s": "x"})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), nil
}

// redirectOf returns the redirect_uri and state of an authorization URL.
func redirectOf(t *testing.T, authURL string) (string, string) {
	t.Helper()
	u, err := url.Parse(authURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query().Get("redirect_uri"), u.Query().Get("state")
}

func getStatus(u string) int {
	c := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(u)
	if err != nil {
		return -1
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestRedteamCallbackWrongStateIgnored: another local process (or
// unsandboxed kernel code) that finds the redirect listener's port sends it
// codes without the sign-in's state, with a wrong state, an error with a
// wrong state, on another path or method: each is refused with no effect,
// and the real redirect still signs in. Afterwards the listener is gone.
func TestRedteamCallbackWrongStateIgnored(t *testing.T) {
	testenv.CheckGoroutines(t)
	s := oauthServer(t, nil)
	var redirect string
	var statuses []int
	open := func(ctx context.Context, server, u string) error {
		var state string
		redirect, state = redirectOf(t, u)
		for _, q := range []string{"?code=evil", "?code=evil&state=", "?code=evil&state=" + url.QueryEscape(state+"x"), "?error=access_denied&state=nope", "?code=evil&state=" + url.QueryEscape(strings.ToLower(state))} {
			statuses = append(statuses, getStatus(redirect+q))
		}
		statuses = append(statuses, getStatus(strings.TrimSuffix(redirect, "/callback")+"/other?code=evil&state="+url.QueryEscape(state)))
		resp, err := http.Post(redirect+"?code=evil&state="+url.QueryEscape(state), "text/plain", nil)
		if err == nil {
			statuses = append(statuses, resp.StatusCode)
			resp.Body.Close()
		}
		return newBrowser().open(ctx, server, u)
	}
	m, _ := oauthManager(t, Config{URL: s.URL}, t.TempDir(), &Options{OAuthURL: open})
	if got, err := callErr(m, "tool-1", 30*time.Second); err != nil || got != "tool-1: x" {
		t.Fatalf("the real redirect did not sign in after the forged ones: %q, %v", got, err)
	}
	for i, st := range statuses {
		if st < 400 || st >= 500 {
			t.Errorf("forged redirect %d answered %d, want a 4xx refusal", i, st)
		}
	}
	if len(statuses) != 7 {
		t.Errorf("forged %d redirects, want 7: %v", len(statuses), statuses)
	}
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(strings.TrimSuffix(redirect, "/callback"), "http://"), time.Second); err == nil {
		c.Close()
		t.Errorf("the redirect listener %s still accepts connections after the sign-in", redirect)
	}
}

// TestRedteamCallbackInjectedCode: an attacker who learned the state (it
// is in the authorization URL) gets a code of its own from the same
// authorization server, for the same client and redirect URI but its own
// PKCE challenge, and races the browser to the listener. PKCE makes the
// exchange fail: no token is stored, the error is clear, and nothing hangs.
func TestRedteamCallbackInjectedCode(t *testing.T) {
	testenv.CheckGoroutines(t)
	s := oauthServer(t, nil)
	dir := t.TempDir()
	var injected atomic.Bool
	open := func(ctx context.Context, server, u string) error {
		au, _ := url.Parse(u)
		q := au.Query()
		redirect, state := q.Get("redirect_uri"), q.Get("state")
		// The attacker's own authorization request: its own challenge.
		q.Set("code_challenge", "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM")
		q.Set("state", "attacker")
		au.RawQuery = q.Encode()
		c := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Get(au.String())
		if err != nil {
			return err
		}
		resp.Body.Close()
		loc, _ := url.Parse(resp.Header.Get("Location"))
		code := loc.Query().Get("code")
		if code == "" {
			return fmt.Errorf("the attacker got no code: %s", resp.Status)
		}
		if getStatus(redirect+"?code="+url.QueryEscape(code)+"&state="+url.QueryEscape(state)) == 200 {
			injected.Store(true)
		}
		return nil
	}
	m, _ := oauthManager(t, Config{URL: s.URL}, dir, &Options{OAuthURL: open, AuthorizeTimeout: 5 * time.Second})
	t0 := time.Now()
	_, err := callErr(m, "tool-1", 30*time.Second)
	if !injected.Load() {
		t.Fatal("the attack did not reach the listener with the right state; the test proves nothing")
	}
	if err == nil {
		t.Fatal("a code obtained with the attacker's PKCE challenge signed ipybox in")
	}
	if d := time.Since(t0); d > 10*time.Second {
		t.Errorf("the failed sign-in took %v", d)
	}
	if c := s.Counts(); c.CodeExchanges != 0 {
		t.Errorf("the authorization server exchanged the injected code: %+v", c)
	}
	if list, err := ListTokens(filepath.Join(dir, "tokens.json")); err != nil || len(list) != 0 {
		t.Errorf("after the failed sign-in the token file holds %+v (%v)", list, err)
	}
	if !strings.Contains(err.Error(), `"srv"`) {
		t.Errorf("the error does not name the server: %v", err)
	}
}

// TestRedteamCallbackBounded: during a sign-in, a local attacker sends the
// listener a 2 MB request line and holds a connection open sending a
// header a byte at a time (slow-loris). The sign-in still completes, the
// listener answers the oversized request with an error, and the
// listener closes within a second or two of the sign-in, slow connection
// or not.
func TestRedteamCallbackBounded(t *testing.T) {
	testenv.CheckGoroutines(t)
	s := oauthServer(t, nil)
	var redirect string
	var bigStatus atomic.Int32
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); wg.Wait() })
	open := func(ctx context.Context, server, u string) error {
		redirect, _ = redirectOf(t, u)
		hostport := strings.TrimPrefix(strings.TrimSuffix(redirect, "/callback"), "http://")
		// Slow-loris: a header that never ends.
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", hostport)
			if err != nil {
				return
			}
			defer c.Close()
			fmt.Fprintf(c, "GET /callback HTTP/1.1\r\nHost: x\r\n")
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := c.Write([]byte("X")); err != nil {
						return
					}
				}
			}
		}()
		// Oversized: 2 MB of headers.
		c, err := net.Dial("tcp", hostport)
		if err == nil {
			c.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(c, "GET /callback?state=x HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 2<<20))
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				bigStatus.Store(int32(resp.StatusCode))
			}
			c.Close()
		}
		return newBrowser().open(ctx, server, u)
	}
	m, _ := oauthManager(t, Config{URL: s.URL}, t.TempDir(), &Options{OAuthURL: open})
	if got, err := callErr(m, "tool-1", 30*time.Second); err != nil || got != "tool-1: x" {
		t.Fatalf("sign-in under attack: %q, %v", got, err)
	}
	if st := bigStatus.Load(); st != 0 && st < 400 {
		t.Errorf("a 2 MB request got %d, want a 4xx refusal", st)
	}
	hostport := strings.TrimPrefix(strings.TrimSuffix(redirect, "/callback"), "http://")
	deadline := time.Now().Add(3 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", hostport, time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("the redirect listener %s is still open 3 s after the sign-in", hostport)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRedteamResourceConfusion: a hostile MCP server points its 401's
// resource_metadata at another server's protected resource metadata (the
// one the user trusts), hoping ipybox signs in to that server's
// authorization server and then sends the token for it to the hostile
// server. ipybox must not start a sign-in at the victim's authorization
// server.
func TestRedteamResourceConfusion(t *testing.T) {
	testenv.CheckGoroutines(t)
	victim := oauthServer(t, nil)
	evil := newHostileAS(t)
	evil.MCP = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer resource_metadata=%q`, victim.Issuer+"/.well-known/oauth-protected-resource/mcp"))
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	}
	// The hostile server's own well-known documents claim the victim too.
	evil.PRM = func(w http.ResponseWriter, r *http.Request) {
		writeJSONT(w, 200, map[string]any{"resource": victim.URL, "authorization_servers": []string{victim.Issuer}})
	}
	b := newBrowser()
	m, _ := oauthManager(t, Config{URL: evil.URL}, t.TempDir(), &Options{OAuthURL: b.open, ConnectTimeout: 5 * time.Second})
	_, err := callErr(m, "whoami", 20*time.Second)
	if err == nil {
		t.Fatal("the call succeeded")
	}
	select {
	case u := <-b.urls:
		if strings.HasPrefix(u, victim.Issuer) {
			t.Errorf("ipybox asked the user to sign in at the victim's authorization server for a hostile server: %s", u)
		}
	default:
	}
	if c := victim.Counts(); c.Registrations != 0 || c.Authorizations != 0 {
		t.Errorf("the victim's authorization server saw a registration or authorization: %+v", c)
	}
}

// TestRedteamAuthorizationEndpointScheme: a hostile authorization server
// names an authorization endpoint the application would open for the
// user: a file: URL, a javascript: URL, plain http to a remote host. None
// reaches Options.OAuthURL.
func TestRedteamAuthorizationEndpointScheme(t *testing.T) {
	testenv.CheckGoroutines(t)
	for _, ep := range []string{"file:///etc/passwd", "javascript:alert(1)", "http://evil.example/authorize", "data:text/html,<script>x</script>"} {
		t.Run(ep, func(t *testing.T) {
			h := newHostileAS(t)
			h.ASMeta = func(w http.ResponseWriter, r *http.Request) {
				md := h.meta()
				md["authorization_endpoint"] = ep
				writeJSONT(w, 200, md)
			}
			b := newBrowser()
			m, _ := oauthManager(t, Config{URL: h.URL}, t.TempDir(), &Options{OAuthURL: b.open, ConnectTimeout: 5 * time.Second})
			if _, err := callErr(m, "whoami", 20*time.Second); err == nil {
				t.Fatal("the call succeeded")
			}
			if n := b.opened.Load(); n != 0 {
				t.Errorf("the application was handed %q", <-b.urls)
			}
		})
	}
}

// TestRedteamHostileMetadataBounded: a hostile server's discovery and token
// answers are endless, huge, trickled, malformed or redirect in a loop.
// Each sign-in fails with an error naming the server within the connect
// timeout (plus slack), and nothing panics.
func TestRedteamHostileMetadataBounded(t *testing.T) {
	testenv.CheckGoroutines(t)
	endless := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"resource":"`))
		chunk := []byte(strings.Repeat("a", 64<<10))
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}
	trickle := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		for r.Context().Err() == nil {
			if _, err := w.Write([]byte(" ")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	// hang reads the request (so that the server notices the client
	// going away) and never answers.
	hang := func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}
	badJSON := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"access_token": "at-good", "expires_in": `))
	}
	// A broken resource metadata document is skipped: the SDK falls back to
	// the server's origin as its authorization server (the 2025-03-26
	// rule), so those sign-ins may succeed; they must just not hang.
	cases := []struct {
		name    string
		set     func(h *hostileAS)
		mayWork bool
	}{
		{"prm-endless", func(h *hostileAS) { h.PRM = endless }, true},
		{"prm-trickle", func(h *hostileAS) { h.PRM = trickle }, true},
		{"asmeta-endless", func(h *hostileAS) { h.ASMeta = endless }, false},
		{"asmeta-hang", func(h *hostileAS) { h.ASMeta = hang }, false},
		{"asmeta-redirect-loop", func(h *hostileAS) {
			h.ASMeta = func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, r.URL.Path, http.StatusFound) }
		}, false},
		{"token-endless", func(h *hostileAS) { h.Token = endless }, false},
		{"token-trickle", func(h *hostileAS) { h.Token = trickle }, false},
		{"token-hang", func(h *hostileAS) { h.Token = hang }, false},
		{"token-badjson", func(h *hostileAS) { h.Token = badJSON }, false},
		{"mcp-401-endless-body", func(h *hostileAS) {
			h.MCP = func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+h.Origin+`/.well-known/oauth-protected-resource/mcp"`)
				w.WriteHeader(401)
				chunk := []byte(strings.Repeat("a", 64<<10))
				for r.Context().Err() == nil {
					if _, err := w.Write(chunk); err != nil {
						return
					}
				}
			}
			h.Accept = func(string) bool { return false }
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The cases mostly wait out their timeouts, each against a
			// server of its own; the leak check runs after all of them.
			t.Parallel()
			h := newHostileAS(t)
			c.set(h)
			m, _ := oauthManager(t, Config{URL: h.URL}, t.TempDir(), &Options{OAuthURL: newBrowser().open, ConnectTimeout: 3 * time.Second, CallTimeout: 5 * time.Second, AuthorizeTimeout: 3 * time.Second})
			t0 := time.Now()
			_, err := callErr(m, "whoami", 60*time.Second)
			d := time.Since(t0)
			if err == nil {
				if !c.mayWork {
					t.Fatal("the call succeeded against a hostile authorization server")
				}
				return
			}
			if d > 15*time.Second {
				t.Errorf("the failure took %v: %v", d, err)
			}
			if !strings.Contains(err.Error(), `"srv"`) {
				t.Errorf("the error does not name the server: %v", err)
			}
			if len(err.Error()) > 4096 {
				t.Errorf("the error is %d bytes long: a hostile server fills it", len(err.Error()))
			}
		})
	}
}

// TestRedteamAbsurdExpiry: token responses with absurd expires_in values
// (negative, enormous enough to overflow a Duration, a string) neither
// crash ipybox nor make it hammer the token endpoint: at most one token
// request per tool call.
func TestRedteamAbsurdExpiry(t *testing.T) {
	testenv.CheckGoroutines(t)
	for _, exp := range []string{"-100", "0", "9223372036854775807", "1e300", `"soon"`, "1.5"} {
		t.Run(exp, func(t *testing.T) {
			h := newHostileAS(t)
			h.Token = func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"access_token":"at-good","token_type":"Bearer","refresh_token":"rt-x","expires_in":%s}`, exp)
			}
			dir := t.TempDir()
			m, _ := oauthManager(t, Config{URL: h.URL}, dir, &Options{OAuthURL: newBrowser().open, ConnectTimeout: 5 * time.Second})
			const calls = 5
			var errs []error
			for range calls {
				if _, err := callErr(m, "whoami", 20*time.Second); err != nil {
					errs = append(errs, err)
				}
			}
			// One request per tool call (three HTTP requests with the
			// session's initialize) may refresh a token that is always
			// expired; more would be a loop.
			if n := h.tokenHits.Load(); n > 3*calls {
				t.Errorf("%d token requests for %d calls", n, calls)
			}
			t.Logf("%d token requests for %d calls; %d errors", h.tokenHits.Load(), calls, len(errs))
			for _, err := range errs {
				t.Log(err)
				if !strings.Contains(err.Error(), `"srv"`) {
					t.Errorf("unclear error: %v", err)
				}
			}
			if _, err := ListTokens(filepath.Join(dir, "tokens.json")); err != nil {
				t.Errorf("the token file is unreadable afterwards: %v", err)
			}
		})
	}
}

// TestRedteamTokenInflationBricksStore: a hostile authorization server
// issues an access token of about 1 MB of '<' (the token response's size
// limit). Stored, it takes 6 MB (encoding/json escapes '<' as \u003c),
// over the token file's 4 MB read limit: every later read of the file
// fails, so the user's sign-ins to every other server are lost, and no
// server can sign in until the file is removed by hand.
func TestRedteamTokenInflationBricksStore(t *testing.T) {
	testenv.CheckGoroutines(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens.json")
	// The user's sign-in to a good server.
	good := oauthServer(t, nil)
	mg, _ := oauthManager(t, Config{URL: good.URL}, dir, &Options{OAuthURL: newBrowser().open})
	if got, err := callErr(mg, "tool-1", 30*time.Second); err != nil || got != "tool-1: x" {
		t.Fatalf("good sign-in: %q %v", got, err)
	}
	// The hostile server.
	h := newHostileAS(t)
	big := strings.Repeat("<", 1<<20-200)
	h.Token = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":3600}`, big)
	}
	mh, _ := oauthManager(t, Config{URL: h.URL}, dir, &Options{OAuthURL: newBrowser().open, ConnectTimeout: 5 * time.Second})
	callErr(mh, "whoami", 20*time.Second)
	if h.tokenHits.Load() == 0 {
		t.Fatal("the hostile token endpoint was never reached; the test proves nothing")
	}
	list, err := ListTokens(file)
	if err != nil {
		t.Fatalf("after a hostile server's sign-in the token file is unreadable: %v", err)
	}
	found := false
	for _, s := range list {
		found = found || s.URL == good.URL
	}
	if !found {
		t.Errorf("the good server's sign-in is gone: %+v", list)
	}
}

// TestRedteamTokenFileSymlinks: whoever can write the token folder plants
// symbolic links at the token file and at its lock file. ipybox neither
// reads through nor writes through them.
func TestRedteamTokenFileSymlinks(t *testing.T) {
	t.Parallel()
	for _, which := range []string{"tokens.json", ".oauth-tokens.json.lock"} {
		t.Run(which, func(t *testing.T) {
			dir := t.TempDir()
			target := filepath.Join(t.TempDir(), "target")
			os.WriteFile(target, []byte(`{"version":1,"servers":{}}`), 0o600)
			file := filepath.Join(dir, "tokens.json")
			if which == "tokens.json" {
				os.Symlink(target, file)
			} else {
				// The lock's name follows the default file name.
				file = filepath.Join(dir, tokenFileName)
				os.Symlink(target, filepath.Join(dir, which))
			}
			st := tokenStore{path: file}
			err := st.save("srv", "https://example.com/mcp", &storedSignIn{ClientID: "c", AccessToken: "secret-at", TokenURL: "https://example.com/token"})
			if err == nil {
				t.Errorf("save through a planted symbolic link %s succeeded", which)
			}
			data, _ := os.ReadFile(target)
			if strings.Contains(string(data), "secret-at") {
				t.Errorf("the token was written through the link into %s", target)
			}
			if fi, err := os.Lstat(filepath.Join(dir, which)); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("the planted link was replaced (a save through it would have been silent): %v", err)
			}
		})
	}
}

// TestRedteamTokenFileLooseMode: a token file that others may read (a
// file another program or user created 0644) is refused, with the fix.
func TestRedteamTokenFileLooseMode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens.json")
	os.WriteFile(file, []byte(`{"version":1,"servers":{"https://e.example/mcp":{"clientId":"c","accessToken":"planted","tokenUrl":"https://e.example/t"}}}`), 0o644)
	os.Chmod(file, 0o644)
	_, err := tokenStore{path: file}.load("srv", "https://e.example/mcp")
	if err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("load of a 0644 token file: %v, want a refusal naming chmod 600", err)
	}
}

// TestRedteamTokenFileConcurrentWriters: many writers (goroutines with
// their own file descriptors, as separate processes would have) save and
// remove sign-ins at once: the file stays valid JSON with mode 0600, and
// every save that was not removed is there.
func TestRedteamTokenFileConcurrentWriters(t *testing.T) {
	t.Parallel()
	// In a bubble the lock's bounded wait (a second) runs on the fake
	// clock, which moves only while every writer waits: what is checked is
	// that no update is lost, whatever the machine's load.
	synctest.Test(t, testTokenFileConcurrentWriters)
}

func testTokenFileConcurrentWriters(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens.json")
	var wg sync.WaitGroup
	const n = 24
	errs := make(chan error, 3*n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := tokenStore{path: file}
			u := fmt.Sprintf("https://s%d.example/mcp", i)
			for j := range 5 {
				if err := st.save("srv", u, &storedSignIn{ClientID: "c", AccessToken: fmt.Sprintf("at-%d-%d", i, j), TokenURL: "https://t.example", Obtained: time.Now()}); err != nil {
					errs <- err
				}
			}
			if i%3 == 0 {
				if _, err := st.remove("srv", u); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	list, err := ListTokens(file)
	if err != nil {
		t.Fatal(err)
	}
	want := n - (n+2)/3
	if len(list) != want {
		t.Errorf("%d sign-ins stored, want %d", len(list), want)
	}
	for i := range n {
		e, err := tokenStore{path: file}.load("srv", fmt.Sprintf("https://s%d.example/mcp", i))
		if err != nil {
			t.Fatal(err)
		}
		if i%3 != 0 && (e == nil || e.AccessToken != fmt.Sprintf("at-%d-4", i)) {
			t.Errorf("server %d: %+v, want its last token", i, e)
		}
	}
	fi, _ := os.Stat(file)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".tokens.json.*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestRedteamTokenLockHeld: another process (a stuck ipybox, or any
// program of the user's) holds the token file's lock and never lets go. A
// tool call to an OAuth server must still end within its context's
// deadline rather than block forever in flock(2).
func TestRedteamTokenLockHeld(t *testing.T) {
	t.Parallel()
	// The call's deadline and the lock's bounded wait run on the bubble's
	// clock: the waits are exact and take no time.
	bubble(t, testTokenLockHeld)
}

func testTokenLockHeld(t *testing.T, n *testenv.Network) {
	s := oauthServer(t, &mcptest.OAuthServerOptions{Network: n})
	dir := t.TempDir()
	lock := filepath.Join(dir, "."+tokenFileName+".lock")
	f, err := os.OpenFile(lock, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			f.Close()
		}
	}
	defer release()
	reg := NewRegistry()
	reg.Add("srv", Config{URL: s.URL})
	m, err := New(reg, &Options{TokenFile: filepath.Join(dir, tokenFileName), OAuthURL: newBrowser().on(n).open, ConnectTimeout: 3 * time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	onNetwork(m, n)
	done := make(chan error, 1)
	go func() {
		_, err := callErr(m, "tool-1", 3*time.Second)
		done <- err
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		release() // let the blocked call go, so that the test ends
		<-done
		t.Errorf("a tool call with a 3 s deadline was still blocked on the token file's lock after 10 s")
	}
	closed := make(chan struct{})
	go func() { m.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		release()
		<-closed
		t.Errorf("Close blocked on the token file's lock")
	}
}

// TestRedteamTokenInResultsAndErrors: a server that echoes the bearer
// token it got (in a tool result, in a tool error, in an HTTP error body)
// hands it to kernel code through the tool's answer. ipybox knows the
// token: no text it returns may hold it.
func TestRedteamTokenInResultsAndErrors(t *testing.T) {
	testenv.CheckGoroutines(t)
	h := newHostileAS(t)
	token := "at-secret-" + strings.Repeat("z", 24)
	h.Token = func(w http.ResponseWriter, r *http.Request) {
		writeJSONT(w, 200, map[string]any{"access_token": token, "token_type": "Bearer", "expires_in": 3600})
	}
	h.Accept = func(s string) bool { return s == token }
	m, _ := oauthManager(t, Config{URL: h.URL}, t.TempDir(), &Options{OAuthURL: newBrowser().open, ConnectTimeout: 5 * time.Second})
	for _, tool := range []string{"whoami", "whoami_err"} {
		got, err := callErr(m, tool, 20*time.Second)
		text := got
		if err != nil {
			text = err.Error()
		}
		if h.tokenHits.Load() == 0 {
			t.Fatalf("no sign-in happened: %q %v", got, err)
		}
		if strings.Contains(text, token) {
			t.Errorf("%s: the answer holds the access token: %q", tool, text)
		}
	}
	// An HTTP error whose body quotes the request's Authorization header.
	h.MCP = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" {
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+h.Origin+`/.well-known/oauth-protected-resource/mcp"`)
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		http.Error(w, "backend failed for "+r.Header.Get("Authorization"), http.StatusBadRequest)
	}
	m.Stop(ctxT(t), "srv")
	_, err := callErr(m, "whoami", 20*time.Second)
	if err == nil {
		t.Fatal("the call succeeded")
	}
	if strings.Contains(err.Error(), token) {
		t.Errorf("the error holds the access token: %v", err)
	}
}

// TestRedteamRedirectToOtherOrigin: an MCP endpoint (hostile, or with an
// open redirect) answers a request with 307 to another origin: another
// port on the same host, or the same port under another name. ipybox must
// not send that origin the bearer token, whether it came from OAuth or
// from a configured Authorization header.
func TestRedteamRedirectToOtherOrigin(t *testing.T) {
	testenv.CheckGoroutines(t)
	var stolen sync.Map
	thief := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := r.Header.Get("Authorization"); a != "" {
			stolen.Store(a, true)
		}
		http.Error(w, "gone", http.StatusNotFound)
	}))
	t.Cleanup(thief.Close)
	thiefPort := thief.Listener.Addr().(*net.TCPAddr).Port
	cases := []struct {
		name   string
		to     string
		header bool
	}{
		{"oauth-other-port", fmt.Sprintf("http://127.0.0.1:%d/mcp", thiefPort), false},
		{"header-other-host", fmt.Sprintf("http://localhost:%d/mcp", thiefPort), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stolen.Clear()
			h := newHostileAS(t)
			signedIn := atomic.Bool{}
			h.MCP = func(w http.ResponseWriter, r *http.Request) {
				a := r.Header.Get("Authorization")
				if a == "" {
					w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+h.Origin+`/.well-known/oauth-protected-resource/mcp"`)
					http.Error(w, "no token", http.StatusUnauthorized)
					return
				}
				signedIn.Store(true)
				http.Redirect(w, r, c.to, http.StatusTemporaryRedirect)
			}
			cfg := Config{URL: h.URL}
			if c.header {
				cfg.Headers = map[string]string{"Authorization": "Bearer static-secret"}
			}
			m, _ := oauthManager(t, cfg, t.TempDir(), &Options{OAuthURL: newBrowser().open, ConnectTimeout: 5 * time.Second})
			callErr(m, "whoami", 20*time.Second)
			if !signedIn.Load() {
				t.Fatal("the MCP endpoint never got a token; the test proves nothing")
			}
			stolen.Range(func(k, _ any) bool {
				t.Errorf("the other origin %s got %q", c.to, k)
				return true
			})
		})
	}
}

// TestRedteamFixedRedirectPortSquatted: a pre-registered client's fixed
// redirect port is taken by another local process before the sign-in
// starts (on 127.0.0.1, and on every address). ipybox does not hand out an
// authorization URL whose redirect the squatter would receive: it fails at
// once, naming the port and the fix.
func TestRedteamFixedRedirectPortSquatted(t *testing.T) {
	testenv.CheckGoroutines(t)
	for _, addr := range []string{"127.0.0.1", "0.0.0.0"} {
		t.Run(addr, func(t *testing.T) {
			s := oauthServer(t, &mcptest.OAuthServerOptions{ClientID: "pre", ClientSecret: "pre-secret-0123456789"})
			ln, err := net.Listen("tcp", addr+":0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			var squatted atomic.Int32
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					squatted.Add(1)
					c.Close()
				}
			}()
			port := ln.Addr().(*net.TCPAddr).Port
			b := newBrowser()
			m, _ := oauthManager(t, Config{URL: s.URL, OAuth: &OAuthConfig{ClientID: "pre", ClientSecret: "${SECRET}", RedirectPort: port}}, t.TempDir(), &Options{OAuthURL: b.open, DotEnv: map[string]string{"SECRET": "pre-secret-0123456789"}})
			_, err = callErr(m, "tool-1", 20*time.Second)
			if err == nil || !strings.Contains(err.Error(), fmt.Sprint(port)) {
				t.Fatalf("sign-in with a squatted redirect port: %v, want an error naming port %d", err, port)
			}
			if n := b.opened.Load(); n != 0 {
				t.Errorf("the application was handed an authorization URL whose redirect goes to the squatter: %s", <-b.urls)
			}
			if n := squatted.Load(); n != 0 {
				t.Errorf("the squatter got %d connections", n)
			}
		})
	}
}

// TestRedteamLogsHoldNoSignInSecrets: with debug logging, a whole sign-in
// (discovery, registration, authorization, code exchange, a refresh)
// leaves in the logs no access or refresh token, no client secret, no
// authorization code, no state and no PKCE verifier or challenge.
func TestRedteamLogsHoldNoSignInSecrets(t *testing.T) {
	testenv.CheckGoroutines(t)
	bubble(t, func(t *testing.T, n *testenv.Network) {
		s := oauthServer(t, &mcptest.OAuthServerOptions{TokenLifetime: 2 * time.Second, Network: n})
		var secrets sync.Map
		open := func(ctx context.Context, server, u string) error {
			au, _ := url.Parse(u)
			for _, k := range []string{"state", "code_challenge"} {
				secrets.Store(au.Query().Get(k), k)
			}
			go func() {
				c := &http.Client{Transport: n.Transport(), Timeout: 10 * time.Second, CheckRedirect: func(r *http.Request, _ []*http.Request) error {
					if code := r.URL.Query().Get("code"); code != "" {
						secrets.Store(code, "code")
					}
					return nil
				}}
				if resp, err := c.Get(u); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
			return nil
		}
		dir := t.TempDir()
		m, logs := oauthManager(t, Config{URL: s.URL}, dir, &Options{OAuthURL: open})
		onNetwork(m, n)
		if got, err := callErr(m, "tool-1", 30*time.Second); err != nil || got != "tool-1: x" {
			t.Fatalf("sign-in: %q %v", got, err)
		}
		time.Sleep(2500 * time.Millisecond) // on the bubble's clock: the token expires, the next call refreshes it
		if got, err := callErr(m, "tool-1", 30*time.Second); err != nil || got != "tool-1: x" {
			t.Fatalf("after the refresh: %q %v", got, err)
		}
		if c := s.Counts(); c.Refreshes == 0 {
			t.Errorf("no refresh happened: %+v", c)
		}
		data, _ := os.ReadFile(filepath.Join(dir, "tokens.json"))
		var f tokenFile
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatal(err)
		}
		for _, m := range f.SignIns {
			for _, e := range m {
				secrets.Store(e.ClientSecret, "client secret")
			}
		}
		for _, tok := range s.Tokens() {
			secrets.Store(tok, "token")
		}
		count := 0
		secrets.Range(func(k, v any) bool {
			if k.(string) == "" {
				return true
			}
			count++
			if strings.Contains(logs.String(), k.(string)) {
				t.Errorf("the logs hold the %s", v)
			}
			return true
		})
		if count < 5 {
			t.Errorf("only %d secrets were collected; the test proves little", count)
		}
	})
}
