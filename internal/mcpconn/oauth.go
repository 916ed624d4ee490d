package mcpconn

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ipybox/ipybox/internal/defaults"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/auth/extauth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"
)

// OAuth support is glue around the MCP Go SDK's client side: auth's
// AuthorizationCodeHandler (discovery, dynamic client registration, PKCE,
// the code exchange, step-up scopes) and extauth's
// ClientCredentialsHandler. What is ipybox's own: the loopback redirect
// listener, handing the authorization URL to the application, the token
// file (tokenstore.go), refreshing before expiry and once on a 401, and
// keeping every token out of errors and logs.

// OAuthGrant is the OAuth grant a server's config asks for.
type OAuthGrant string

// The grants of OAuthConfig.Grant.
const (
	// GrantAuthorizationCode signs a user in through a browser, with PKCE.
	GrantAuthorizationCode OAuthGrant = "authorization_code"
	// GrantClientCredentials authenticates ipybox itself, with a
	// pre-registered client ID and secret and no user.
	GrantClientCredentials OAuthGrant = "client_credentials"
)

// OAuthConfig is the "oauth" block of a streamable HTTP server's config.
type OAuthConfig struct {
	// ClientID is a pre-registered OAuth client. Empty means dynamic
	// client registration with the server's authorization server. It may
	// be a ${VAR} placeholder.
	ClientID string `json:"clientId,omitempty"`
	// ClientSecret is the pre-registered client's secret. It must be a
	// ${VAR} placeholder (the config is saved in servers.json, which never
	// holds secrets). Empty means a public client.
	ClientSecret string `json:"clientSecret,omitempty"`
	// Scopes are the scopes to ask for. Empty means those the server
	// names in its 401 challenge or its resource metadata.
	Scopes []string `json:"scopes,omitempty"`
	// RedirectPort is the port of the loopback redirect listener
	// (http://127.0.0.1:PORT/callback), for a pre-registered client whose
	// redirect URI is fixed. Zero means a free port.
	RedirectPort int `json:"redirectPort,omitempty"`
	// Grant is GrantAuthorizationCode or GrantClientCredentials. Empty
	// means GrantAuthorizationCode.
	Grant OAuthGrant `json:"grant,omitempty"`
	// ClientMetadataURL is the https URL of a client ID metadata document
	// (the MCP specification's preferred registration) that describes
	// ipybox with a loopback redirect URI. It is used when the
	// authorization server supports such documents; otherwise ClientID or
	// dynamic registration is. Empty means none.
	ClientMetadataURL string `json:"clientMetadataUrl,omitempty"`
}

// validate checks o. stored says o is the config as saved (with its
// placeholders), not the expanded copy used to connect.
func (o *OAuthConfig) validate(stored bool) error {
	switch o.Grant {
	case "", GrantAuthorizationCode, GrantClientCredentials:
	default:
		return fmt.Errorf("unknown grant %q; use %q (the default) or %q", o.Grant, GrantAuthorizationCode, GrantClientCredentials)
	}
	if stored && o.ClientSecret != "" && !strings.Contains(o.ClientSecret, "${") {
		return fmt.Errorf(`"clientSecret" must be a ${VAR} placeholder such as "${MY_CLIENT_SECRET}", not the secret itself: the config is saved in servers.json; set the variable in the environment or .env`)
	}
	if o.ClientSecret != "" && o.ClientID == "" {
		return fmt.Errorf(`"clientSecret" needs "clientId"`)
	}
	if o.Grant == GrantClientCredentials {
		if o.ClientID == "" || o.ClientSecret == "" {
			return fmt.Errorf(`grant %q needs "clientId" and "clientSecret"`, GrantClientCredentials)
		}
		if o.RedirectPort != 0 {
			return fmt.Errorf(`"redirectPort" applies only to grant %q; remove it`, GrantAuthorizationCode)
		}
	}
	if o.RedirectPort < 0 || o.RedirectPort > 65535 {
		return fmt.Errorf(`"redirectPort" %d is not a port; use 1-65535, or leave it out for a free port`, o.RedirectPort)
	}
	if o.ClientMetadataURL != "" && !strings.Contains(o.ClientMetadataURL, "${") {
		if u, err := url.Parse(o.ClientMetadataURL); err != nil || u.Scheme != "https" || u.Host == "" || u.Path == "" || u.Path == "/" {
			return fmt.Errorf(`"clientMetadataUrl" %q must be an https URL with a path`, o.ClientMetadataURL)
		}
	}
	for _, s := range o.Scopes {
		if s == "" || strings.ContainsAny(s, " \t\r\n\"\\") {
			return fmt.Errorf("scope %q is not a scope token (no spaces, quotes or backslashes)", s)
		}
	}
	return nil
}

// Defaults of the OAuth options.
const (
	// DefaultAuthorizeTimeout bounds the wait for the browser's redirect
	// after the authorization URL was handed to the application.
	DefaultAuthorizeTimeout = defaults.Authorize
)

// LoginRequiredError reports a server that needs an OAuth sign-in that
// cannot happen now: there is no Options.OAuthURL to hand the
// authorization URL to, or a stored token could not be refreshed.
type LoginRequiredError struct {
	// Server is the server's name.
	Server string
	// Reason says why a sign-in is needed.
	Reason string
	// Err is the underlying failure, such as the refresh's; may be nil.
	Err error
}

// Error names the server, the reason and the fix.
func (e *LoginRequiredError) Error() string {
	s := fmt.Sprintf("MCP server %q needs an OAuth sign-in: %s", e.Server, e.Reason)
	if e.Err != nil {
		s += " (" + e.Err.Error() + ")"
	}
	return s + fmt.Sprintf("; sign in with `ipybox auth login %s` and try again", e.Server)
}

// Unwrap returns Err.
func (e *LoginRequiredError) Unwrap() error { return e.Err }

// oauthHandler is one server's auth.OAuthHandler: it lives as long as the
// Manager's entry for the server and its config, across reconnects.
type oauthHandler struct {
	m        *Manager
	server   string
	url      string      // the expanded server URL; with server, the token store's key
	cfg      OAuthConfig // expanded; zero without an oauth block
	explicit bool        // the config has an oauth block
	client   *http.Client

	authMu sync.Mutex // serialises Authorize

	mu        sync.Mutex
	loaded    bool          // the store was read
	src       *signInSource // the authorization code sign-in in use
	cc        oauth2.TokenSource
	inner     auth.OAuthHandler // the SDK's handler; kept for step-up scopes
	innerURL  string            // the redirect URL inner was made for
	lastPort  int               // the redirect listener's last port, reused when free
	forcedFor string            // the access token a 401 already forced a refresh of
	current   *redirectListener // the listener of the sign-in in progress
	pending   *signInSource     // the source inner's last exchange made
	// failedAt and failErr are the last sign-in that failed (declined,
	// unanswered, refused): for defaults.SignInRetry the next one fails at
	// once instead of asking the user again (a cell that calls a tool in
	// a loop would ask at every call).
	failedAt time.Time
	failErr  error
}

var _ auth.OAuthHandler = (*oauthHandler)(nil)

// oauthFor returns the OAuth handler of a streamable HTTP session, or nil
// when the config authenticates otherwise (an Authorization header and no
// oauth block). The caller holds e.sem.
func (m *Manager) oauthFor(e *entry, name string, gen uint64, cfg Config) *oauthHandler {
	if cfg.OAuth == nil {
		for k := range cfg.Headers {
			if strings.EqualFold(k, "Authorization") {
				return nil
			}
		}
	}
	if e.oauth != nil && e.oauthGen == gen && e.oauth.url == cfg.URL {
		return e.oauth
	}
	h := &oauthHandler{m: m, server: name, url: cfg.URL, client: &http.Client{Transport: m.httpFor(cfg), Timeout: m.opts.ConnectTimeout}}
	if cfg.OAuth != nil {
		h.cfg, h.explicit = *cfg.OAuth, true
	}
	e.oauth, e.oauthGen = h, gen
	return h
}

func (h *oauthHandler) grant() OAuthGrant {
	if h.cfg.Grant == "" {
		return GrantAuthorizationCode
	}
	return h.cfg.Grant
}

// TokenSource returns the token source of the current sign-in, reading the
// token file the first time; nil before any sign-in.
func (h *oauthHandler) TokenSource(context.Context) (oauth2.TokenSource, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cc != nil {
		return h.cc, nil
	}
	if !h.loaded && h.grant() == GrantAuthorizationCode {
		h.loaded = true
		e, err := h.m.store.load(h.server, h.url)
		switch {
		case err != nil:
			return nil, fmt.Errorf("MCP server %q: %w", h.server, err)
		case e == nil:
		case h.cfg.ClientID != "" && e.ClientID != h.cfg.ClientID:
			h.m.log.Info("oauth: the stored sign-in was for another client ID; signing in again", "server", h.server)
		default:
			h.src = h.newSource(e.config(), e.token(), e.Obtained)
		}
	}
	if h.src == nil {
		return nil, nil
	}
	return h.src, nil
}

// Authorize answers a 401 (or 403) from the server: once per access token
// it refreshes the token, and otherwise it signs in afresh with the SDK's
// handler for the configured grant.
func (h *oauthHandler) Authorize(ctx context.Context, req *http.Request, resp *http.Response) error {
	h.authMu.Lock()
	defer h.authMu.Unlock()
	h.mu.Lock()
	src := h.src
	h.mu.Unlock()

	if resp.StatusCode == http.StatusUnauthorized && h.grant() == GrantAuthorizationCode {
		// Another Manager or process may have signed in or refreshed since
		// (ipybox auth login, a rotated refresh token): use its token.
		if src == nil {
			if e, err := h.m.store.load(h.server, h.url); err == nil && e != nil && (h.cfg.ClientID == "" || e.ClientID == h.cfg.ClientID) {
				h.mu.Lock()
				h.src = h.newSource(e.config(), e.token(), e.Obtained)
				h.mu.Unlock()
				h.m.log.Info("oauth: using a sign-in stored since", "server", h.server)
				discard(resp)
				return nil
			}
		} else if src.adoptStored() {
			h.m.log.Info("oauth: using a newer stored token", "server", h.server)
			discard(resp)
			return nil
		}
	}
	if resp.StatusCode == http.StatusUnauthorized && src != nil {
		if access, ok := src.refreshable(); ok && access != h.forcedFor && src.failure() == nil {
			// The server refused a token that looked valid (revoked, or
			// expired early): a refresh may be all it takes.
			h.forcedFor = access
			if err := src.refresh(); err == nil {
				// If the server refuses the new token too, sign in again.
				h.forcedFor, _ = src.refreshable()
				h.m.log.Info("oauth: the server refused the access token; refreshed it", "server", h.server)
				discard(resp)
				return nil
			} else {
				h.m.log.Info("oauth: refreshing the refused access token failed; signing in again", "server", h.server, "error", h.m.secrets.scrub(err.Error()))
			}
		}
	}
	if resp.StatusCode == http.StatusForbidden {
		if challengeError(resp) != "insufficient_scope" {
			// A plain refusal: the request is retried as is and its
			// answer reported, as the SDK's handlers do.
			discard(resp)
			return nil
		}
		// Step-up: sign in again for more scopes; the SDK's handler
		// keeps those granted so far.
	} else if !h.explicit && !hasBearerChallenge(resp) {
		discard(resp)
		return fmt.Errorf("the server answered %d without an OAuth challenge (WWW-Authenticate: Bearer); check its credentials, or add an \"oauth\" block to its config", resp.StatusCode)
	}
	if src != nil && resp.StatusCode == http.StatusUnauthorized {
		// The stored sign-in no longer works: the file forgets it. This
		// handler keeps it until a new sign-in replaces it, so that every
		// request it refuses says why.
		if _, err := h.m.store.remove(h.server, h.url); err != nil {
			h.m.log.Warn("oauth: removing a stale sign-in", "server", h.server, "error", err)
		}
	}
	if h.grant() == GrantClientCredentials {
		return h.wrap(h.clientCredentials(ctx, req, resp))
	}
	if h.m.opts.OAuthURL == nil {
		discard(resp)
		lre := &LoginRequiredError{Server: h.server, Reason: "it asks for one and no stored token works"}
		switch {
		case resp.StatusCode == http.StatusForbidden:
			lre.Reason = "it asks for more scopes (insufficient_scope)"
		case src != nil && src.failure() != nil:
			lre.Reason, lre.Err = "its token expired or was refused, and refreshing it failed", src.failure()
		case src != nil:
			lre.Reason = "its stored token was refused and could not be refreshed"
		}
		return lre
	}
	return h.wrap(h.authorizationCode(ctx, req, resp))
}

// wrap scrubs the error of a sign-in attempt and names the server.
func (h *oauthHandler) wrap(err error) error {
	if err == nil {
		return nil
	}
	var lre *LoginRequiredError
	if errors.As(err, &lre) {
		return err
	}
	return h.m.secrets.scrubErr(fmt.Errorf("OAuth sign-in to MCP server %q: %w", h.server, err))
}

func (h *oauthHandler) clientCredentials(ctx context.Context, req *http.Request, resp *http.Response) error {
	h.mu.Lock()
	inner := h.inner
	h.mu.Unlock()
	if inner == nil {
		cc, err := extauth.NewClientCredentialsHandler(&extauth.ClientCredentialsHandlerConfig{
			Credentials: &oauthex.ClientCredentials{
				ClientID:         h.cfg.ClientID,
				ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: h.cfg.ClientSecret},
			},
			HTTPClient: h.client,
		})
		if err != nil {
			discard(resp)
			return err
		}
		inner = cc
	}
	if err := inner.Authorize(ctx, req, resp); err != nil {
		return err
	}
	ts, err := inner.TokenSource(ctx)
	if err != nil || ts == nil {
		return fmt.Errorf("no token after the client credentials grant: %v", err)
	}
	h.mu.Lock()
	h.inner, h.cc = inner, recordingSource{ts: ts, h: h}
	h.mu.Unlock()
	h.m.log.Info("oauth: obtained a token (client credentials)", "server", h.server)
	return nil
}

func (h *oauthHandler) authorizationCode(ctx context.Context, req *http.Request, resp *http.Response) error {
	h.mu.Lock()
	at, ferr := h.failedAt, h.failErr
	h.mu.Unlock()
	if ago := time.Since(at); ferr != nil && ago < defaults.SignInRetry {
		discard(resp)
		return &LoginRequiredError{Server: h.server, Err: ferr,
			Reason: fmt.Sprintf("a sign-in failed %v ago, and ipybox asks again only %v after a failure", ago.Round(time.Second), defaults.SignInRetry)}
	}
	err := h.signIn(ctx, req, resp)
	h.mu.Lock()
	switch {
	case err == nil:
		h.failErr = nil
	case ctx.Err() == nil && !errors.Is(err, ErrClosed):
		// Not a caller that gave up: the sign-in itself failed.
		h.failedAt, h.failErr = time.Now(), h.wrap(err)
	}
	h.mu.Unlock()
	return err
}

// signIn runs the authorization code flow: the application gets the URL,
// and the browser comes back to a loopback listener.
func (h *oauthHandler) signIn(ctx context.Context, req *http.Request, resp *http.Response) error {
	port := h.cfg.RedirectPort
	if port == 0 {
		port = h.lastPort
	}
	rl, err := listenRedirect(h.m.listen, h.server, port)
	if err != nil && h.cfg.RedirectPort == 0 && port != 0 {
		rl, err = listenRedirect(h.m.listen, h.server, 0) // the last port is taken now
	}
	if err != nil {
		discard(resp)
		if h.cfg.RedirectPort != 0 {
			return fmt.Errorf("oauth.redirectPort %d: %w; free the port or choose another", h.cfg.RedirectPort, err)
		}
		return fmt.Errorf("the redirect listener: %w", err)
	}
	defer rl.close()
	h.lastPort = rl.port

	h.mu.Lock()
	h.pending = nil
	inner := h.inner
	if inner == nil || h.innerURL != rl.url {
		cfg := &auth.AuthorizationCodeHandlerConfig{
			RedirectURL:              rl.url,
			AuthorizationCodeFetcher: h.fetcher(),
			DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{
				Metadata: &oauthex.ClientRegistrationMetadata{
					RedirectURIs:  []string{rl.url},
					ClientName:    "ipybox",
					GrantTypes:    []string{"authorization_code", "refresh_token"},
					ResponseTypes: []string{"code"},
					// Some authorization servers (the TypeScript SDK's)
					// require the secret in the body; the SDK follows what
					// the registration response says.
					TokenEndpointAuthMethod: "client_secret_post",
					Scope:                   strings.Join(h.cfg.Scopes, " "),
				},
			},
			RequestRefreshToken: true,
			Client:              h.client,
			NewTokenSource: func(_ context.Context, c *oauth2.Config, t *oauth2.Token) (oauth2.TokenSource, error) {
				// inner outlives this call: the new source goes to h.
				src := h.newSource(c, t, time.Now())
				src.persist()
				h.mu.Lock()
				h.pending = src
				h.mu.Unlock()
				return src, nil
			},
		}
		if h.cfg.ClientMetadataURL != "" {
			cfg.ClientIDMetadataDocumentConfig = &auth.ClientIDMetadataDocumentConfig{URL: h.cfg.ClientMetadataURL}
		}
		if h.cfg.ClientID != "" {
			pre := &oauthex.ClientCredentials{ClientID: h.cfg.ClientID}
			if h.cfg.ClientSecret != "" {
				pre.ClientSecretAuth = &oauthex.ClientSecretAuth{ClientSecret: h.cfg.ClientSecret}
			}
			cfg.PreregisteredClient = pre
		}
		if len(h.cfg.Scopes) > 0 {
			scopes := h.cfg.Scopes
			cfg.ScopeFilter = func([]string) []string { return scopes }
		}
		inner, err = auth.NewAuthorizationCodeHandler(cfg)
		if err != nil {
			h.mu.Unlock()
			discard(resp)
			return err
		}
		h.inner, h.innerURL = inner, rl.url
	}
	h.current = rl
	h.mu.Unlock()
	if err := inner.Authorize(ctx, req, resp); err != nil {
		return err
	}
	h.mu.Lock()
	got := h.pending
	h.pending = nil
	if got != nil {
		h.src = got
	}
	h.mu.Unlock()
	if got == nil {
		// Authorize returned nil without a new token (a 403 the SDK
		// retries as is).
		return nil
	}
	h.m.log.Info("oauth: signed in", "server", h.server)
	return nil
}

// fetcher returns the SDK's AuthorizationCodeFetcher: it hands the URL to
// the application and waits for the browser's redirect to the listener of
// the sign-in in progress.
func (h *oauthHandler) fetcher() auth.AuthorizationCodeFetcher {
	return func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
		h.mu.Lock()
		rl := h.current
		h.mu.Unlock()
		u, err := url.Parse(args.URL)
		if err != nil {
			return nil, fmt.Errorf("the authorization URL: %w", err)
		}
		rl.expect(u.Query().Get("state"))
		// Signing in takes a person: the connect timeout stops meanwhile,
		// and AuthorizeTimeout bounds the wait instead.
		if c, ok := ctx.Value(clockKey{}).(*connectClock); ok {
			c.pause()
			defer c.resume()
		}
		h.m.log.Info("oauth: waiting for the user to sign in", "server", h.server, "redirect", rl.url)
		if err := h.m.opts.OAuthURL(ctx, h.server, args.URL); err != nil {
			return nil, err
		}
		timer := time.NewTimer(h.m.opts.AuthorizeTimeout)
		defer timer.Stop()
		select {
		case r := <-rl.results:
			if r.err != nil {
				return nil, r.err
			}
			return r.res, nil
		case <-timer.C:
			return nil, fmt.Errorf("no redirect to %s within %v (the sign-in timeout); was the sign-in completed in the browser?", rl.url, h.m.opts.AuthorizeTimeout)
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the sign-in: %w", ctx.Err())
		case <-h.m.ctx.Done():
			return nil, ErrClosed
		}
	}
}

// hasBearerChallenge reports whether resp asks for an OAuth bearer token.
func hasBearerChallenge(resp *http.Response) bool {
	cs, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	if err != nil {
		return false
	}
	for _, c := range cs {
		if c.Scheme == "bearer" {
			return true
		}
	}
	return false
}

// challengeError returns the error parameter of resp's bearer challenge.
func challengeError(resp *http.Response) string {
	cs, _ := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	for _, c := range cs {
		if c.Scheme == "bearer" {
			return c.Params["error"]
		}
	}
	return ""
}

// discard drains and closes a response the handler does not pass on.
func discard(resp *http.Response) {
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
}

// signInSource is the token source of an authorization code sign-in. It
// refreshes the token a little before it expires, saves every new token
// in the token file, and records every token as a secret to scrub.
type signInSource struct {
	h *oauthHandler

	mu       sync.Mutex
	conf     *oauth2.Config
	tok      *oauth2.Token
	obtained time.Time
	failed   error // the authorization server refused a refresh: sign in again
}

func (h *oauthHandler) newSource(c *oauth2.Config, t *oauth2.Token, obtained time.Time) *signInSource {
	h.m.secrets.add(t.AccessToken, t.RefreshToken, c.ClientSecret)
	return &signInSource{h: h, conf: c, tok: t, obtained: obtained}
}

// refreshMargin is how long before its expiry a token is refreshed: a
// minute, or half its lifetime when that is shorter.
func (s *signInSource) refreshMargin() time.Duration {
	m := time.Minute
	if life := s.tok.Expiry.Sub(s.obtained); life > 0 && life/2 < m {
		m = life / 2
	}
	return m
}

// Token returns the access token, refreshing it first when it expires
// within the margin. When there is no refresh token, or the authorization
// server refused the refresh, it returns the token it has: if the server
// refuses that one, its 401 brings Authorize, which signs in again (or says
// to).
func (s *signInSource) Token() (*oauth2.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed != nil || s.tok.RefreshToken == "" || s.tok.Expiry.IsZero() || time.Until(s.tok.Expiry) > s.refreshMargin() {
		return s.copyLocked(), nil
	}
	if s.adoptStoredLocked() && (s.tok.Expiry.IsZero() || time.Until(s.tok.Expiry) > s.refreshMargin()) {
		return s.copyLocked(), nil
	}
	if err := s.refreshLocked(); err != nil {
		if s.failed != nil {
			return s.copyLocked(), nil
		}
		return nil, err
	}
	return s.copyLocked(), nil
}

// adoptStored takes the stored token when another Manager or process
// obtained a newer one, and reports whether it did.
func (s *signInSource) adoptStored() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.adoptStoredLocked()
}

func (s *signInSource) adoptStoredLocked() bool {
	e, err := s.h.m.store.load(s.h.server, s.h.url)
	if err != nil || e == nil || e.AccessToken == s.tok.AccessToken || !e.Obtained.After(s.obtained) {
		return false
	}
	s.h.m.secrets.add(e.AccessToken, e.RefreshToken, e.ClientSecret)
	s.conf, s.tok, s.obtained, s.failed = e.config(), e.token(), e.Obtained, nil
	return true
}

// failure returns why the last refresh was refused, or nil.
func (s *signInSource) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// refreshable returns the access token and whether a refresh token exists.
func (s *signInSource) refreshable() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tok.AccessToken, s.tok.RefreshToken != ""
}

// refresh gets a new access token with the refresh token now.
func (s *signInSource) refresh() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refreshLocked()
}

func (s *signInSource) refreshLocked() error {
	h := s.h
	ctx, cancel := context.WithTimeout(context.WithValue(h.m.ctx, oauth2.HTTPClient, h.client), h.m.opts.ConnectTimeout)
	defer cancel()
	t, err := s.conf.TokenSource(ctx, &oauth2.Token{RefreshToken: s.tok.RefreshToken}).Token()
	if err != nil {
		err = h.m.secrets.scrubErr(err)
		var re *oauth2.RetrieveError
		if errors.As(err, &re) {
			// The authorization server answered no (invalid_grant: the
			// refresh token expired or was revoked; invalid_client): only
			// a new sign-in helps.
			s.failed = err
			h.m.log.Info("oauth: the authorization server refused the refresh", "server", h.server, "error", err)
		}
		return &LoginRequiredError{Server: h.server, Reason: "refreshing its access token failed", Err: err}
	}
	if t.RefreshToken == "" {
		t.RefreshToken = s.tok.RefreshToken // not rotated
	}
	h.m.secrets.add(t.AccessToken, t.RefreshToken)
	s.tok, s.obtained = t, time.Now()
	h.m.log.Info("oauth: refreshed the access token", "server", h.server, "expires", t.Expiry.Round(time.Second))
	s.persistLocked()
	return nil
}

func (s *signInSource) copyLocked() *oauth2.Token {
	t := *s.tok
	return &t
}

func (s *signInSource) persist() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.persistLocked()
}

func (s *signInSource) persistLocked() {
	if err := s.h.m.store.save(s.h.server, s.h.url, newStoredSignIn(s.conf, s.tok, s.obtained)); err != nil {
		// The token works for this process; only the next one signs in again.
		s.h.m.log.Warn("oauth: saving the token failed", "server", s.h.server, "error", err)
	}
}

// recordingSource records the tokens of a client credentials source as
// secrets to scrub.
type recordingSource struct {
	ts oauth2.TokenSource
	h  *oauthHandler
}

func (r recordingSource) Token() (*oauth2.Token, error) {
	t, err := r.ts.Token()
	if err != nil {
		return nil, r.h.m.secrets.scrubErr(fmt.Errorf("MCP server %q: client credentials token: %w", r.h.server, err))
	}
	r.h.m.secrets.add(t.AccessToken)
	return t, nil
}

// redirectListener is the loopback HTTP server the browser is redirected
// to with the authorization code.
type redirectListener struct {
	server  string
	ln      net.Listener
	srv     *http.Server
	port    int
	url     string
	results chan redirectResult

	mu    sync.Mutex
	state string
}

type redirectResult struct {
	res *auth.AuthorizationResult
	err error
}

// listenRedirect listens on 127.0.0.1:port (0: a free port).
func listenRedirect(listen func(network, address string) (net.Listener, error), server string, port int) (*redirectListener, error) {
	ln, err := listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return nil, err
	}
	p := ln.Addr().(*net.TCPAddr).Port
	rl := &redirectListener{server: server, ln: ln, port: p, url: fmt.Sprintf("http://127.0.0.1:%d/callback", p), results: make(chan redirectResult, 1)}
	rl.srv = &http.Server{Handler: rl, ReadHeaderTimeout: 10 * time.Second}
	go rl.srv.Serve(ln)
	return rl, nil
}

func (rl *redirectListener) expect(state string) {
	rl.mu.Lock()
	rl.state = state
	rl.mu.Unlock()
}

func (rl *redirectListener) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if rl.srv.Shutdown(ctx) != nil {
		rl.srv.Close()
	}
}

// ServeHTTP takes the redirect: the code (or the error) with the state of
// the sign-in in progress. Anything else is refused and the wait goes on.
func (rl *redirectListener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/callback" || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	rl.mu.Lock()
	want := rl.state
	rl.mu.Unlock()
	if want == "" || q.Get("state") != want {
		http.Error(w, "ipybox: this is not the sign-in in progress (state mismatch); start it again", http.StatusBadRequest)
		return
	}
	var res redirectResult
	page := "Signed in to " + html.EscapeString(rl.server) + ". You can close this window."
	if e := q.Get("error"); e != "" {
		res.err = fmt.Errorf("the authorization server refused the sign-in: %q %q", clip(e), clip(q.Get("error_description")))
		page = "Signing in to " + html.EscapeString(rl.server) + " failed: " + html.EscapeString(clip(e)) + "."
	} else {
		res.res = &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}
	}
	select {
	case rl.results <- res:
	default: // a second redirect: the first one counts
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, "<!doctype html><title>ipybox</title><p>ipybox: %s</p>\n", page)
}

// clip bounds a value the browser sent before it goes into an error.
func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// clockKey carries a dial's *connectClock in the connect context, so that
// a sign-in can stop the connect timeout while a person signs in.
type clockKey struct{}

// connectClock is the connect timeout of one dial.
type connectClock struct {
	t *time.Timer
	d time.Duration
}

func (c *connectClock) pause()  { c.t.Stop() }
func (c *connectClock) resume() { c.t.Reset(c.d) }

// Login signs in to the named server now, replacing its stored sign-in:
// the stored token is forgotten, the server's 401 starts a sign-in
// (Options.OAuthURL gets the authorization URL, or the client credentials
// grant runs), and listing the tools checks the new token. It fails when
// the server did not ask for a sign-in.
func (m *Manager) Login(ctx context.Context, server string) error {
	re, ok := m.reg.lookup(server)
	if !ok {
		_, err := m.ListTools(ctx, server) // the unknown-server error
		return err
	}
	exp, values, err := m.expand(re.cfg)
	m.secrets.add(values...)
	if err != nil {
		return fmt.Errorf("MCP server %q: %w", server, err)
	}
	if t, err := exp.Transport(); err != nil || t != StreamableHTTP {
		return fmt.Errorf("MCP server %q is not a streamable HTTP server (transport %s); only those can sign in with OAuth", server, t)
	}
	if _, err := m.store.remove(server, exp.URL); err != nil {
		return err
	}
	if err := m.Stop(ctx, server); err != nil {
		return err
	}
	if err := m.resetOAuth(ctx, server); err != nil {
		return err
	}
	if _, err := m.ListTools(ctx, server); err != nil {
		return err
	}
	m.mu.Lock()
	e := m.entries[server]
	m.mu.Unlock()
	var h *oauthHandler
	if e != nil {
		select {
		case e.sem <- struct{}{}:
			h = e.oauth
			<-e.sem // bound: sent just above
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if h != nil && h.grant() == GrantClientCredentials {
		if h.tokenSourceSet() {
			return nil
		}
	} else if s, err := m.store.load(server, exp.URL); err != nil {
		return err
	} else if s != nil {
		return nil
	}
	return fmt.Errorf("MCP server %q did not ask for an OAuth sign-in (it answered without a 401); there is nothing to sign in to", server)
}

// tokenSourceSet reports whether the handler holds a token source.
func (h *oauthHandler) tokenSourceSet() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cc != nil || h.src != nil
}

// resetOAuth drops the named server's OAuth handler, so that the next
// connect starts from the token file.
func (m *Manager) resetOAuth(ctx context.Context, name string) error {
	m.mu.Lock()
	e := m.entries[name]
	m.mu.Unlock()
	if e == nil {
		return nil
	}
	select {
	case e.sem <- struct{}{}:
		e.oauth = nil
		<-e.sem // bound: sent just above
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-m.ctx.Done():
		return ErrClosed
	}
}
