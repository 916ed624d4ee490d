package mcpconn

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// browser plays the user's browser: it opens the authorization URL and
// follows the redirects, which end at mcpconn's loopback listener. It
// counts the URLs it was handed.
type browser struct {
	opened atomic.Int32
	delay  time.Duration
	urls   chan string
	net    *testenv.Network // where it browses; nil: the real network
}

func newBrowser() *browser { return &browser{urls: make(chan string, 16)} }

// on makes b browse on the in-memory network n.
func (b *browser) on(n *testenv.Network) *browser {
	b.net = n
	return b
}

func (b *browser) open(ctx context.Context, server, u string) error {
	b.opened.Add(1)
	select {
	case b.urls <- u:
	default:
	}
	if b.net == nil {
		testenv.Browse(u, b.delay, 10*time.Second)
		return nil
	}
	go func() {
		time.Sleep(b.delay)
		tr := b.net.Transport()
		tr.DisableKeepAlives = true
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		if resp, err := c.Get(u); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	return nil
}

// bubble runs f in a synctest bubble, on an in-memory network (see
// testenv.Network): token lifetimes, refresh margins and sign-in waits
// pass on the bubble's fake clock, at once and exactly, and the bubble
// ends only when every goroutine it started has.
func bubble(t *testing.T, f func(t *testing.T, n *testenv.Network)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) { f(t, testenv.NewNetwork()) })
}

// onNetwork makes m reach its servers, and take its sign-in's redirect,
// on the in-memory network n.
func onNetwork(m *Manager, n *testenv.Network) *Manager {
	m.http = n.Transport()
	m.listen = n.ListenAddr
	return m
}

// oauthManager returns a Manager for one server "srv" at cfg, with the
// token file in dir.
func oauthManager(t *testing.T, cfg Config, dir string, opts *Options) (*Manager, *testenv.Buffer) {
	t.Helper()
	logs := &testenv.Buffer{}
	var o Options
	if opts != nil {
		o = *opts
	}
	o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o.TokenFile = filepath.Join(dir, "tokens.json")
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	return newManager(t, map[string]Config{"srv": cfg}, &o), logs
}

func oauthServer(t *testing.T, opts *mcptest.OAuthServerOptions) *mcptest.OAuthServer {
	s := mcptest.NewOAuthServer(opts)
	t.Cleanup(s.Close)
	return s
}

// noTokens fails t when text holds any token the server issued.
func noTokens(t *testing.T, s *mcptest.OAuthServer, where, text string) {
	t.Helper()
	for _, tok := range s.Tokens() {
		if strings.Contains(text, tok) {
			t.Errorf("%s holds a token (%s…): %s", where, tok[:6], text)
		}
	}
}

// TestOAuthSignInStoreReuse: a server that answers 401 with resource
// metadata gets a sign-in with no oauth block (discovery, dynamic
// registration, PKCE), the token is stored 0600, and a later Manager (a
// later process) uses it without signing in again.
func TestOAuthSignInStoreReuse(t *testing.T) {
	testenv.CheckGoroutines(t)
	s := oauthServer(t, nil)
	dir := t.TempDir()
	b := newBrowser()
	m, logs := oauthManager(t, Config{URL: s.URL}, dir, &Options{OAuthURL: b.open})
	if got := callText(t, m, "srv", "tool-1", map[string]any{"s": "x"}); got != "tool-1: x" {
		t.Fatalf("call: %q", got)
	}
	if c := s.Counts(); c.Registrations != 1 || c.Authorizations != 1 || c.CodeExchanges != 1 {
		t.Errorf("counts after sign-in: %+v", c)
	}
	u := <-b.urls
	for _, p := range []string{"code_challenge_method=S256", "code_challenge=", "resource=", "redirect_uri=http%3A%2F%2F127.0.0.1%3A"} {
		if !strings.Contains(u, p) {
			t.Errorf("authorization URL lacks %q: %s", p, u)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, "tokens.json"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode().Perm())
	}
	data, _ := os.ReadFile(filepath.Join(dir, "tokens.json"))
	if !strings.Contains(string(data), `"`+s.URL+`"`) {
		t.Errorf("token file not keyed by the server URL:\n%s", data)
	}
	if !strings.Contains(string(data), `"srv"`) {
		t.Errorf("token file not keyed by the server name:\n%s", data)
	}
	listed, err := ListTokens(filepath.Join(dir, "tokens.json"))
	if err != nil || len(listed) != 1 || listed[0].URL != s.URL || listed[0].Server != "srv" || !listed[0].Refreshable || listed[0].Expiry.IsZero() {
		t.Errorf("ListTokens = %+v, %v", listed, err)
	}

	// A later process, with no way to sign in: the stored token works.
	m2, logs2 := oauthManager(t, Config{URL: s.URL}, dir, nil)
	if got := callText(t, m2, "srv", "tool-1", map[string]any{"s": "y"}); got != "tool-1: y" {
		t.Fatalf("call with the stored token: %q", got)
	}
	if c := s.Counts(); c.Authorizations != 1 || c.Registrations != 1 {
		t.Errorf("the stored token was not reused: %+v", c)
	}
	noTokens(t, s, "the logs", logs.String()+logs2.String())

	// Logged out: the next process needs a sign-in.
	if had, err := DeleteToken(filepath.Join(dir, "tokens.json"), "", "srv", s.URL); !had || err != nil {
		t.Fatalf("DeleteToken = %v, %v", had, err)
	}
	m3, _ := oauthManager(t, Config{URL: s.URL}, dir, nil)
	_, err = m3.CallTool(ctxT(t), "srv", "tool-1", map[string]any{"s": "z"})
	var lre *LoginRequiredError
	if !errors.As(err, &lre) || !strings.Contains(err.Error(), "ipybox auth login srv") {
		t.Fatalf("after logout: %v, want a *LoginRequiredError naming `ipybox auth login srv`", err)
	}
}

// TestOAuthSharedTokenFile: two Managers (two sessions, or ipybox mcp
// and ipybox auth login) share the token file: a sign-in or a refresh by
// one is used by the other, even when refresh tokens rotate.
func TestOAuthSharedTokenFile(t *testing.T) {
	testenv.CheckGoroutines(t)
	bubble(t, func(t *testing.T, n *testenv.Network) {
		s := oauthServer(t, &mcptest.OAuthServerOptions{TokenLifetime: 2 * time.Second, Network: n})
		dir := t.TempDir()
		a, _ := oauthManager(t, Config{URL: s.URL}, dir, nil) // cannot sign in
		onNetwork(a, n)
		_, err := a.ListTools(ctxT(t), "srv")
		var lre *LoginRequiredError
		if !errors.As(err, &lre) {
			t.Fatalf("before any sign-in: %v", err)
		}
		// "ipybox auth login srv" in a terminal.
		b, _ := oauthManager(t, Config{URL: s.URL}, dir, &Options{OAuthURL: newBrowser().on(n).open})
		onNetwork(b, n)
		if err := b.Login(ctxT(t), "srv"); err != nil {
			t.Fatal(err)
		}
		// Trying again works, without restarting a.
		callText(t, a, "srv", "tool-1", map[string]any{"s": "a"})
		// b refreshes (and the refresh token rotates); a takes b's token from
		// the file instead of refreshing with its stale refresh token.
		time.Sleep(1200 * time.Millisecond)
		callText(t, b, "srv", "tool-1", map[string]any{"s": "b"})
		callText(t, a, "srv", "tool-1", map[string]any{"s": "a2"})
		if c := s.Counts(); c.Authorizations != 1 || c.Refreshes != 1 {
			t.Errorf("counts: %+v, want 1 sign-in and 1 refresh", c)
		}
	})
}

// TestOAuthLoginRequiredIsFast: with no token and no OAuthURL, the error
// says how to sign in, at once.
func TestOAuthLoginRequiredIsFast(t *testing.T) {
	testenv.CheckGoroutines(t)
	s := oauthServer(t, nil)
	m, _ := oauthManager(t, Config{URL: s.URL}, t.TempDir(), nil)
	t0 := time.Now()
	_, err := m.ListTools(ctxT(t), "srv")
	var lre *LoginRequiredError
	if !errors.As(err, &lre) || lre.Server != "srv" {
		t.Fatalf("ListTools: %v, want a *LoginRequiredError", err)
	}
	for _, want := range []string{`MCP server "srv" needs an OAuth sign-in`, "`ipybox auth login srv`"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestOAuthRefresh: a token is refreshed before it expires, and once when
// the server refuses it (revoked); a refresh that fails is a clear error
// that says to sign in again; nothing hangs.
func TestOAuthRefresh(t *testing.T) {
	testenv.CheckGoroutines(t)
	bubble(t, func(t *testing.T, n *testenv.Network) {
		s := oauthServer(t, &mcptest.OAuthServerOptions{TokenLifetime: 2 * time.Second, Network: n})
		dir := t.TempDir()
		b := newBrowser().on(n)
		m, logs := oauthManager(t, Config{URL: s.URL}, dir, &Options{OAuthURL: b.open})
		onNetwork(m, n)
		callText(t, m, "srv", "tool-1", map[string]any{"s": "1"})
		before, _ := os.ReadFile(filepath.Join(dir, "tokens.json"))

		// Before expiry: 2s tokens are refreshed in their second half.
		time.Sleep(1200 * time.Millisecond)
		callText(t, m, "srv", "tool-1", map[string]any{"s": "2"})
		if c := s.Counts(); c.Refreshes != 1 || c.Authorizations != 1 || c.Unauthorized != 0 {
			t.Errorf("after the refresh before expiry: %+v (want 1 refresh, 1 authorization, no token refused)", c)
		}
		after, _ := os.ReadFile(filepath.Join(dir, "tokens.json"))
		if string(before) == string(after) {
			t.Error("the refreshed token was not saved")
		}

		// Revoked access token: refreshed on the 401, the call goes through.
		s.RevokeAccess()
		callText(t, m, "srv", "tool-1", map[string]any{"s": "3"})
		if c := s.Counts(); c.Refreshes != 2 || c.Authorizations != 1 {
			t.Errorf("after the revoked access token: %+v (want 2 refreshes, 1 authorization)", c)
		}

		// Everything revoked, and no way to sign in (a later process): the
		// refresh fails and the error says to sign in again.
		s.RevokeAll()
		m2, logs2 := oauthManager(t, Config{URL: s.URL}, dir, nil)
		onNetwork(m2, n)
		t0 := time.Now()
		_, err := m2.CallTool(ctxT(t), "srv", "tool-1", map[string]any{"s": "4"})
		var lre *LoginRequiredError
		if !errors.As(err, &lre) || !strings.Contains(err.Error(), "ipybox auth login srv") {
			t.Fatalf("with revoked tokens: %v, want a *LoginRequiredError naming `ipybox auth login srv`", err)
		}
		if d := time.Since(t0); d > 5*time.Second {
			t.Errorf("the failed refresh took %v", d)
		}
		// The stale sign-in is forgotten.
		if l, _ := ListTokens(filepath.Join(dir, "tokens.json")); len(l) != 0 {
			t.Errorf("the refused sign-in is still stored: %+v", l)
		}
		// Where a sign-in is possible, it simply happens again.
		callText(t, m, "srv", "tool-1", map[string]any{"s": "5"})
		if c := s.Counts(); c.Authorizations != 2 {
			t.Errorf("after revocation with a browser: %+v (want a second authorization)", c)
		}
		noTokens(t, s, "the logs", logs.String()+logs2.String())
		noTokens(t, s, "the error", err.Error())
	})
}

// TestOAuthExpiredWithoutRefresh: an expired token whose refresh token was
// revoked, in a process that cannot sign in, gives the clear error.
func TestOAuthExpiredWithoutRefresh(t *testing.T) {
	testenv.CheckGoroutines(t)
	bubble(t, func(t *testing.T, n *testenv.Network) {
		s := oauthServer(t, &mcptest.OAuthServerOptions{TokenLifetime: time.Second, Network: n})
		dir := t.TempDir()
		m, _ := oauthManager(t, Config{URL: s.URL}, dir, &Options{OAuthURL: newBrowser().on(n).open})
		onNetwork(m, n)
		callText(t, m, "srv", "tool-1", map[string]any{"s": "1"})
		s.RevokeAll()
		time.Sleep(1100 * time.Millisecond)
		m2, _ := oauthManager(t, Config{URL: s.URL}, dir, nil)
		onNetwork(m2, n)
		_, err := m2.CallTool(ctxT(t), "srv", "tool-1", map[string]any{"s": "2"})
		var lre *LoginRequiredError
		if !errors.As(err, &lre) || !strings.Contains(err.Error(), "refreshing it failed") || !strings.Contains(err.Error(), "invalid_grant") {
			t.Fatalf("%v, want a *LoginRequiredError saying the refresh failed", err)
		}
	})
}

// TestOAuthExpiredNoRefreshToken: a server that gives no refresh token is
// signed in to again when its token expires (where a sign-in is possible),
// and otherwise the error says to.
func TestOAuthExpiredNoRefreshToken(t *testing.T) {
	testenv.CheckGoroutines(t)
	bubble(t, func(t *testing.T, n *testenv.Network) {
		s := oauthServer(t, &mcptest.OAuthServerOptions{TokenLifetime: time.Second, NoRefresh: true, Network: n})
		dir := t.TempDir()
		m, _ := oauthManager(t, Config{URL: s.URL}, dir, &Options{OAuthURL: newBrowser().on(n).open})
		onNetwork(m, n)
		callText(t, m, "srv", "tool-1", map[string]any{"s": "1"})
		time.Sleep(1100 * time.Millisecond)
		callText(t, m, "srv", "tool-1", map[string]any{"s": "2"})
		if c := s.Counts(); c.Authorizations != 2 || c.Refreshes != 0 {
			t.Errorf("counts: %+v, want a second sign-in", c)
		}
		time.Sleep(1100 * time.Millisecond)
		m2, _ := oauthManager(t, Config{URL: s.URL}, dir, nil)
		onNetwork(m2, n)
		_, err := m2.CallTool(ctxT(t), "srv", "tool-1", map[string]any{"s": "3"})
		var lre *LoginRequiredError
		if !errors.As(err, &lre) || !strings.Contains(err.Error(), "ipybox auth login srv") {
			t.Fatalf("%v, want a *LoginRequiredError", err)
		}
	})
}

// TestOAuthPreregisteredAndWrongSecret: a pre-registered client signs in
// with its ${VAR} secret; a wrong secret fails fast with a clear error that
// does not show the secret.
func TestOAuthPreregisteredAndWrongSecret(t *testing.T) {
	testenv.CheckGoroutines(t)
	const secret = "right-secret-0123456789"
	s := oauthServer(t, &mcptest.OAuthServerOptions{ClientID: "ipybox-test", ClientSecret: secret})
	port := freePort(t)
	for _, tc := range []struct {
		name   string
		grant  OAuthGrant
		secret string
		port   int
		ok     bool
	}{
		{"code", GrantAuthorizationCode, secret, port, true},
		{"code wrong secret", GrantAuthorizationCode, "wrong-secret-9876543210", 0, false},
		{"client credentials", GrantClientCredentials, secret, 0, true},
		{"client credentials wrong secret", GrantClientCredentials, "wrong-secret-9876543210", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{URL: s.URL, OAuth: &OAuthConfig{ClientID: "ipybox-test", ClientSecret: "${IPYBOX_TEST_SECRET}", Grant: tc.grant, RedirectPort: tc.port}}
			b := newBrowser()
			m, logs := oauthManager(t, cfg, t.TempDir(), &Options{
				OAuthURL:  b.open,
				LookupEnv: func(k string) (string, bool) { return tc.secret, k == "IPYBOX_TEST_SECRET" },
			})
			t0 := time.Now()
			_, err := m.CallTool(ctxT(t), "srv", "tool-1", map[string]any{"s": "x"})
			if d := time.Since(t0); d > 8*time.Second {
				t.Errorf("took %v", d)
			}
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				if tc.port != 0 {
					if u := <-b.urls; !strings.Contains(u, "127.0.0.1%3A"+strconv.Itoa(tc.port)) {
						t.Errorf("redirect is not on the configured port %d: %s", tc.port, u)
					}
				}
			} else {
				if err == nil {
					t.Fatal("a wrong client secret worked")
				}
				for _, want := range []string{`OAuth sign-in to MCP server "srv"`, "invalid_client"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q lacks %q", err, want)
					}
				}
			}
			for _, text := range []string{logs.String(), errString(err)} {
				if strings.Contains(text, tc.secret) {
					t.Errorf("the client secret leaked: %s", text)
				}
			}
			noTokens(t, s, "the logs", logs.String())
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestOAuthSignInTimeouts: the connect timeout stops while a person signs
// in; AuthorizeTimeout bounds that wait; a busy redirectPort is a clear
// error.
func TestOAuthSignInTimeouts(t *testing.T) {
	testenv.CheckGoroutines(t)
	bubble(t, func(t *testing.T, n *testenv.Network) {
		s := oauthServer(t, &mcptest.OAuthServerOptions{Network: n})
		slow := newBrowser().on(n)
		slow.delay = 1500 * time.Millisecond
		m, _ := oauthManager(t, Config{URL: s.URL}, t.TempDir(), &Options{OAuthURL: slow.open, ConnectTimeout: time.Second, AuthorizeTimeout: 10 * time.Second})
		onNetwork(m, n)
		callText(t, m, "srv", "tool-1", map[string]any{"s": "x"}) // a 1.5s sign-in inside a 1s connect timeout

		never := func(context.Context, string, string) error { return nil }
		m2, _ := oauthManager(t, Config{URL: s.URL}, t.TempDir(), &Options{OAuthURL: never, AuthorizeTimeout: 500 * time.Millisecond})
		onNetwork(m2, n)
		t0 := time.Now()
		_, err := m2.ListTools(ctxT(t), "srv")
		// On the bubble's clock the wait is AuthorizeTimeout exactly.
		if err == nil || !strings.Contains(err.Error(), "within 500ms (the sign-in timeout)") || time.Since(t0) != 500*time.Millisecond {
			t.Errorf("unanswered sign-in: %v after %v, want the AuthorizeTimeout error after 500ms", err, time.Since(t0))
		}
	})

	s := oauthServer(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().(*net.TCPAddr).Port
	m3, _ := oauthManager(t, Config{URL: s.URL, OAuth: &OAuthConfig{RedirectPort: busy}}, t.TempDir(), &Options{OAuthURL: newBrowser().open})
	_, err = m3.ListTools(ctxT(t), "srv")
	if err == nil || !strings.Contains(err.Error(), "oauth.redirectPort "+strconv.Itoa(busy)) {
		t.Errorf("busy redirect port: %v", err)
	}
}

// TestOAuthTokenFileMode: a token file others may read is refused with
// the fix.
func TestOAuthTokenFileMode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := filepath.Join(dir, "tokens.json")
	os.WriteFile(f, []byte(`{"version":1,"servers":{}}`), 0o644)
	os.Chmod(f, 0o644)
	_, err := ListTokens(f)
	if err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("ListTokens on a 0644 file: %v", err)
	}
	os.Remove(f)
	os.Symlink(filepath.Join(dir, "elsewhere"), f)
	if _, err := ListTokens(f); err == nil {
		t.Error("a symbolic link was followed")
	}
}

// TestOAuthWithHeaderIsNotImplicit: a config with its own Authorization
// header is not signed in implicitly: its 401 is reported as is.
func TestOAuthWithHeaderIsNotImplicit(t *testing.T) {
	testenv.CheckGoroutines(t)
	s := oauthServer(t, nil)
	b := newBrowser()
	m, _ := oauthManager(t, Config{URL: s.URL, Headers: map[string]string{"Authorization": "Bearer not-a-token"}}, t.TempDir(), &Options{OAuthURL: b.open})
	if _, err := m.ListTools(ctxT(t), "srv"); err == nil {
		t.Fatal("a wrong bearer header worked")
	}
	if b.opened.Load() != 0 {
		t.Error("a config with an Authorization header started a sign-in")
	}
}

// TestOAuthCloseDuringSignIn: Close does not wait for a person who never
// signs in.
func TestOAuthCloseDuringSignIn(t *testing.T) {
	testenv.CheckGoroutines(t)
	s := oauthServer(t, nil)
	handed := make(chan struct{}, 1)
	never := func(context.Context, string, string) error { handed <- struct{}{}; return nil }
	reg := NewRegistry()
	reg.Add("srv", Config{URL: s.URL})
	m, err := New(reg, &Options{OAuthURL: never, AuthorizeTimeout: time.Minute, TokenFile: filepath.Join(t.TempDir(), "t.json")})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := m.ListTools(context.Background(), "srv"); errc <- err }()
	select {
	case <-handed:
	case <-time.After(10 * time.Second):
		t.Fatal("the authorization URL was not handed over")
	}
	t0 := time.Now()
	if err := m.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) && !strings.Contains(errString(err), "closed") {
			t.Errorf("ListTools after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ListTools still waits for the sign-in after Close")
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("Close took %v", d)
	}
}

// TestOAuthDeclinedSignInNotRepeated: after a declined sign-in, the next
// calls fail at once with why, instead of asking the user at every call
// of a cell that loops.
func TestOAuthDeclinedSignInNotRepeated(t *testing.T) {
	t.Parallel()
	s := oauthServer(t, nil)
	var asked atomic.Int32
	declined := func(context.Context, string, string) error {
		asked.Add(1)
		return errors.New("the user declined the sign-in")
	}
	m, _ := oauthManager(t, Config{URL: s.URL}, t.TempDir(), &Options{OAuthURL: declined})
	for i := range 3 {
		t0 := time.Now()
		_, err := m.ListTools(ctxT(t), "srv")
		if err == nil || !strings.Contains(err.Error(), "declined") {
			t.Fatalf("call %d: %v", i, err)
		}
		var lre *LoginRequiredError
		if i > 0 && (!errors.As(err, &lre) || !strings.Contains(err.Error(), "asks again") || time.Since(t0) > 5*time.Second) {
			t.Errorf("call %d after a declined sign-in: %v after %v", i, err, time.Since(t0))
		}
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("the user was asked %d times, want 1", n)
	}
}

// TestOAuthSignInBoundToName: a stored sign-in is used only by a
// registration of the name it was made for. The same URL under another
// name gets no stored token (without a way to sign in, it is told to sign
// in), so a rule on the first name cannot be side-stepped with its
// credentials (acc3, attack 16). A sign-in of an older ipybox, stored by
// URL alone, is listed and never used.
func TestOAuthSignInBoundToName(t *testing.T) {
	s := oauthServer(t, nil)
	dir := t.TempDir()
	b := newBrowser()
	m, _ := oauthManager(t, Config{URL: s.URL}, dir, &Options{OAuthURL: b.open})
	if got := callText(t, m, "srv", "tool-1", map[string]any{"s": "x"}); got != "tool-1: x" {
		t.Fatalf("call: %q", got)
	}
	other := newManager(t, map[string]Config{"srv2": {URL: s.URL}}, &Options{TokenFile: filepath.Join(dir, "tokens.json"), ConnectTimeout: 10 * time.Second})
	_, err := other.CallTool(ctxT(t), "srv2", "tool-1", map[string]any{"s": "y"})
	var lre *LoginRequiredError
	if !errors.As(err, &lre) || !strings.Contains(err.Error(), "ipybox auth login srv2") {
		t.Fatalf("srv2 at srv's URL: %v, want a *LoginRequiredError naming `ipybox auth login srv2`", err)
	}
	if c := s.Counts(); c.Authorizations != 1 {
		t.Errorf("counts: %+v", c)
	}
	// An older file: the sign-in by URL alone is not used by any name.
	file := filepath.Join(t.TempDir(), "tokens.json")
	os.WriteFile(file, []byte(`{"version":1,"servers":{"`+s.URL+`":{"clientId":"c","accessToken":"old","tokenUrl":"https://e.example/t"}}}`), 0o600)
	if e, err := (tokenStore{path: file}).load("srv", s.URL); e != nil || err != nil {
		t.Errorf("a sign-in stored by URL alone was used for srv: %v %v", e, err)
	}
	list, err := ListTokens(file)
	if err != nil || len(list) != 1 || list[0].Server != "" || list[0].URL != s.URL {
		t.Errorf("ListTokens of an older file = %+v, %v", list, err)
	}
	if had, err := DeleteToken(file, "", "", s.URL); !had || err != nil {
		t.Errorf("DeleteToken of the older sign-in = %v, %v", had, err)
	}
}

// TestOAuthSignInBoundToWorkspace: a sign-in is bound to the workspace
// whose registration it was made for, as well as to the name and URL. The
// token file is the user's, shared by every ipybox the user runs: a
// Manager of another workspace (another ipybox mcp, whose operator
// configured no such server) with a registration of the same name and
// URL must sign in anew (acc4, attack 5). A sign-in of token file version
// 2 (name and URL, no workspace) is listed as old and never used.
func TestOAuthSignInBoundToWorkspace(t *testing.T) {
	s := oauthServer(t, nil)
	dir := t.TempDir()
	wsA, wsB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	b := newBrowser()
	m, _ := oauthManager(t, Config{URL: s.URL}, dir, &Options{OAuthURL: b.open, Workspace: wsA})
	if got := callText(t, m, "srv", "tool-1", map[string]any{"s": "x"}); got != "tool-1: x" {
		t.Fatalf("call: %q", got)
	}
	// The same workspace, another process: the stored sign-in works.
	again, _ := oauthManager(t, Config{URL: s.URL}, dir, &Options{Workspace: wsA + "/."})
	if got := callText(t, again, "srv", "tool-1", map[string]any{"s": "y"}); got != "tool-1: y" {
		t.Fatalf("the same workspace: %q", got)
	}
	// Another workspace, and a Manager without one: same name, same URL.
	for _, ws := range []string{wsB, ""} {
		other, _ := oauthManager(t, Config{URL: s.URL}, dir, &Options{Workspace: ws})
		_, err := other.CallTool(ctxT(t), "srv", "tool-1", map[string]any{"s": "z"})
		var lre *LoginRequiredError
		if !errors.As(err, &lre) {
			t.Errorf("workspace %q used the sign-in of %s: %v, want a *LoginRequiredError", ws, wsA, err)
		}
	}
	if c := s.Counts(); c.Authorizations != 1 {
		t.Errorf("counts: %+v", c)
	}
	list, err := ListTokens(filepath.Join(dir, "tokens.json"))
	if err != nil || len(list) != 1 || list[0].Workspace != wsA || list[0].Server != "srv" || list[0].Old {
		t.Errorf("ListTokens = %+v, %v", list, err)
	}
	if had, err := DeleteToken(filepath.Join(dir, "tokens.json"), wsB, "srv", s.URL); had || err != nil {
		t.Errorf("DeleteToken of another workspace removed %s's sign-in: %v %v", wsA, had, err)
	}

	// A version-2 file: bound to the name, not to a workspace.
	file := filepath.Join(t.TempDir(), "tokens.json")
	os.WriteFile(file, []byte(`{"version":2,"signIns":{"srv":{"`+s.URL+`":{"clientId":"c","accessToken":"old","tokenUrl":"https://e.example/t"}}}}`), 0o600)
	for _, ws := range []string{"", wsA} {
		if e, err := (tokenStore{path: file, workspace: ws}).load("srv", s.URL); e != nil || err != nil {
			t.Errorf("a version-2 sign-in was used in workspace %q: %v %v", ws, e, err)
		}
	}
	list, err = ListTokens(file)
	if err != nil || len(list) != 1 || !list[0].Old || list[0].Server != "srv" || list[0].Workspace != "" {
		t.Errorf("ListTokens of a version-2 file = %+v, %v", list, err)
	}
	// Saving keeps it (listed, unused); logout of the name removes it.
	if err := (tokenStore{path: file, workspace: wsA}).save("srv", s.URL, &storedSignIn{ClientID: "c", AccessToken: "new", TokenURL: "https://e.example/t"}); err != nil {
		t.Fatal(err)
	}
	if list, _ = ListTokens(file); len(list) != 2 || !list[0].Old || list[1].Old || list[1].Workspace != wsA {
		t.Errorf("after a save: %+v", list)
	}
	if had, err := DeleteToken(file, wsA, "srv", s.URL); !had || err != nil {
		t.Errorf("DeleteToken = %v, %v", had, err)
	}
	if list, _ = ListTokens(file); len(list) != 0 {
		t.Errorf("after logout: %+v", list)
	}
}
