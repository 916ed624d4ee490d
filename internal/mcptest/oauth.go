package mcptest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/ipybox/ipybox/internal/testenv"
)

// OAuthServer is an MCP server (NewServer's tools, streamable HTTP at
// /mcp) protected by OAuth, with its own small authorization server on the
// same origin: metadata discovery, dynamic client registration, an
// authorization endpoint that approves at once (no login page), and a token
// endpoint for the authorization code (with PKCE), refresh token and client
// credentials grants. Tests control it: token lifetime, revocation, and
// counters of what clients did.
type OAuthServer struct {
	// URL is the MCP endpoint, <origin>/mcp.
	URL string
	// Issuer is the authorization server's issuer (the origin).
	Issuer string

	srv      *httptest.Server
	shutdown func()

	mu        sync.Mutex
	noRefresh bool
	lifetime  time.Duration
	clients   map[string]oauthClient
	codes     map[string]oauthCode
	access    map[string]time.Time // access token → expiry
	refresh   map[string]string    // refresh token → client ID
	counts    OAuthCounts
}

// OAuthCounts counts what clients did.
type OAuthCounts struct {
	Registrations, Authorizations, CodeExchanges, Refreshes, ClientCredentials, Unauthorized int
}

type oauthClient struct {
	secret   string
	redirect []string
}

type oauthCode struct {
	client, redirect, challenge string
}

// OAuthServerOptions configures NewOAuthServer.
type OAuthServerOptions struct {
	// TokenLifetime is the access tokens' lifetime. Zero means an hour.
	TokenLifetime time.Duration
	// ClientID and ClientSecret, when set, are a pre-registered client.
	ClientID, ClientSecret string
	// NoRefresh issues no refresh tokens.
	NoRefresh bool
	// Network, when set, is where the server listens (in memory, for a
	// test in a synctest bubble); nil means a real loopback port.
	Network *testenv.Network
}

// NewOAuthServer starts an OAuthServer; Close stops it.
func NewOAuthServer(opts *OAuthServerOptions) *OAuthServer {
	var o OAuthServerOptions
	if opts != nil {
		o = *opts
	}
	if o.TokenLifetime <= 0 {
		o.TokenLifetime = time.Hour
	}
	s := &OAuthServer{noRefresh: o.NoRefresh, lifetime: o.TokenLifetime, clients: map[string]oauthClient{}, codes: map[string]oauthCode{}, access: map[string]time.Time{}, refresh: map[string]string{}}
	if o.ClientID != "" {
		s.clients[o.ClientID] = oauthClient{secret: o.ClientSecret}
	}
	mcpHandler, shutdown := Handler("http", nil)
	s.shutdown = shutdown
	mux := http.NewServeMux()
	s.srv = httptest.NewUnstartedServer(mux)
	if o.Network != nil {
		s.srv.Listener.Close()
		s.srv.Listener = o.Network.Listen()
	}
	s.srv.Start()
	s.Issuer = s.srv.URL
	s.URL = s.srv.URL + "/mcp"
	prmURL := s.srv.URL + "/.well-known/oauth-protected-resource/mcp"
	prm := auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource: s.URL, AuthorizationServers: []string{s.Issuer}, ScopesSupported: []string{"tools"},
	})
	mux.Handle("/.well-known/oauth-protected-resource/mcp", prm)
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, &oauthex.AuthServerMeta{
			Issuer:                            s.Issuer,
			AuthorizationEndpoint:             s.Issuer + "/authorize",
			TokenEndpoint:                     s.Issuer + "/token",
			RegistrationEndpoint:              s.Issuer + "/register",
			ResponseTypesSupported:            []string{"code"},
			GrantTypesSupported:               []string{"authorization_code", "refresh_token", "client_credentials"},
			TokenEndpointAuthMethodsSupported: []string{"client_secret_post", "client_secret_basic"},
			CodeChallengeMethodsSupported:     []string{"S256"},
			ScopesSupported:                   []string{"tools", "offline_access"},
		})
	})
	mux.HandleFunc("/register", s.register)
	mux.HandleFunc("/authorize", s.authorize)
	mux.HandleFunc("/token", s.token)
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		exp, ok := s.access[token]
		if !ok || time.Now().After(exp) {
			s.counts.Unauthorized++
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{Scopes: []string{"tools"}, Expiration: exp}, nil
	}
	mux.Handle("/mcp", auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{ResourceMetadataURL: prmURL})(mcpHandler))
	return s
}

// Close stops the server and ends its MCP sessions.
func (s *OAuthServer) Close() {
	s.shutdown()
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// Counts returns what clients did so far.
func (s *OAuthServer) Counts() OAuthCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts
}

// RevokeAccess invalidates every access token (refresh tokens stay valid).
func (s *OAuthServer) RevokeAccess() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.access)
}

// RevokeAll invalidates every access and refresh token.
func (s *OAuthServer) RevokeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.access)
	clear(s.refresh)
}

// Tokens returns every access and refresh token issued and still known,
// for tests that look for them where they must not be.
func (s *OAuthServer) Tokens() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for t := range s.access {
		out = append(out, t)
	}
	for t := range s.refresh {
		out = append(out, t)
	}
	return out
}

func (s *OAuthServer) register(w http.ResponseWriter, r *http.Request) {
	var md oauthex.ClientRegistrationMetadata
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&md); err != nil || len(md.RedirectURIs) == 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_client_metadata"})
		return
	}
	id, secret := randomToken("client-"), randomToken("secret-")
	s.mu.Lock()
	s.clients[id] = oauthClient{secret: secret, redirect: md.RedirectURIs}
	s.counts.Registrations++
	s.mu.Unlock()
	if md.TokenEndpointAuthMethod == "" {
		md.TokenEndpointAuthMethod = "client_secret_basic"
	}
	writeJSON(w, http.StatusCreated, &oauthex.ClientRegistrationResponse{ClientRegistrationMetadata: md, ClientID: id, ClientSecret: secret})
}

func (s *OAuthServer) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s.mu.Lock()
	c, ok := s.clients[q.Get("client_id")]
	s.mu.Unlock()
	redirect := q.Get("redirect_uri")
	if !ok || (len(c.redirect) > 0 && !slices.Contains(c.redirect, redirect)) || q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" {
		http.Error(w, "bad authorization request", http.StatusBadRequest)
		return
	}
	code := randomToken("code-")
	s.mu.Lock()
	s.codes[code] = oauthCode{client: q.Get("client_id"), redirect: redirect, challenge: q.Get("code_challenge")}
	s.counts.Authorizations++
	s.mu.Unlock()
	u, err := url.Parse(redirect)
	if err != nil {
		http.Error(w, "bad redirect_uri", http.StatusBadRequest)
		return
	}
	v := u.Query()
	v.Set("code", code)
	v.Set("state", q.Get("state"))
	u.RawQuery = v.Encode()
	http.Redirect(w, r, u.String(), http.StatusFound)
}

func (s *OAuthServer) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_request"})
		return
	}
	id, secret, basic := r.BasicAuth()
	if !basic {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[id]
	if !ok || c.secret != secret {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client", "error_description": "client authentication failed"})
		return
	}
	switch r.PostForm.Get("grant_type") {
	case "authorization_code":
		code, ok := s.codes[r.PostForm.Get("code")]
		delete(s.codes, r.PostForm.Get("code"))
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		if !ok || code.client != id || code.redirect != r.PostForm.Get("redirect_uri") || base64.RawURLEncoding.EncodeToString(sum[:]) != code.challenge {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant"})
			return
		}
		s.counts.CodeExchanges++
		s.issue(w, id, true)
	case "refresh_token":
		rt := r.PostForm.Get("refresh_token")
		if s.refresh[rt] != id {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant", "error_description": "unknown or revoked refresh token"})
			return
		}
		delete(s.refresh, rt) // rotated
		s.counts.Refreshes++
		s.issue(w, id, true)
	case "client_credentials":
		s.counts.ClientCredentials++
		s.issue(w, id, false)
	default:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unsupported_grant_type"})
	}
}

// issue writes a token response. s.mu is held.
func (s *OAuthServer) issue(w http.ResponseWriter, client string, withRefresh bool) {
	at := randomToken("at-")
	s.access[at] = time.Now().Add(s.lifetime)
	resp := map[string]any{"access_token": at, "token_type": "Bearer", "expires_in": max(1, int(s.lifetime.Seconds())), "scope": "tools"}
	if withRefresh && !s.noRefresh {
		rt := randomToken("rt-")
		s.refresh[rt] = client
		resp["refresh_token"] = rt
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, resp)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func randomToken(prefix string) string {
	return prefix + strings.ToLower(rand.Text())
}
