package mcpserver

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The web page (Options.HTTP.UI, docs/ui.md) shows each principal its
// sessions, their cells as they run, the pending approvals (which it
// answers) and its audit rows, and exports a session as a notebook.
//
// Who may reach it, and how it keeps them out:
//   - A browser signs in by POSTing a bearer token of Options.HTTP (never
//     in a URL); it gets an HttpOnly, SameSite=Strict cookie that names a
//     sign-in of that token's principal, and a CSRF token that every
//     request carries in a header (GETs that cannot, the event stream and
//     the notebook link, in the query). The CSRF token is handed out at
//     sign-in only, and the page keeps it in its origin's localStorage:
//     cookies do not isolate ports, so a server on another loopback port
//     that the person's browser visits gets the cookie, but not the token.
//   - A page of another site (CSRF, DNS rebinding): every request's Host
//     must be a loopback name on a loopback listener, every POST's Origin
//     must be this server's, and Sec-Fetch-Site must not say cross-site.
//     The page's Content-Security-Policy allows no inline script and no
//     other origin.
//   - Kernel code: its text is escaped (escape.Text) before it leaves the
//     server and is set as textContent by the page; HTML and SVG go into
//     an iframe sandboxed without scripts.
//   - Another principal: every lookup is by the sign-in's principal; a
//     session, cell or approval of another is answered as unknown.
//
// uiState owns the sign-ins, the cells' history (uihistory.go) and the
// event streams (uievents.go). Its mu is a leaf lock: nothing is taken
// under it, and no I/O happens under it.
type uiState struct {
	s        *Server
	auditLog string

	mu     sync.Mutex
	logins map[[32]byte]*uiLogin
	hist   map[*session]*uiHistory
	subs   map[*uiSub]struct{}
	// bytes is what each principal's histories hold (uiHistory.bytes,
	// summed): at most maxUIPrincipalBytes, past which its oldest
	// finished cells go (uihistory.go).
	bytes map[string]int
	// subSeq numbers the event streams, so that a principal's oldest
	// is known (uievents.go).
	subSeq uint64
	// reads holds each principal's turns of heavy reads (readTurn);
	// readDeadline bounds the write of their answers (uiReadDeadline;
	// tests shorten it).
	reads        map[string]chan struct{}
	readDeadline time.Duration
	// auditIDs maps the audit log's session names (an executor's
	// SessionID) to the sessions of hist.
	auditIDs map[string]*session
}

// uiLogin is one browser's sign-in.
type uiLogin struct {
	principal string
	csrf      string
	expires   time.Time
}

const (
	uiCookie = "ipybox_ui"
	// uiLoginTTL is how long a sign-in lasts; maxUILogins bounds a
	// principal's (its oldest goes first: one principal's sign-ins never
	// push out another's).
	uiLoginTTL  = 12 * time.Hour
	maxUILogins = 32
	// maxUIBody bounds a request body of the page's API.
	maxUIBody = 64 << 10
	// maxUICookies is how many cookies of the page's name a request's
	// are read of (login).
	maxUICookies = 8
)

//go:embed ui
var uiAssets embed.FS

// uiCSP is the page's Content-Security-Policy: its own script and style
// files only, images from itself or data: URLs, and frames only as the
// sandboxed srcdoc frames of HTML output (which inherit this policy, so
// they run no script either way).
const uiCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"frame-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

func newUIState(s *Server, auditLog string) *uiState {
	return &uiState{s: s, auditLog: auditLog, logins: map[[32]byte]*uiLogin{}, hist: map[*session]*uiHistory{}, subs: map[*uiSub]struct{}{}, bytes: map[string]int{}, auditIDs: map[string]*session{},
		reads: map[string]chan struct{}{}, readDeadline: uiReadDeadline}
}

// uiHandler serves the page and its API under /ui/.
func (s *Server) uiHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ui/{$}", s.uiIndex)
	mux.HandleFunc("GET /ui/static/{file}", s.uiStatic)
	mux.HandleFunc("POST /ui/api/signin", s.uiSignIn)
	mux.HandleFunc("POST /ui/api/signout", s.uiAuthed(s.uiSignOut))
	mux.HandleFunc("GET /ui/api/me", s.uiAuthed(s.uiMe))
	mux.HandleFunc("GET /ui/api/sessions", s.uiAuthed(s.uiSessions))
	mux.HandleFunc("GET /ui/api/cells", s.uiAuthed(s.uiCells))
	mux.HandleFunc("GET /ui/api/events", s.uiAuthed(s.uiEvents))
	mux.HandleFunc("GET /ui/api/approvals", s.uiAuthed(s.uiApprovals))
	mux.HandleFunc("POST /ui/api/answer", s.uiAuthed(s.uiAnswer))
	mux.HandleFunc("GET /ui/api/notebook", s.uiAuthed(s.uiNotebook))
	mux.HandleFunc("GET /ui/api/audit", s.uiAuthed(s.uiAudit))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", uiCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Frame-Options", "DENY")
		if err := uiCheckRequest(r); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		if r.ContentLength > maxUIBody {
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxUIBody)
		mux.ServeHTTP(w, r)
	})
}

// uiCheckRequest refuses what a page of another site sends: a Host that
// is not a loopback name on a loopback listener (DNS rebinding), a
// Sec-Fetch-Site that says cross-site, and a POST whose Origin is not this
// server's (or is missing).
func uiCheckRequest(r *http.Request) error {
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if tcp, ok := la.(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
			host := r.Host
			if h, _, err := net.SplitHostPort(r.Host); err == nil {
				host = h
			}
			if !isLoopback(host) {
				return fmt.Errorf("host %q refused: this page serves loopback names only (DNS-rebinding protection); open http://127.0.0.1:PORT/ui/", r.Host)
			}
		}
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return fmt.Errorf("cross-site request refused (Sec-Fetch-Site %q)", r.Header.Get("Sec-Fetch-Site"))
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return nil
	}
	origin := r.Header.Get("Origin")
	if origin != "http://"+r.Host && origin != "https://"+r.Host {
		return fmt.Errorf("cross-origin request refused (Origin %q, want this server's)", origin)
	}
	return nil
}

func (s *Server) uiIndex(w http.ResponseWriter, r *http.Request) {
	b, err := uiAssets.ReadFile("ui/index.html")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(b)
}

func (s *Server) uiStatic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	types := map[string]string{"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8"}
	ct, ok := types[name]
	b, err := uiAssets.ReadFile("ui/" + name)
	if !ok || err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Write(b)
}

// uiSignIn exchanges a bearer token (in the JSON body) for a sign-in
// cookie and a CSRF token.
func (s *Server) uiSignIn(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Token string `json:"token"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		http.Error(w, "sign-in: want a JSON body {\"token\": \"...\"}", http.StatusBadRequest)
		return
	}
	p, ok := s.principalFor(strings.TrimSpace(in.Token))
	if !ok || in.Token == "" {
		http.Error(w, "sign-in refused: the token is not one of this server's (the content of ipybox mcp's --auth-token-file)", http.StatusUnauthorized)
		return
	}
	id, l := s.ui.newLogin(p)
	http.SetCookie(w, &http.Cookie{Name: uiCookie, Value: id, Path: "/ui/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, MaxAge: int(uiLoginTTL / time.Second)})
	uiJSON(w, map[string]string{"principal": l.principal, "csrf": l.csrf})
}

// newLogin records a sign-in of principal p and returns its cookie value.
func (u *uiState) newLogin(p string) (string, *uiLogin) {
	id := randToken()
	l := &uiLogin{principal: p, csrf: randToken(), expires: time.Now().Add(uiLoginTTL)}
	u.mu.Lock()
	defer u.mu.Unlock()
	now := time.Now()
	for k, o := range u.logins {
		if now.After(o.expires) {
			u.endLoginLocked(k)
		}
	}
	for {
		var oldest [32]byte
		var at time.Time
		n := 0
		for k, o := range u.logins {
			if o.principal != p {
				continue
			}
			n++
			if at.IsZero() || o.expires.Before(at) {
				oldest, at = k, o.expires
			}
		}
		if n < maxUILogins {
			break
		}
		u.endLoginLocked(oldest)
	}
	u.logins[sha256.Sum256([]byte(id))] = l
	return id, l
}

func randToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// login returns the sign-in of r's cookies, if one is current: the one
// its CSRF token (csrfOf) belongs to, else the first current one (whose
// token then does not match: uiAuthed refuses it). A request may carry
// several cookies of the name: a server on another loopback port can set
// cookies for this host (cookies do not isolate ports) with a longer
// path, which the browser sends first; taking the first would lock the
// page out.
func (u *uiState) login(r *http.Request) (*uiLogin, [32]byte, bool) {
	csrf := csrfOf(r)
	u.mu.Lock()
	defer u.mu.Unlock()
	var first *uiLogin
	var firstK [32]byte
	now := time.Now()
	cookies := r.CookiesNamed(uiCookie)
	// A few are enough for tossed ones (each costs a hash under mu).
	cookies = cookies[:min(len(cookies), maxUICookies)]
	for _, c := range cookies {
		if c.Value == "" {
			continue
		}
		k := sha256.Sum256([]byte(c.Value))
		l := u.logins[k]
		if l == nil || now.After(l.expires) {
			continue
		}
		if subtle.ConstantTimeCompare([]byte(csrf), []byte(l.csrf)) == 1 {
			return l, k, true
		}
		if first == nil {
			first, firstK = l, k
		}
	}
	return first, firstK, first != nil
}

// csrfOf is the CSRF token r carries: in X-CSRF-Token, or, for a GET,
// in the csrf query parameter.
func csrfOf(r *http.Request) string {
	got := r.Header.Get("X-CSRF-Token")
	if got == "" && r.Method == http.MethodGet {
		got = r.URL.Query().Get("csrf")
	}
	return got
}

// errNotSignedIn answers a request without a current sign-in.
var errNotSignedIn = errors.New("not signed in: sign in with the server's bearer token")

// uiAuthed wraps an API handler: it needs a current sign-in and its CSRF
// token, in X-CSRF-Token (or, for a GET, the csrf query parameter).
func (s *Server) uiAuthed(h func(http.ResponseWriter, *http.Request, *uiLogin)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		l, _, ok := s.ui.login(r)
		if !ok {
			http.Error(w, errNotSignedIn.Error(), http.StatusUnauthorized)
			return
		}
		if subtle.ConstantTimeCompare([]byte(csrfOf(r)), []byte(l.csrf)) != 1 {
			http.Error(w, "missing or wrong X-CSRF-Token", http.StatusForbidden)
			return
		}
		h(w, r, l)
	}
}

func (s *Server) uiSignOut(w http.ResponseWriter, r *http.Request, _ *uiLogin) {
	if _, k, _ := s.ui.login(r); k != ([32]byte{}) {
		s.ui.mu.Lock()
		s.ui.endLoginLocked(k)
		s.ui.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: uiCookie, Value: "", Path: "/ui/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) uiMe(w http.ResponseWriter, r *http.Request, l *uiLogin) {
	// Not the CSRF token: the page has it from its sign-in.
	uiJSON(w, map[string]any{"principal": l.principal, "audit": s.ui.auditLog != ""})
}

// uiJSON writes v as the JSON answer.
func uiJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// uiReadJSON reads a request's JSON body into v.
func uiReadJSON(r *http.Request, v any) error {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
