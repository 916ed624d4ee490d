package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// tinyPNG is a 1x1 PNG.
const tinyPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

// events opens the page's event stream and returns its events, until t
// ends.
func (c *uiClient) events() <-chan uiEvent {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", c.base+"/ui/api/events?csrf="+url.QueryEscape(c.csrf), nil)
	res, err := c.hc.Do(req)
	if err != nil || res.StatusCode != 200 {
		cancel()
		c.t.Fatalf("events: %v %v", res, err)
	}
	ch := make(chan uiEvent, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			if b, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var ev uiEvent
				json.Unmarshal([]byte(b), &ev)
				select {
				case ch <- ev:
				default:
				}
			}
		}
	}()
	c.t.Cleanup(func() { cancel(); <-done })
	return ch
}

// waitEvent waits for an event that ok accepts.
func waitEvent(t *testing.T, ch <-chan uiEvent, what string, ok func(uiEvent) bool) uiEvent {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case ev := <-ch:
			if ok(ev) {
				return ev
			}
		case <-timeout:
			t.Fatalf("no event: %s", what)
		}
	}
}

// validNotebook checks nb with Debian's nbformat, in the kernels'
// interpreter, and returns how many cells it has.
func validNotebook(t *testing.T, nb []byte) int {
	t.Helper()
	py := testenv.NeedsPython(t)
	if err := exec.Command(py, "-c", "import nbformat").Run(); err != nil {
		testenv.Missing(t, "%s cannot import nbformat (%v); run scripts/setup.sh (python3-nbformat)", py, err)
	}
	p := filepath.Join(t.TempDir(), "nb.ipynb")
	os.WriteFile(p, nb, 0o600)
	out, err := exec.Command(py, "-c", "import nbformat, sys\nnb = nbformat.read(sys.argv[1], as_version=4)\nnbformat.validate(nb)\nprint(len(nb.cells))", p).CombinedOutput()
	if err != nil {
		t.Fatalf("nbformat refuses the notebook: %v\n%s", err, out)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return n
}

// TestUICells is the attack of kernel code through its output, and of
// another principal: a cell prints markup, a bidi override and escape
// sequences, and shows HTML and SVG with scripts and an image. The page
// gets the text escaped (to be set as textContent), HTML and SVG as
// items it shows only in a sandboxed frame, and the image as data; the
// event stream carries each line as it is printed. Bob, signed in, sees
// none of Alice's sessions, cells, events or notebooks. The notebook of
// the page and of export_notebook is valid nbformat 4.
func TestUICells(t *testing.T) {
	_, base := uiServer(t, &Options{Workspace: sharedWorkspace(t)})
	alice := connectHTTPAs(t, base+"/mcp", uiTokens["alice"], legacyVersion, nil)
	bob := connectHTTPAs(t, base+"/mcp", uiTokens["bob"], legacyVersion, nil)
	pa, pb := newUIClient(t, base), newUIClient(t, base)
	pa.signIn(uiTokens["alice"])
	pb.signIn(uiTokens["bob"])
	evA, evB := pa.events(), pb.events()

	code := fmt.Sprintf(`import sys, time, base64
from IPython.display import HTML, SVG, Image, display
print("<script>alert(1)</script><img src=x onerror=alert(2)>", flush=True)
print("a\u202eb\u2066c\x1b[31mred\x1b]52;c;eA==\x07", file=sys.stderr, flush=True)
display(HTML("<b>bold</b><script>parent.document.title='pwned'</script>"))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg"><script>alert(3)</script><circle r="5"/></svg>'))
display(Image(data=base64.b64decode(%q)))
for i in range(3):
    print("line", i, flush=True)
    time.sleep(0.05)
1+1`, tinyPNG)
	run(t, alice, code)
	waitEvent(t, evA, "alice's line", func(ev uiEvent) bool {
		return (ev.T == "append" && strings.Contains(ev.Text, "line 2")) || (ev.T == "item" && ev.Item != nil && strings.Contains(ev.Item.Text, "line 2"))
	})
	end := waitEvent(t, evA, "alice's cell end", func(ev uiEvent) bool { return ev.T == "end" })

	var sessions []uiSessionView
	pa.getJSON("/ui/api/sessions", &sessions)
	if len(sessions) != 1 || sessions[0].ID != end.S {
		t.Fatalf("alice's sessions: %+v", sessions)
	}
	var page struct{ Cells []*uiCellView }
	pa.getJSON("/ui/api/cells?session="+end.S, &page)
	if len(page.Cells) != 1 {
		t.Fatalf("cells: %+v", page)
	}
	kinds := map[string]string{}
	for _, it := range page.Cells[0].Items {
		kinds[it.Kind] += it.Text + it.Data
	}
	if !strings.Contains(kinds["stdout"], "<script>alert(1)</script>") || !strings.Contains(kinds["stdout"], "line 2") {
		t.Errorf("stdout (shown as text): %q", kinds["stdout"])
	}
	for _, hidden := range []string{"\u202e", "\u2066", "\x1b", "\x07"} {
		if strings.Contains(kinds["stderr"], hidden) || strings.Contains(page.Cells[0].Code, hidden) {
			t.Errorf("%q reaches the page unescaped: %q", hidden, kinds["stderr"])
		}
	}
	if !strings.Contains(kinds["stderr"], `\u202e`) || !strings.Contains(kinds["stderr"], `\x1b`) {
		t.Errorf("stderr does not show the escapes: %q", kinds["stderr"])
	}
	if !strings.Contains(kinds["html"], "<script>") || !strings.Contains(kinds["svg"], "<script>") || kinds["image"] != tinyPNG || kinds["result"] != "2" {
		t.Errorf("items: %+v", kinds)
	}

	// Bob: his own cell's events only, and nothing of Alice's.
	run(t, bob, "print('bob was here')")
	ev := waitEvent(t, evB, "bob's cell", func(ev uiEvent) bool { return ev.T == "cell" || ev.S == end.S })
	if ev.S == end.S || !strings.Contains(ev.Cell.Code, "bob was here") {
		t.Errorf("bob's first event: %+v", ev)
	}
	var bs []uiSessionView
	pb.getJSON("/ui/api/sessions", &bs)
	if len(bs) != 1 || bs[0].ID == end.S {
		t.Errorf("bob's sessions: %+v", bs)
	}
	for _, path := range []string{"/ui/api/cells?session=", "/ui/api/notebook?session="} {
		if code, _ := pb.do("GET", path+end.S, "", nil); code != 404 {
			t.Errorf("bob reads %s alice's session: %d, want 404", path, code)
		}
	}

	code2, nb := pa.do("GET", "/ui/api/notebook?session="+end.S, "", nil)
	if code2 != 200 || validNotebook(t, []byte(nb)) != 1 {
		t.Errorf("notebook: %d", code2)
	}
	res := call(t, alice, "export_notebook", map[string]any{})
	b, _ := json.Marshal(res.StructuredContent.(map[string]any)["notebook"])
	if n := validNotebook(t, b); n != 1 || !strings.Contains(string(b), "image/png") {
		t.Errorf("export_notebook: %d cells: %s", n, short(string(b)))
	}
}

// TestUIApprove: a client that cannot be asked leaves the approval to the
// page, which shows the terminal prompt's facts; another principal can
// neither see nor answer it; the page's allow reaches the suspended cell
// at once, its refusal fails the call; the audit rows say web:alice, and
// the audit view filters them.
func TestUIApprove(t *testing.T) {
	pol, _, log := uiPolicy(t)
	_, base := uiServer(t, &Options{Workspace: sharedWorkspace(t), Approvals: ApprovalOptions{Mode: ApprovalElicit, Policy: pol, AuditLog: log},
		Servers: map[string]ipybox.ServerConfig{"elicit_go": {Command: mcptest.Build(t)}}})
	alice := connectHTTPAs(t, base+"/mcp", uiTokens["alice"], legacyVersion, nil)
	pa, pb := newUIClient(t, base), newUIClient(t, base)
	pa.signIn(uiTokens["alice"])
	pb.signIn(uiTokens["bob"])
	evA := pa.events()

	type result struct {
		text string
		err  bool
	}
	runAsync := func(code string) <-chan result {
		ch := make(chan result, 1)
		go func() {
			res, err := alice.CallTool(t.Context(), &mcp.CallToolParams{Name: "execute_ipython_cell", Arguments: map[string]any{"code": code}})
			if err != nil {
				ch <- result{err.Error(), true}
				return
			}
			ch <- result{text(res), res.IsError}
		}()
		return ch
	}
	pending := func() uiPending {
		for {
			waitEvent(t, evA, "an approval", func(ev uiEvent) bool { return ev.T == "approvals" })
			var ps []uiPending
			pa.getJSON("/ui/api/approvals", &ps)
			switch {
			case len(ps) == 1:
				return ps[0]
			case len(ps) > 1:
				t.Fatalf("pending: %+v", ps)
			}
		}
	}

	// A tool call: the time it returns in the kernel is when the answer
	// reached the suspended call.
	done := runAsync("import time\nfrom mcptools.elicit_go.tool_1 import Params, run\nr = run(Params(s='approved-from-web'))\nprint('after', time.time())\nprint(r)")
	p := pending()
	if p.Kind != "tool" || p.Server != "elicit_go" || p.Tool != "tool-1" || !strings.Contains(p.Message, `"s": "approved-from-web"`) || !strings.Contains(p.Why, "no rule matched") {
		t.Errorf("pending approval: %+v", p)
	}
	var bp []uiPending
	pb.getJSON("/ui/api/approvals", &bp)
	if len(bp) != 0 {
		t.Errorf("bob sees alice's approvals: %+v", bp)
	}
	if code, _ := pb.do("POST", "/ui/api/answer", `{"id":"`+p.ID+`","answer":"allow"}`, nil); code != 409 {
		t.Errorf("bob answers alice's approval: %d, want 409", code)
	}
	sent := time.Now()
	if code, body := pa.do("POST", "/ui/api/answer", `{"id":"`+p.ID+`","answer":"allow"}`, nil); code != 204 {
		t.Fatalf("answer: %d %s", code, body)
	}
	r := <-done
	if r.err || !strings.Contains(r.text, "approved-from-web") {
		t.Fatalf("allowed cell: %+v", r)
	}
	_, after, _ := strings.Cut(r.text, "after ")
	after, _, _ = strings.Cut(after, "\n")
	at, _ := strconv.ParseFloat(strings.TrimSpace(after), 64)
	lat := time.Unix(0, int64(at*1e9)).Sub(sent)
	t.Logf("a page answer reached the cell in %v", lat)
	bound := 100 * time.Millisecond
	if testenv.Race {
		bound *= 5 // the race detector slows the host side
	}
	if lat > bound {
		t.Errorf("the answer reached the cell after %v, want < %v", lat, bound)
	}
	// Twice: the first answer won.
	if code, _ := pa.do("POST", "/ui/api/answer", `{"id":"`+p.ID+`","answer":"deny"}`, nil); code != 409 {
		t.Errorf("second answer: %d, want 409", code)
	}

	done = runAsync("!echo refused-cmd")
	p = pending()
	if code, body := pa.do("POST", "/ui/api/answer", `{"id":"`+p.ID+`","answer":"deny"}`, nil); code != 204 {
		t.Fatalf("deny: %d %s", code, body)
	}
	if r := <-done; strings.Contains(r.text, "\nrefused-cmd") || !strings.Contains(r.text, "refused on the web page by alice") {
		t.Errorf("refused cell: %+v", r)
	}

	var audit struct{ Rows []auditRow }
	pa.getJSON("/ui/api/audit", &audit)
	if len(audit.Rows) != 2 || audit.Rows[0].Decision != "deny" || audit.Rows[1].Decision != "allow" || audit.Rows[0].By != "web:alice" || audit.Rows[1].By != "web:alice" || audit.Rows[1].Tool != "tool-1" {
		t.Errorf("audit rows: %+v", audit.Rows)
	}
	pa.getJSON("/ui/api/audit?decision=deny&tool=refused", &audit)
	if len(audit.Rows) != 1 || !strings.Contains(audit.Rows[0].Command, "refused-cmd") {
		t.Errorf("filtered audit rows: %+v", audit.Rows)
	}
	pa.getJSON("/ui/api/audit?session="+p.Session, &audit)
	if len(audit.Rows) != 2 || audit.Rows[0].PageSession != p.Session {
		t.Errorf("audit rows of the page's session %s: %+v", p.Session, audit.Rows)
	}
	pb.getJSON("/ui/api/audit", &audit)
	if len(audit.Rows) != 0 {
		t.Errorf("bob's audit rows: %+v", audit.Rows)
	}
	// A decision no row can hold is named, not answered with no rows.
	if code, body := pa.do("GET", "/ui/api/audit?decision=maybe", "", nil); code != 400 || !strings.Contains(body, `decision "maybe": want one of allow, deny`) {
		t.Errorf("decision=maybe: %d %s", code, body)
	}
}

type auditRow struct {
	Decision, By, Command, Session, Tool string
	PageSession                          string `json:"page_session"`
}

// uiPolicy is an approval policy without rules, with its audit log,
// outside every workspace.
func uiPolicy(t *testing.T) (*ipybox.ApprovalPolicy, string, string) {
	dir := filepath.Join(t.TempDir(), "config")
	os.Mkdir(dir, 0o700)
	file, log := filepath.Join(dir, "approvals.policy"), filepath.Join(dir, "approvals.jsonl")
	os.WriteFile(file, nil, 0o600)
	p, err := ipybox.LoadApprovalPolicy(file, &ipybox.ApprovalPolicyOptions{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, file, log
}

// TestUIFirstAnswerWins: with a client that can be asked, the page and the
// client's elicitation both get the question; the page answers first, the
// cell goes on, the client's elicitation request is withdrawn so that its
// call returns without its answer, and its later answer changes nothing.
func TestUIFirstAnswerWins(t *testing.T) {
	pol, _, log := uiPolicy(t)
	_, base := uiServer(t, &Options{Workspace: sharedWorkspace(t), Approvals: ApprovalOptions{Mode: ApprovalElicit, Policy: pol, AuditLog: log}})
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	alice := connectHTTPAs(t, base+"/mcp", uiTokens["alice"], legacyVersion, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return &mcp.ElicitResult{Action: "decline"}, nil
		},
	})
	pa := newUIClient(t, base)
	pa.signIn(uiTokens["alice"])
	evA := pa.events()
	done := make(chan string, 1)
	go func() {
		res, err := alice.CallTool(t.Context(), &mcp.CallToolParams{Name: "execute_ipython_cell", Arguments: map[string]any{"code": "!echo page-won"}})
		if err != nil {
			done <- err.Error()
			return
		}
		done <- text(res)
	}()
	waitEvent(t, evA, "an approval", func(ev uiEvent) bool { return ev.T == "approvals" })
	var ps []uiPending
	pa.getJSON("/ui/api/approvals", &ps)
	if len(ps) != 1 {
		t.Fatalf("pending: %+v", ps)
	}
	if code, body := pa.do("POST", "/ui/api/answer", `{"id":"`+ps[0].ID+`","answer":"allow"}`, nil); code != 204 {
		t.Fatalf("answer: %d %s", code, body)
	}
	waitEvent(t, evA, "the cell's end", func(ev uiEvent) bool { return ev.T == "end" })
	// The client's question is withdrawn: its call returns without its
	// answer (before, it waited for the client's answer to a question
	// already decided, up to the approval's deadline).
	select {
	case got := <-done:
		if !strings.Contains(got, "page-won") {
			t.Errorf("result: %q", got)
		}
	case <-time.After(30 * time.Second):
		once.Do(func() { close(release) }) // the client declines, too late
		t.Fatalf("the call still waits for the client's answer 30 s after the page answered; then: %q", <-done)
	}
	var audit struct{ Rows []auditRow }
	pa.getJSON("/ui/api/audit", &audit)
	if len(audit.Rows) != 1 || audit.Rows[0].By != "web:alice" || audit.Rows[0].Decision != "allow" {
		t.Errorf("audit: %+v", audit.Rows)
	}
}
