package mcpserver

import (
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// CheckHTTPAddr checks an address to serve streamable HTTP on. It must
// name its host: ":8080" would implicitly bind all interfaces. A host that
// is not a loopback address needs an auth token.
func CheckHTTPAddr(addr, token string) error {
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
	if isLoopback(host) {
		return nil
	}
	if token == "" {
		return fmt.Errorf("address %q is not a loopback address: serving other machines requires a bearer token (--auth-token), because whoever reaches the server runs code on this machine", addr)
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
// reach the same sessions. Each MCP session gets its
// own kernel, in the shared workspace. Idle sessions end after
// Options.SessionIdleTimeout, and their kernels stop. Requests whose Host
// header is not a loopback name are refused on a loopback listener
// (DNS-rebinding protection). With Options.AuthToken set, every request
// must carry "Authorization: Bearer <token>".
func (s *Server) Handler() http.Handler {
	idle := s.opts.SessionIdleTimeout
	switch {
	case idle == 0:
		idle = DefaultSessionIdleTimeout
	case idle < 0:
		idle = 0
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		SessionTimeout: idle,
		Logger:         s.log,
	})
	want := []byte("Bearer " + s.opts.AuthToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.opts.AuthToken != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ipybox"`)
			http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
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
		h.ServeHTTP(w, r)
	})
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
