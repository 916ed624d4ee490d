package mcpserver

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"

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
// HTTP (at every path; clients usually use /mcp). Each Handler keeps its
// own table of sessions: mount one Handler on every path that should
// reach the same sessions. Each MCP session gets its own kernel, in the
// shared workspace. Idle sessions end after Options.SessionIdleTimeout,
// and their kernels stop.
//
// Every request must carry "Authorization: Bearer <Options.AuthToken>"
// (the scheme in any case), loopback included: a loopback port is open to
// every local user and to unsandboxed kernel code, which could otherwise
// open a session of its own and approve its own tool calls. Without a
// token, every request is refused, unless Options.NoAuth says so
// explicitly. A request from a browser page of another site (a
// cross-site Origin or Sec-Fetch-Site) is refused with 403, and requests
// whose Host header is not a loopback name are refused on a loopback
// listener (DNS-rebinding protection).
func (s *Server) Handler() http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		SessionTimeout: s.opts.SessionIdleTimeout,
		Logger:         s.log,
	})
	origin := http.NewCrossOriginProtection()
	token := []byte(s.opts.AuthToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.opts.NoAuth && !bearerOK(r.Header.Values("Authorization"), token) {
			Unauthorized(w, len(r.Header.Values("Authorization")) > 0)
			return
		}
		if err := checkOrigin(origin, r); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" && s.full() {
			s.refuseSession(w, r)
			return
		}
		// Closing a session waits for its running calls: stop its kernel
		// first, so that a running cell ends now rather than at its
		// timeout.
		if r.Method == http.MethodDelete {
			if id := r.Header.Get("Mcp-Session-Id"); id != "" {
				s.endSessionID(id)
			}
		}
		if r.ContentLength > MaxRequest {
			http.Error(w, fmt.Sprintf("request body of %d bytes: ipybox mcp reads requests of at most %d MiB", r.ContentLength, MaxRequest>>20), http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxRequest)
		h.ServeHTTP(w, r)
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

// Unauthorized answers a request without the right bearer token: 401,
// with a WWW-Authenticate challenge that says why (RFC 6750: error
// invalid_request when no token was sent, invalid_token when it was
// wrong) and names the fix, and no resource_metadata: there is no OAuth
// to advertise. sent says whether an Authorization header came.
func Unauthorized(w http.ResponseWriter, sent bool) {
	code, desc := "invalid_request", noTokenDescription
	if sent {
		code, desc = "invalid_token", wrongTokenDescription
	}
	w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="ipybox", error="%s", error_description="%s"`, code, desc))
	http.Error(w, "ipybox mcp: "+desc, http.StatusUnauthorized)
}

// full reports whether a new session would exceed Options.MaxSessions.
func (s *Server) full() bool {
	max := s.opts.MaxSessions
	switch {
	case max == 0:
		max = DefaultMaxSessions
	case max < 0:
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live) >= max
}

// refuseSession answers a new session's initialize, past MaxSessions, with
// a JSON-RPC error (in a 200 response, so that clients show its message).
func (s *Server) refuseSession(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID json.RawMessage `json:"id"`
	}
	json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req)
	if len(req.ID) == 0 {
		req.ID = json.RawMessage("null")
	}
	max := s.opts.MaxSessions
	if max == 0 {
		max = DefaultMaxSessions
	}
	s.log.Warn("refused a new session: too many", "max_sessions", max)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32000,"message":%q}}`, req.ID,
		fmt.Sprintf("ipybox mcp already serves %d sessions (--max-sessions); close one (its kernel stops), or start the server with a higher --max-sessions", max))
}

// bearerOK checks the Authorization headers against token: exactly one,
// scheme "Bearer" in any case (RFC 7235). SHA-256 digests are compared in
// constant time, so that neither the token's bytes nor its length leak
// through timing. An empty token matches nothing.
func bearerOK(headers []string, token []byte) bool {
	if len(headers) != 1 || len(token) == 0 {
		return false
	}
	scheme, cred, ok := strings.Cut(headers[0], " ")
	cred = strings.TrimSpace(cred)
	if !ok || !strings.EqualFold(scheme, "Bearer") || cred == "" {
		return false
	}
	got, want := sha256.Sum256([]byte(cred)), sha256.Sum256(token)
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
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

// endSessionID stops the kernel of the session with the given ID.
func (s *Server) endSessionID(id string) {
	s.mu.Lock()
	var found *mcp.ServerSession
	for ss := range s.sessions {
		if ss.ID() == id {
			found = ss
			break
		}
	}
	s.mu.Unlock()
	if found != nil {
		s.endSession(found)
	}
}
