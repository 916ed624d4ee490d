package mcpserver

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// CheckHTTPAddr checks an address to serve streamable HTTP on. It must
// name its host: ":8080" would implicitly bind all interfaces. noAuth
// (serving without a bearer token) is allowed on a loopback address only:
// whoever reaches the server runs code on this machine.
func CheckHTTPAddr(addr string, noAuth bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %v; want HOST:PORT, such as 127.0.0.1:8080", addr, err)
	}
	if port == "" {
		return fmt.Errorf("address %q has no port; want HOST:PORT, such as 127.0.0.1:8080", addr)
	}
	if host == "" {
		return fmt.Errorf("address %q has no host, which implicitly binds all interfaces; write 127.0.0.1%s to stay on this machine", addr, addr)
	}
	if noAuth && !isLoopback(host) {
		return fmt.Errorf("address %q is not a loopback address: serving other machines without a bearer token is refused, because whoever reaches the server runs code on this machine; drop --no-auth", addr)
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// Handler returns an http.Handler that serves the server over streamable
// HTTP (at every path; clients usually use /mcp), in both revisions of the
// protocol:
//   - 2026-07-28 (a request whose MCP-Protocol-Version header says so, and
//     server/discover): stateless; each request stands alone, and state
//     lives in the sessions that create_session makes, whose handles the
//     tool calls pass.
//   - 2025-11-25 and older (initialize, then Mcp-Session-Id): each
//     transport session has an implicit session, with its own kernel from
//     its first cell, that ends with it: after Options.HTTP.SessionIdleTimeout
//     without a request, or at its DELETE. Its calls may name the
//     handles of create_session too.
//
// Each Handler keeps its own table of transport sessions: mount one Handler
// on every path that should reach the same ones. Handles work through any
// Handler of the server, and over stdio.
//
// Every request must carry "Authorization: Bearer <token>" (the scheme in
// any case), loopback included: a loopback port is open to every local
// user and to unsandboxed kernel code, which could otherwise open a
// session of its own and approve its own tool calls. The token names the
// principal (Options.HTTP.Principals, Options.HTTP.AuthToken), which owns the
// sessions it makes. Without a token, every request is refused, unless
// Options.HTTP.NoAuth says so explicitly. A request from a browser page of
// another site (a cross-site Origin or Sec-Fetch-Site) is refused with
// 403, and requests whose Host header is not a loopback name are refused
// on a loopback listener (DNS-rebinding protection).
func (s *Server) Handler() http.Handler {
	getServer := func(*http.Request) *mcp.Server { return s.mcp }
	sessions := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		SessionTimeout:      s.opts.HTTP.SessionIdleTimeout,
		Logger:              s.log,
		MaxRequestBodyBytes: maxRequest,
	})
	stateless := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Stateless:           true,
		Logger:              s.log,
		MaxRequestBodyBytes: maxRequest,
		// A client that goes away ends its call, and the cell with it,
		// as a 2025-11-25 client's cancellation does.
		PropagateRequestCancellation: true,
	})
	origin := http.NewCrossOriginProtection()
	serve := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkOrigin(origin, r); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		if r.ContentLength > maxRequest {
			http.Error(w, fmt.Sprintf("request body of %d bytes: ipybox mcp reads requests of at most %d MiB", r.ContentLength, maxRequest>>20), http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxRequest)
		if newProtocol(r) {
			stateless.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" {
			if why := s.sessions.connsFullFor(principalOfHTTP(r)); why != "" {
				s.refuseSession(w, r, why)
				return
			}
		}
		// Closing a transport session waits for its running calls: stop
		// its kernel first, so that a running cell ends now rather than
		// at its timeout.
		if r.Method == http.MethodDelete {
			if id := r.Header.Get("Mcp-Session-Id"); id != "" {
				s.endConnID(id, principalOfHTTP(r))
			}
		}
		sessions.ServeHTTP(w, r)
	})
	if s.opts.HTTP.NoAuth {
		return serve
	}
	ui := http.NotFoundHandler()
	if s.opts.HTTP.UI {
		// The page signs in with a cookie, not the bearer header.
		ui = s.uiHandler()
	}
	// RequireBearerToken puts the principal where the go-sdk passes it to
	// every request (RequestExtra.TokenInfo), and where its transport
	// sessions check that each request of one comes from the same
	// principal. The header was checked here first, strictly.
	withPrincipal := auth.RequireBearerToken(func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		p, ok := s.principalFor(token)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: p}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(serve)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.opts.HTTP.UI && (r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/")) {
			ui.ServeHTTP(w, r)
			return
		}
		if _, ok := s.bearerPrincipal(r.Header.Values("Authorization")); !ok {
			unauthorized(w, len(r.Header.Values("Authorization")) > 0)
			return
		}
		withPrincipal.ServeHTTP(w, r)
	})
}

// The answers to a request without the right bearer token. The
// descriptions name the fix: ipybox has no OAuth, so there is nothing to
// sign in to. (RFC 6750's error_description allows no '"' and no '\\'.)
const (
	noTokenDescription = "no bearer token: ipybox mcp needs Authorization: Bearer <token> on every request, " +
		"the token of its --auth-token-file (or $IPYBOX_MCP_AUTH_TOKEN, or the file it printed at start); it offers no OAuth"
	wrongTokenDescription = "the bearer token is wrong: send Authorization: Bearer <token> with the token of " +
		"ipybox mcp's --auth-token-file (or $IPYBOX_MCP_AUTH_TOKEN, or the file it printed at start); it offers no OAuth"
)

// NoOAuth is the body of ipybox mcp's answer to the OAuth endpoints
// clients probe after a 401 (/.well-known/oauth-protected-resource,
// /.well-known/oauth-authorization-server, /register…): there are none. A
// client that starts an OAuth flow on any 401 (the MCP TypeScript SDK's
// does, whatever WWW-Authenticate says) shows this text from its failed
// client registration, instead of a bare "404 page not found".
const NoOAuth = "ipybox mcp offers no OAuth (no authorization server, no client registration): " +
	"an MCP client sends Authorization: Bearer <token>, the token of ipybox mcp's --auth-token-file, " +
	"for example claude mcp add --transport http ipybox URL --header \"Authorization: Bearer $(cat TOKEN_FILE)\"\n"

// unauthorized answers a request without the right bearer token: 401,
// with a WWW-Authenticate challenge that says why (RFC 6750: error
// invalid_request when no token was sent, invalid_token when it was
// wrong) and names the fix, and no resource_metadata: there is no OAuth
// to advertise. sent says whether an Authorization header came.
func unauthorized(w http.ResponseWriter, sent bool) {
	code, desc := "invalid_request", noTokenDescription
	if sent {
		code, desc = "invalid_token", wrongTokenDescription
	}
	w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="ipybox", error="%s", error_description="%s"`, code, desc))
	http.Error(w, "ipybox mcp: "+desc, http.StatusUnauthorized)
}

// newProtocol reports whether r speaks MCP 2026-07-28 or later, which has
// no transport sessions: its MCP-Protocol-Version header says so. (A
// 2025-11-25 client sends its own version there after initialize, and
// none with it.)
func newProtocol(r *http.Request) bool {
	v := r.Header.Get("Mcp-Protocol-Version")
	return v >= "2026-07-28" && len(v) == len("2026-07-28")
}

// principalOfHTTP returns the principal that the handler found for r.
func principalOfHTTP(r *http.Request) string {
	if ti := auth.TokenInfoFromContext(r.Context()); ti != nil && ti.UserID != "" {
		return ti.UserID
	}
	return localPrincipal
}

// connsFull reports whether one more 2025-11-25 connection would pass
// maxConnections.
func (s *Server) connsFull() bool {
	return s.sessions.connsFull()
}

// refuseSession answers a new connection's initialize, past
// maxConnections or its principal's share (why), with a JSON-RPC error (in
// a 200 response, so that clients show its message).
func (s *Server) refuseSession(w http.ResponseWriter, r *http.Request, why string) {
	var req struct {
		ID json.RawMessage `json:"id"`
	}
	json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req)
	if len(req.ID) == 0 {
		req.ID = json.RawMessage("null")
	}
	s.log.Warn("refused a new connection: too many", "max", maxConnections, "principal", principalOfHTTP(r), "why", why)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32000,"message":%q}}`, req.ID,
		why+"; close one (a DELETE of its Mcp-Session-Id), or wait for idle ones to time out (--session-idle-timeout)")
}

// bearerPrincipal checks the Authorization headers against the tokens:
// exactly one, scheme "Bearer" in any case (RFC 7235). SHA-256 digests are
// compared in constant time with every token, so that neither a token's
// bytes, its length, nor which one matched leak through timing. It
// returns the principal of the token.
func (s *Server) bearerPrincipal(headers []string) (string, bool) {
	if len(headers) != 1 {
		return "", false
	}
	scheme, cred, ok := strings.Cut(headers[0], " ")
	cred = strings.TrimSpace(cred)
	if !ok || !strings.EqualFold(scheme, "Bearer") || cred == "" {
		return "", false
	}
	return s.principalFor(cred)
}

// principalFor returns the principal whose token is cred.
func (s *Server) principalFor(cred string) (string, bool) {
	got := sha256.Sum256([]byte(cred))
	name, found := "", 0
	for _, t := range s.tokens {
		if subtle.ConstantTimeCompare(got[:], t.digest[:]) == 1 {
			name, found = t.name, 1
		}
	}
	return name, found == 1
}

// checkOrigin refuses a request from a browser page of another site, for
// every method: CrossOriginProtection exempts GET, but in MCP a GET opens
// the event stream that carries elicitations.
func checkOrigin(c *http.CrossOriginProtection, r *http.Request) error {
	if r.Method != http.MethodPost {
		r = r.WithContext(r.Context()) // a copy: the caller's method stays
		r.Method = http.MethodPost
	}
	if err := c.Check(r); err != nil {
		return fmt.Errorf("cross-origin request refused (Origin %q): %w", r.Header.Get("Origin"), err)
	}
	return nil
}

// endConnID ends the implicit session of the 2025-11-25 connection with
// the given ID, if it is principal p's (the go-sdk then refuses another
// principal's DELETE).
func (s *Server) endConnID(id, p string) {
	if found := s.sessions.connByID(id, p); found != nil {
		s.endConn(found)
	}
}
