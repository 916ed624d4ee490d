package mcpserver

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
)

// uiTokens are the principals of the page's tests.
var uiTokens = map[string]string{"alice": "alice-token-0123456789", "bob": "bob-token-0123456789xx"}

// uiServer serves a server with the page on a loopback port, for two
// principals.
func uiServer(t *testing.T, o *Options) (*Server, string) {
	t.Helper()
	if o == nil {
		o = &Options{Workspace: t.TempDir()}
	}
	o.HTTP.UI = true
	o.HTTP.Principals = uiTokens
	srv := newServer(t, o)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return srv, hs.URL
}

// uiClient is a browser of the page: its cookies, and its CSRF token once
// signed in.
type uiClient struct {
	t    *testing.T
	base string
	hc   *http.Client
	csrf string
}

func newUIClient(t *testing.T, base string) *uiClient {
	jar, _ := cookiejar.New(nil)
	return &uiClient{t: t, base: base, hc: &http.Client{Jar: jar}}
}

// do sends a request as the page does (same Origin), with extra headers
// h, and returns the status and body.
func (c *uiClient) do(method, path, body string, h map[string]string) (int, string) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("X-CSRF-Token", c.csrf)
	if method != http.MethodGet {
		req.Header.Set("Origin", c.base)
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range h {
		if k == "Host" {
			req.Host = v
			continue
		}
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	res, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// signIn signs in with token, and fails t unless it works.
func (c *uiClient) signIn(token string) {
	c.t.Helper()
	code, body := c.do("POST", "/ui/api/signin", `{"token":"`+token+`"}`, nil)
	if code != 200 {
		c.t.Fatalf("sign-in: %d %s", code, body)
	}
	var me struct{ CSRF string }
	json.Unmarshal([]byte(body), &me)
	c.csrf = me.CSRF
}

// getJSON GETs path into v, and returns the status.
func (c *uiClient) getJSON(path string, v any) int {
	c.t.Helper()
	code, body := c.do("GET", path, "", nil)
	if code == 200 && v != nil {
		if err := json.Unmarshal([]byte(body), v); err != nil {
			c.t.Fatalf("%s: %v: %s", path, err, body)
		}
	}
	return code
}

// TestUISignIn: the token is exchanged, in a POST body only, for an
// HttpOnly SameSite=Strict cookie; the page's API needs the cookie, and
// every POST the CSRF token; the bearer header does not open the page's
// API, and the cookie does not open /mcp.
func TestUISignIn(t *testing.T) {
	_, base := uiServer(t, nil)
	c := newUIClient(t, base)
	if code, _ := c.do("GET", "/ui/api/me", "", nil); code != 401 {
		t.Errorf("me before sign-in: %d, want 401", code)
	}
	for _, body := range []string{`{"token":"wrong"}`, `{"token":""}`, `{}`, `not json`} {
		if code, _ := c.do("POST", "/ui/api/signin", body, nil); code == 200 {
			t.Errorf("sign-in with %s: 200", body)
		}
	}
	// A token in the URL is never read.
	if code, _ := c.do("POST", "/ui/api/signin?token="+uiTokens["alice"], `{}`, nil); code == 200 {
		t.Errorf("sign-in with the token in the URL worked")
	}
	if code, _ := c.do("GET", "/ui/api/me", "", map[string]string{"Authorization": "Bearer " + uiTokens["alice"]}); code != 401 {
		t.Errorf("me with a bearer header: %d, want 401 (the page signs in with its cookie)", code)
	}
	req, _ := http.NewRequest("POST", base+"/ui/api/signin", strings.NewReader(`{"token":"`+uiTokens["alice"]+`"}`))
	req.Header.Set("Origin", base)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	cookies := res.Cookies()
	if len(cookies) != 1 || cookies[0].Name != uiCookie || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode || cookies[0].Path != "/ui/" {
		t.Fatalf("cookie: %+v, want one HttpOnly SameSite=Strict cookie for /ui/", cookies)
	}
	if strings.Contains(res.Request.URL.String(), uiTokens["alice"]) {
		t.Errorf("the token is in a URL")
	}
	c.signIn(uiTokens["alice"])
	var me struct{ Principal string }
	if code := c.getJSON("/ui/api/me", &me); code != 200 || me.Principal != "alice" {
		t.Errorf("me: %d %+v", code, me)
	}
	// The cookie is not a bearer token of /mcp.
	if code, _ := c.do("POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, map[string]string{"X-CSRF-Token": ""}); code != 401 {
		t.Errorf("/mcp with the page's cookie: %d, want 401", code)
	}
	// Sign-out ends the sign-in.
	if code, body := c.do("POST", "/ui/api/signout", "", nil); code != 204 {
		t.Fatalf("sign-out: %d %s", code, body)
	}
	if code, _ := c.do("GET", "/ui/api/me", "", nil); code != 401 {
		t.Errorf("me after sign-out: %d", code)
	}
}

// TestUISignInsPerPrincipal: a principal that signs in again and again
// pushes out its own oldest sign-ins, never another principal's.
func TestUISignInsPerPrincipal(t *testing.T) {
	_, base := uiServer(t, nil)
	alice := newUIClient(t, base)
	alice.signIn(uiTokens["alice"])
	// More than the bound of all sign-ins this replaced (256).
	bobs := make([]*uiClient, max(300, 3*maxUILogins))
	for i := range bobs {
		bobs[i] = newUIClient(t, base)
		bobs[i].signIn(uiTokens["bob"])
	}
	if code := alice.getJSON("/ui/api/me", nil); code != 200 {
		t.Errorf("alice after %d sign-ins of bob: %d, want 200", len(bobs), code)
	}
	if code := bobs[0].getJSON("/ui/api/me", nil); code != 401 {
		t.Errorf("bob's first sign-in after %d more: %d, want 401 (pushed out)", len(bobs)-1, code)
	}
	if code := bobs[len(bobs)-1].getJSON("/ui/api/me", nil); code != 200 {
		t.Errorf("bob's last sign-in: %d, want 200", code)
	}
}

// TestUIStolenCookie is the attack of a server on another port of the
// same host, which a browser sends the page's cookie to (cookies do not
// isolate ports): with the cookie alone, no read and no answer works,
// and nothing hands it the CSRF token.
func TestUIStolenCookie(t *testing.T) {
	_, base := uiServer(t, nil)
	alice := newUIClient(t, base)
	alice.signIn(uiTokens["alice"])
	thief := newUIClient(t, base)
	thief.hc.Jar = alice.hc.Jar // the cookie, not the CSRF token
	for _, path := range []string{"/ui/api/me", "/ui/api/sessions", "/ui/api/approvals", "/ui/api/audit", "/ui/api/events",
		"/ui/api/cells?session=x", "/ui/api/notebook?session=x", "/ui/api/me?csrf=", "/ui/api/me?csrf=guess"} {
		if code, body := thief.do("GET", path, "", nil); code != 403 || strings.Contains(body, alice.csrf) {
			t.Errorf("GET %s with the cookie alone: %d %s, want 403", path, code, body)
		}
	}
	for _, path := range []string{"/ui/api/answer", "/ui/api/signout"} {
		if code, _ := thief.do("POST", path, `{"id":"x/y","answer":"allow"}`, nil); code != 403 {
			t.Errorf("POST %s with the cookie alone: %d, want 403", path, code)
		}
	}
	// The signed-in page's own reads do not return the token either.
	if code, body := alice.do("GET", "/ui/api/me", "", nil); code != 200 || strings.Contains(body, alice.csrf) {
		t.Errorf("me: %d %s, want 200 without the CSRF token", code, body)
	}
	if code, _ := alice.do("GET", "/ui/api/sessions?csrf="+alice.csrf, "", map[string]string{"X-CSRF-Token": ""}); code != 200 {
		t.Errorf("a GET with the token in its query: %d, want 200", code)
	}
}

// TestUICrossSite is the attack of a page of another site in the user's
// browser: a cross-origin or origin-less POST (CSRF), a POST without the
// CSRF token, a cross-site fetch, and a request through a rebound DNS
// name are refused, whatever the cookie.
func TestUICrossSite(t *testing.T) {
	_, base := uiServer(t, nil)
	c := newUIClient(t, base)
	c.signIn(uiTokens["alice"])
	answer := `{"id":"cell_x/approval-1","answer":"allow"}`
	// Its first character changed (to "x", or "y" if it was "x").
	wrong := "x" + c.csrf[1:]
	if c.csrf[0] == 'x' {
		wrong = "y" + c.csrf[1:]
	}
	for name, h := range map[string]map[string]string{
		"other origin":        {"Origin": "http://evil.example"},
		"null origin":         {"Origin": "null"},
		"no origin":           {"Origin": ""},
		"origin of a sibling": {"Origin": "http://localhost.evil.example"},
		"cross-site fetch":    {"Sec-Fetch-Site": "cross-site"},
		"same-site fetch":     {"Sec-Fetch-Site": "same-site"},
		"no CSRF token":       {"X-CSRF-Token": ""},
		"wrong CSRF token":    {"X-CSRF-Token": wrong},
		"rebound DNS name":    {"Host": "evil.example"},
	} {
		if code, body := c.do("POST", "/ui/api/answer", answer, h); code != 403 {
			t.Errorf("%s: answer got %d %s, want 403", name, code, body)
		}
	}
	// Sign-in from another site: refused before the token is read.
	for _, origin := range []string{"http://evil.example", ""} {
		if code, _ := c.do("POST", "/ui/api/signin", `{"token":"`+uiTokens["alice"]+`"}`, map[string]string{"Origin": origin}); code != 403 {
			t.Errorf("sign-in with Origin %q: %d, want 403", origin, code)
		}
	}
	// Reading through a rebound name, or cross-site.
	for _, h := range []map[string]string{{"Host": "attacker.example:80"}, {"Sec-Fetch-Site": "cross-site"}} {
		if code, _ := c.do("GET", "/ui/api/sessions", "", h); code != 403 {
			t.Errorf("GET with %v: %d, want 403", h, code)
		}
	}
	// The page's own request passes (the answer's approval is unknown).
	if code, body := c.do("POST", "/ui/api/answer", answer, nil); code != 409 {
		t.Errorf("own answer to an unknown approval: %d %s, want 409", code, body)
	}
}

// TestUIPageStrict: the page's headers forbid inline script and framing,
// and its files use none: no inline script or handler in the HTML, and
// no HTML sink in the script.
func TestUIPageStrict(t *testing.T) {
	_, base := uiServer(t, nil)
	res, err := http.Get(base + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	html, _ := io.ReadAll(res.Body)
	res.Body.Close()
	csp := res.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") || strings.Contains(csp, "http") {
		t.Errorf("CSP %q allows inline code or another origin", csp)
	}
	if res.Header.Get("X-Content-Type-Options") != "nosniff" || res.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("headers: %v", res.Header)
	}
	for _, m := range regexp.MustCompile(`<script[^>]*>([^<]*)</script>`).FindAllStringSubmatch(string(html), -1) {
		if !strings.Contains(m[0], `src="/ui/static/`) || strings.TrimSpace(m[1]) != "" {
			t.Errorf("inline script: %s", m[0])
		}
	}
	if regexp.MustCompile(`(?i)\son[a-z]+\s*=|style\s*=|https?://`).Match(html) {
		t.Errorf("the HTML has an inline handler, style or outside URL")
	}
	js, _ := uiAssets.ReadFile("ui/app.js")
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "allow-scripts", "allow-same-origin", "http://", "https://"} {
		if strings.Contains(string(js), sink) {
			t.Errorf("app.js uses %s", sink)
		}
	}
	if code := mustStatus(t, base+"/ui/static/../ui.go"); code == 200 {
		t.Errorf("a file beside the assets is served")
	}
}

func mustStatus(t *testing.T, url string) int {
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// TestUIHistoryBounded: kernel code that prints without end, or runs
// cell after cell, holds at most maxUICells cells and maxUIBytes bytes of
// its session's history; a cell keeps maxUICellText bytes of text and
// counts the rest; the page reads it in pages of at most 100 cells.
func TestUIHistoryBounded(t *testing.T) {
	u := newUIState(nil, "")
	x := &session{id: "sess", principal: "p"}
	line := strings.Repeat("x", 1000) + "\n"
	for i := range 1500 {
		c := u.cellStart(x, "cell_"+strconv.Itoa(i), "print('x')", "")
		for range 40 {
			c.output(&ipybox.Output{Stream: "stdout", Text: line})
		}
		c.add(&uiItem{Kind: "image", Mime: "image/png", Data: strings.Repeat("A", 100<<10)})
		c.end(&ipybox.Result{ExecutionCount: i + 1}, nil)
	}
	big := u.cellStart(x, "cell_big", "print('y')", "")
	for range 400 {
		big.output(&ipybox.Output{Stream: "stderr", Text: line})
	}
	h := u.history(x)
	h.mu.Lock()
	n, bytes, dropped, last := len(h.cells), h.bytes, h.dropped, h.cells[len(h.cells)-1]
	var sum int
	for _, c := range h.cells {
		sum += len(c.Code) + len(c.ID) + uiCellCost
		for _, it := range c.Items {
			sum += it.size()
		}
	}
	h.mu.Unlock()
	if n > maxUICells || bytes > maxUIBytes || sum != bytes || dropped != 1501-n {
		t.Errorf("history: %d cells, %d bytes (counted %d), %d dropped; want at most %d cells and %d bytes", n, bytes, sum, dropped, maxUICells, maxUIBytes)
	}
	if last.text != maxUICellText || last.Truncated != int64(400*len(line)-maxUICellText) {
		t.Errorf("the big cell kept %d bytes and counted %d past them", last.text, last.Truncated)
	}
	t.Logf("history of 1501 cells: kept %d cells in %d bytes", n, bytes)
}
