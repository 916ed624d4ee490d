package mcpconn

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

// TestAttackClientURLEveryHop: a client's URL server that is public
// itself names loopback in what it answers, and the host, on the old
// code, sent the request there: the resource metadata of its 401, the
// authorization server of its metadata, that server's registration and
// token endpoints, and a redirect from one of them. The front server
// stands for a public one (the test's guard accepts its port); the inner
// one is a loopback service that must get nothing while the config is a
// client's, and does get the requests when the same config is the
// operator's (so each variant reaches it, and the test can fail).
func TestAttackClientURLEveryHop(t *testing.T) {
	var inner atomic.Int64
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner.Add(1)
		http.Error(w, "inner", http.StatusTeapot)
	}))
	t.Cleanup(b.Close)

	type variant struct {
		name                string
		prm, as, reg, token string // "" is the front's own
		clientCredentials   bool
	}
	variants := []variant{
		{name: "resource metadata", prm: b.URL + "/prm"},
		{name: "authorization server", as: b.URL},
		{name: "registration endpoint", reg: b.URL + "/register"},
		{name: "registration redirected", reg: "redirect"},
		{name: "token endpoint", token: b.URL + "/token", clientCredentials: true},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			front := frontServer(t, b.URL, v.prm, v.as, v.reg, v.token)
			fport := front.Listener.Addr().(*net.TCPAddr).Port
			cfg := Config{URL: front.URL + "/mcp"}
			opts := &Options{ConnectTimeout: 10 * time.Second, TokenFile: t.TempDir() + "/tokens.json",
				OAuthURL: func(context.Context, string, string) error { return errors.New("no browser in this test") }}
			if v.clientCredentials {
				// A secret comes only from a placeholder, which a client's
				// config gets filled only where the operator allows it.
				cfg.OAuth = &OAuthConfig{Grant: GrantClientCredentials, ClientID: "c", ClientSecret: "${SECRET}"}
				opts.ClientVars = true
				opts.LookupEnv = func(k string) (string, bool) { return "s", k == "SECRET" }
			}

			for _, origin := range []string{OriginClient, ""} {
				cfg.Origin = origin
				m := newManager(t, map[string]Config{"srv": cfg}, opts)
				m.guarded = publicOnlyTransport(func(ap netip.AddrPort) bool { return int(ap.Port()) == fport })
				before := inner.Load()
				_, err := m.ListTools(context.Background(), "srv")
				got := inner.Load() - before
				switch {
				case err == nil:
					t.Errorf("origin %q: connected, want an error", origin)
				case origin == OriginClient && got != 0:
					t.Errorf("a client's config: the loopback service got %d requests from the host (%v)", got, err)
				case origin == "" && got == 0:
					t.Errorf("the operator's config did not reach the loopback service (the variant tests nothing): %v", err)
				}
			}
		})
	}
}

// frontServer is an MCP endpoint that asks for OAuth, with its metadata:
// prm, as, reg and token replace its own resource metadata URL,
// authorization server, registration and token endpoints ("redirect":
// a registration endpoint of its own that redirects to inner).
func frontServer(t *testing.T, inner, prm, as, reg, token string) *httptest.Server {
	mux := http.NewServeMux()
	f := httptest.NewServer(mux)
	t.Cleanup(f.Close)
	or := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	if reg == "redirect" {
		reg = f.URL + "/redirect"
	}
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+or(prm, f.URL+"/prm")+`"`)
		http.Error(w, "sign in", http.StatusUnauthorized)
	})
	mux.HandleFunc("/prm", func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, map[string]any{"resource": f.URL + "/mcp", "authorization_servers": []string{or(as, f.URL)}})
	})
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		writeTestJSON(w, map[string]any{
			"issuer": f.URL, "authorization_endpoint": f.URL + "/authorize",
			"token_endpoint": or(token, f.URL+"/token"), "registration_endpoint": or(reg, f.URL+"/register"),
			"response_types_supported":              []string{"code"},
			"grant_types_supported":                 []string{"authorization_code", "client_credentials"},
			"token_endpoint_auth_methods_supported": []string{"client_secret_post", "client_secret_basic"},
			"code_challenge_methods_supported":      []string{"S256"},
		})
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, inner+"/register", http.StatusTemporaryRedirect)
	})
	return f
}

func writeTestJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}
