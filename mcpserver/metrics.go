package mcpserver

import (
	"net/http"

	"github.com/ipybox/ipybox"
)

// MetricsHandler serves the process's Prometheus metrics
// (ipybox.MetricsHandler) under the rules of Handler: the bearer token
// (Options.AuthToken) on every request, loopback included, unless
// Options.NoAuth; and no request from a browser page of another site.
// Only GET and HEAD are served.
func (s *Server) MetricsHandler() http.Handler {
	h := ipybox.MetricsHandler()
	origin := http.NewCrossOriginProtection()
	token := []byte(s.opts.AuthToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.opts.NoAuth && !bearerOK(r.Header.Values("Authorization"), token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ipybox"`)
			http.Error(w, "missing or wrong bearer token (send Authorization: Bearer <token>)", http.StatusUnauthorized)
			return
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
