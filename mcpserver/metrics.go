package mcpserver

import (
	"net/http"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/telemetry"
)

// MetricsHandler serves the process's Prometheus metrics
// (ipybox.MetricsHandler) under the rules of Handler: a bearer token of
// any principal (Options.HTTP.Principals, Options.HTTP.AuthToken) on every request,
// loopback included, unless Options.HTTP.NoAuth; and no request from a browser
// page of another site. Only GET and HEAD are served.
func (s *Server) MetricsHandler() http.Handler {
	h := ipybox.MetricsHandler()
	origin := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.opts.HTTP.NoAuth {
			if _, ok := s.bearerPrincipal(r.Header.Values("Authorization")); !ok {
				unauthorized(w, len(r.Header.Values("Authorization")) > 0)
				return
			}
		}
		if err := checkOrigin(origin, r); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "metrics are read with GET", http.StatusMethodNotAllowed)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// reportSessions reports the server's open sessions to the metrics, until
// the returned function.
func (s *Server) reportSessions() func() {
	return telemetry.Sessions(s.sessionStates)
}

// sessionStates counts the open sessions: those with a kernel or about to
// get one (active), and those whose state is saved (hibernated).
func (s *Server) sessionStates() (active, hibernated int) {
	for _, x := range s.sessions.store.all() {
		x.mu.Lock()
		asleep := x.asleep != nil
		x.mu.Unlock()
		if asleep {
			hibernated++
		} else {
			active++
		}
	}
	return active, hibernated
}
