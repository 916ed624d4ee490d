package mcpserver

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
)

// principalHistoryBytes sums what p's histories count, and what u counts
// for p.
func principalHistoryBytes(u *uiState, p string) (sum, counted int) {
	for _, h := range u.histories(p) {
		h.mu.Lock()
		sum += h.bytes
		h.mu.Unlock()
	}
	u.mu.Lock()
	counted = u.bytes[p]
	u.mu.Unlock()
	return sum, counted
}

// TestAttackUIHistoryManySessions: a principal's kernel code fills many
// sessions' histories, each to its own bound (16 MiB). A session that
// hibernates gives back its kernel but keeps its history, and a token may
// hold 256 sessions: 4 GiB kept for the page. The principal's histories
// are bounded together; past the bound its oldest finished cells go,
// whichever session they are in, and never another principal's.
func TestAttackUIHistoryManySessions(t *testing.T) {
	u := newUIState(nil, "")
	img := strings.Repeat("I", maxUIImage)
	fill := func(x *session, n int) {
		for i := range n {
			c := u.cellStart(x, x.id+"_cell_"+strconv.Itoa(i), "show()", "")
			for range 3 {
				c.add(&uiItem{Kind: "image", Mime: "image/png", Data: img})
			}
			c.end(nil, nil)
		}
	}
	// Bob's one session, filled first: Alice's flood must not touch it.
	bob := &session{id: "bob_s", principal: "bob"}
	fill(bob, 2)
	bobBytes, _ := principalHistoryBytes(u, "bob")
	var alice []*session
	for k := range 3 * maxUIPrincipalBytes / maxUIBytes {
		x := &session{id: "alice_s" + strconv.Itoa(k), principal: "alice"}
		alice = append(alice, x)
		fill(x, 3) // about 18 MiB asked, 16 MiB kept per session
		sum, counted := principalHistoryBytes(u, "alice")
		if sum > maxUIPrincipalBytes+maxUICellBytes || sum != counted {
			t.Fatalf("after %d sessions alice's histories hold %.1f MiB (counted %.1f MiB); want at most %d MiB and the count exact",
				k+1, mib(int64(sum)), mib(int64(counted)), (maxUIPrincipalBytes+maxUICellBytes)>>20)
		}
	}
	if got, _ := principalHistoryBytes(u, "bob"); got != bobBytes {
		t.Errorf("bob's history went from %d to %d bytes while alice flooded hers", bobBytes, got)
	}
	// The newest session keeps its cells; the oldest lost theirs.
	newest, oldest := u.history(alice[len(alice)-1]), u.history(alice[0])
	newest.mu.Lock()
	n := len(newest.cells)
	newest.mu.Unlock()
	oldest.mu.Lock()
	d := oldest.dropped
	oldest.mu.Unlock()
	if n == 0 || d == 0 {
		t.Errorf("newest session keeps %d cells, oldest dropped %d; want the oldest cells dropped first", n, d)
	}
	// A session's end gives its bytes back.
	for _, x := range alice {
		u.forget(x)
	}
	if sum, counted := principalHistoryBytes(u, "alice"); sum != 0 || counted != 0 {
		t.Errorf("after every session ended alice holds %d bytes, counted %d; want 0", sum, counted)
	}
}

// TestAttackUIStreamFlood: a client opens event stream after event
// stream and reads none; each pins up to 16 MiB of events. A principal's
// open streams are bounded: a new one closes its oldest, never another
// principal's.
func TestAttackUIStreamFlood(t *testing.T) {
	u := newUIState(nil, "")
	bob := u.subscribe("bob")
	t.Cleanup(func() { u.unsubscribe(bob) })
	var subs []*uiSub
	for range 10 * maxUISubs {
		subs = append(subs, u.subscribe("alice"))
	}
	t.Cleanup(func() {
		for _, s := range subs {
			u.unsubscribe(s)
		}
	})
	u.mu.Lock()
	open := 0
	for s := range u.subs {
		if s.principal == "alice" {
			open++
		}
	}
	firstClosed, lastOpen, bobOpen := subs[0].closed, !subs[len(subs)-1].closed, !bob.closed
	u.mu.Unlock()
	if open > maxUISubs || !firstClosed || !lastOpen || !bobOpen {
		t.Errorf("alice has %d streams open (want at most %d), first closed %v, newest open %v, bob's open %v",
			open, maxUISubs, firstClosed, lastOpen, bobOpen)
	}
}

// TestAttackUIStreamOutlivesSignIn: an event stream opened with a sign-in
// went on after it ended (signed out, pushed out by newer sign-ins, or
// expired): whoever held the cookie and the CSRF token once kept reading
// the principal's cells, approvals and outputs for as long as it kept the
// connection. A stream ends with its sign-in.
func TestAttackUIStreamOutlivesSignIn(t *testing.T) {
	srv, base := uiServer(t, nil)
	open := func(c *uiClient) <-chan error {
		req, _ := http.NewRequest("GET", base+"/ui/api/events?csrf="+url.QueryEscape(c.csrf), nil)
		res, err := c.hc.Do(req)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("events: %v %v", res, err)
		}
		ended := make(chan error, 1)
		go func() {
			defer res.Body.Close()
			_, err := io.Copy(io.Discard, res.Body)
			ended <- err
		}()
		t.Cleanup(func() { res.Body.Close() })
		return ended
	}
	waitEnd := func(name string, ended <-chan error) {
		t.Helper()
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Errorf("%s: the stream still runs 10 s after its sign-in ended", name)
		}
	}
	bob := newUIClient(t, base)
	bob.signIn(uiTokens["bob"])
	bobEnded := open(bob)

	// Signed out.
	a := newUIClient(t, base)
	a.signIn(uiTokens["alice"])
	ended := open(a)
	if code, _ := a.do("POST", "/ui/api/signout", "", nil); code != 204 {
		t.Fatalf("sign-out: %d", code)
	}
	waitEnd("signed out", ended)

	// Pushed out by newer sign-ins of the same principal.
	a = newUIClient(t, base)
	a.signIn(uiTokens["alice"])
	ended = open(a)
	for range maxUILogins {
		newUIClient(t, base).signIn(uiTokens["alice"])
	}
	waitEnd("pushed out", ended)

	// Expired (its time is set back; the next sign-in sweeps it).
	a = newUIClient(t, base)
	a.signIn(uiTokens["alice"])
	ended = open(a)
	srv.ui.mu.Lock()
	for _, l := range srv.ui.logins {
		if l.csrf == a.csrf {
			l.expires = time.Now().Add(-time.Second)
		}
	}
	srv.ui.mu.Unlock()
	newUIClient(t, base).signIn(uiTokens["alice"])
	waitEnd("expired", ended)

	select {
	case err := <-bobEnded:
		t.Errorf("bob's stream ended with alice's sign-ins: %v", err)
	default:
	}
}

// TestAttackUITossedCookie: a server on another loopback port that the
// person's browser visits may set cookies for 127.0.0.1 (cookies do not
// isolate ports), with a longer path, which the browser then sends first:
// a junk one, or one of its own principal's sign-ins. The page went on
// reading the first cookie only, and was locked out (401 or 403, signing
// in again did not help). The page's sign-in is the cookie that its CSRF
// token belongs to, wherever it is in the header; and a tossed cookie of
// another principal never makes the request that principal's.
func TestAttackUITossedCookie(t *testing.T) {
	_, base := uiServer(t, nil)
	cookieOf := func(c *uiClient) string {
		u, _ := url.Parse(base + "/ui/api/")
		for _, k := range c.hc.Jar.Cookies(u) {
			if k.Name == uiCookie {
				return k.Value
			}
		}
		t.Fatal("no cookie")
		return ""
	}
	alice := newUIClient(t, base)
	alice.signIn(uiTokens["alice"])
	bob := newUIClient(t, base)
	bob.signIn(uiTokens["bob"])
	aliceCookie, bobCookie := cookieOf(alice), cookieOf(bob)
	raw := newUIClient(t, base) // no jar cookies: the header is set by hand
	for name, header := range map[string]string{
		"junk first":         "ipybox_ui=junk; ipybox_ui=" + aliceCookie,
		"empty first":        "ipybox_ui=; ipybox_ui=" + aliceCookie,
		"bob's first":        "ipybox_ui=" + bobCookie + "; ipybox_ui=" + aliceCookie,
		"bob's and junk":     "ipybox_ui=" + bobCookie + "; ipybox_ui=junk; ipybox_ui=" + aliceCookie,
		"alice's then bob's": "ipybox_ui=" + aliceCookie + "; ipybox_ui=" + bobCookie,
	} {
		raw.csrf = alice.csrf
		code, body := raw.do("GET", "/ui/api/me", "", map[string]string{"Cookie": header})
		if code != 200 || !strings.Contains(body, `"principal":"alice"`) {
			t.Errorf("%s: %d %s; want alice's sign-in", name, code, strings.TrimSpace(body))
		}
		// Bob's CSRF token with Alice's cookie and his: his, never hers.
		raw.csrf = bob.csrf
		if code, body := raw.do("GET", "/ui/api/me", "", map[string]string{"Cookie": header}); strings.Contains(body, `"alice"`) {
			t.Errorf("%s with bob's token: %d %s; alice's sign-in answered bob's CSRF token", name, code, body)
		}
	}
	// Only cookies that are not current: not signed in.
	raw.csrf = alice.csrf
	if code, _ := raw.do("GET", "/ui/api/me", "", map[string]string{"Cookie": "ipybox_ui=junk; ipybox_ui=junk2"}); code != 401 {
		t.Errorf("junk cookies only: %d, want 401", code)
	}
	// A current sign-in of bob's, with alice's token: refused (403).
	if code, _ := raw.do("GET", "/ui/api/me", "", map[string]string{"Cookie": "ipybox_ui=" + bobCookie}); code != 403 {
		t.Errorf("bob's cookie with alice's CSRF token: %d, want 403", code)
	}
}

// TestAttackUIAuditFlood: the audit log is shared by every principal and
// grows to 128 MiB (64 MiB and its rotated file), which kernel code fills
// as fast as its calls are denied. Each read of the page's audit view
// parsed the whole log into memory, so a few reads at once, of any
// principal, held several times the log. A read keeps only the rows it
// answers (at most 500), however long the log.
func TestAttackUIAuditFlood(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "approvals.jsonl")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	args := `{"q":"` + strings.Repeat("a", 4000) + `"}`
	for i := range 24 << 20 / 4200 {
		who := "bob"
		if i%1000 == 0 {
			who = "alice"
		}
		fmt.Fprintf(w, `{"time":"2026-12-07T10:00:00Z","session":"s%d","principal":%q,"kind":"tool","server":"srv","tool":"t","args":%s,"decision":"deny","by":"rule"}`+"\n", i, who, args)
	}
	w.Flush()
	f.Close()
	_, base := uiServer(t, &Options{Workspace: t.TempDir(), Approvals: ApprovalOptions{AuditLog: logPath}})
	a := newUIClient(t, base)
	a.signIn(uiTokens["alice"])
	var out struct{ Rows []uiAuditRow }
	if code := a.getJSON("/ui/api/audit", &out); code != 200 || len(out.Rows) == 0 || len(out.Rows) > 500 {
		t.Fatalf("audit: %d, %d rows", code, len(out.Rows))
	}
	for _, r := range out.Rows {
		if r.Principal != "alice" {
			t.Fatalf("alice's audit view has a row of %q", r.Principal)
		}
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.HeapInuse
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
		}
	}()
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			c := newUIClient(t, base)
			c.signIn(uiTokens["alice"])
			c.getJSON("/ui/api/audit", nil)
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	grew := int64(peak.Load()) - int64(before)
	t.Logf("6 audit reads of a %d MiB log at once: the heap grew by %.1f MiB at its peak", 24, mib(grew))
	if grew > 32<<20 {
		t.Errorf("6 audit reads of a 24 MiB log at once grew the heap by %.1f MiB; want each read to keep only its rows", mib(grew))
	}
}

// TestAttackUIHistoryAfterEnd: a session's history is dropped at its end,
// but a call that had found the session just before (export_notebook, or
// a cell that starts as the session closes) made it anew, for good: the
// ended session stayed in the page's list and in memory, and its bytes
// in its principal's count. A client that races close_session with
// export_notebook piles them up. An ended session's history is never made
// again.
func TestAttackUIHistoryAfterEnd(t *testing.T) {
	u := newUIState(nil, "")
	img := strings.Repeat("I", 1<<20)
	for i := range 50 {
		x := &session{id: "s" + strconv.Itoa(i), principal: "alice"}
		c := u.cellStart(x, "cell_a", "1", "")
		c.end(nil, nil)
		u.forget(x)
		// Late: export_notebook's lookup, and a cell that starts.
		u.history(x).notebook()
		late := u.cellStart(x, "cell_b", "2", "")
		late.add(&uiItem{Kind: "image", Mime: "image/png", Data: img})
		late.end(nil, nil)
	}
	u.mu.Lock()
	kept, counted := len(u.hist), u.bytes["alice"]
	u.mu.Unlock()
	if kept != 0 || counted != 0 {
		t.Errorf("after 50 sessions ended: %d histories kept, %d bytes counted; want none", kept, counted)
	}
	if got := u.histories("alice"); len(got) != 0 {
		t.Errorf("the page lists %d ended sessions", len(got))
	}
}

// TestAttackUIReadFlood: a client of the page asks for a full session's
// notebook and its cells again and again, at once, and reads none of the
// answers: each answer was built whole (the session's history copied,
// its text escaped, the notebook's lines split, and encoded) and held
// while its write waited on the client, with no end. A principal's heavy
// reads (cells, notebook, audit) run two at a time, and a read's write
// has a deadline: the others wait their turn, holding nothing.
func TestAttackUIReadFlood(t *testing.T) {
	srv, base := uiServer(t, nil)
	x := &session{id: "sess_flood", principal: "alice", created: time.Now()}
	line := strings.Repeat("z", 999) + "\n"
	for i := range 60 {
		c := srv.ui.cellStart(x, "cell_"+strconv.Itoa(i), "print('z')", "")
		for range 250 {
			c.output(&ipybox.Output{Stream: "stdout", Text: line})
		}
		c.end(nil, nil)
	}
	t.Cleanup(func() { srv.ui.forget(x) })
	a := newUIClient(t, base)
	a.signIn(uiTokens["alice"])
	u, _ := url.Parse(base + "/ui/api/")
	var cookie string
	for _, k := range a.hc.Jar.Cookies(u) {
		if k.Name == uiCookie {
			cookie = k.Value
		}
	}
	live := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	srv.ui.mu.Lock()
	srv.ui.readDeadline = time.Second
	srv.ui.mu.Unlock()
	before := live()
	host := strings.TrimPrefix(base, "http://")
	for i := range 12 {
		path := "/ui/api/notebook?session=sess_flood"
		if i%2 == 1 {
			path = "/ui/api/cells?session=sess_flood&limit=100"
		}
		conn, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		conn.(*net.TCPConn).SetReadBuffer(4096)
		t.Cleanup(func() { conn.Close() })
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nCookie: %s=%s\r\nX-CSRF-Token: %s\r\n\r\n", path, host, uiCookie, cookie, a.csrf)
	}
	// The heap once the server has built what it builds: grown by less
	// than 1 MiB over a second.
	var peak uint64
	for deadline, still := time.Now().Add(30*time.Second), 0; time.Now().Before(deadline) && still < 4; {
		time.Sleep(250 * time.Millisecond)
		n := live()
		if n > peak+1<<20 {
			peak, still = n, 0
		} else {
			still++
		}
	}
	grew := int64(peak) - int64(before)
	t.Logf("12 reads that read nothing, of a session of %.1f MiB: the heap holds %.1f MiB more", 60*250*1000/float64(1<<20), mib(grew))
	if grew > 160<<20 {
		t.Errorf("12 reads that read nothing hold %.1f MiB of a 14 MiB session; want a principal's reads to take turns", mib(grew))
	}
	// The reads that hold the turns and are not read are cut at the
	// deadline (a second here): alice's own next read gets its turn.
	for i := range 12 {
		if code, _ := a.do("GET", "/ui/api/cells?session=sess_flood&limit=1", "", nil); code == 200 {
			break
		} else if i == 11 {
			t.Errorf("alice's read after the stuck ones: %d", code)
		}
	}
	// Another principal's read does not wait for alice's.
	b := newUIClient(t, base)
	b.signIn(uiTokens["bob"])
	if code, _ := b.do("GET", "/ui/api/cells?session=x", "", nil); code != 404 {
		t.Errorf("bob's read while alice's wait: %d, want 404", code)
	}
}
