package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/testenv"
)

// rpcError is a JSON-RPC error as a raw client reads it.
type rpcError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

// taskClient speaks raw JSON-RPC to the server, over streamable HTTP at
// 2026-07-28 (each request stands alone, with its capabilities in _meta)
// or over a stdio connection (Serve with an IOTransport on pipes).
type taskClient struct {
	t     *testing.T
	url   string // HTTP
	token string
	caps  map[string]any // the per-request capabilities (HTTP)

	// stdio
	mu      sync.Mutex
	id      int
	in      io.WriteCloser
	replies map[int]chan json.RawMessage
}

// withTasks is client capabilities that declare the Tasks extension.
// noQuick makes every cell of srv's tasks clients a task, however short:
// by default a cell that ends within the quick window is answered plainly
// (TestTaskQuickWindow).
func noQuick(srv *Server) *Server {
	srv.tasks.mu.Lock()
	srv.tasks.quick = 0
	srv.tasks.mu.Unlock()
	return srv
}

func withTasks() map[string]any {
	return map[string]any{"elicitation": map[string]any{}, "extensions": map[string]any{tasksExtension: map[string]any{}}}
}

// httpTaskClient is a 2026-07-28 client of url with token and caps.
func httpTaskClient(t *testing.T, url, token string, caps map[string]any) *taskClient {
	return &taskClient{t: t, url: url, token: token, caps: caps}
}

// stdioTaskClient serves srv on a stdio connection and initializes it at
// 2025-11-25 with caps; the connection ends with t.
func stdioTaskClient(t *testing.T, srv *Server, caps map[string]any) *taskClient {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &taskClient{t: t, in: inW, replies: map[int]chan json.RawMessage{}}
	served := make(chan error, 1)
	go func() {
		served <- srv.Serve(context.Background(), answerAll{&mcp.IOTransport{Reader: inR, Writer: outW}})
		outW.Close()
	}()
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			var m struct {
				ID *int `json:"id"`
			}
			if json.Unmarshal(sc.Bytes(), &m) != nil || m.ID == nil {
				continue
			}
			c.mu.Lock()
			ch := c.replies[*m.ID]
			c.mu.Unlock()
			if ch != nil {
				ch <- bytes.Clone(sc.Bytes())
			}
		}
	}()
	t.Cleanup(func() {
		inW.Close()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Errorf("Serve did not return after stdin closed")
		}
		<-read
	})
	if _, e := c.call("initialize", map[string]any{"protocolVersion": legacyVersion, "capabilities": caps, "clientInfo": map[string]any{"name": "raw", "version": "1"}}, nil); e != nil {
		t.Fatalf("initialize: %+v", e)
	}
	fmt.Fprintln(inW, `{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}`)
	return c
}

// call sends a request and returns its result or its error. hdr adds or
// replaces HTTP headers ("" removes one).
func (c *taskClient) call(method string, params map[string]any, hdr map[string]string) (map[string]any, *rpcError) {
	c.t.Helper()
	c.mu.Lock()
	c.id++
	id := c.id
	c.mu.Unlock()
	if params == nil {
		params = map[string]any{}
	}
	var raw []byte
	if c.url != "" {
		raw = c.post(id, method, params, hdr)
	} else {
		raw = c.send(id, method, params)
	}
	var m struct {
		Result map[string]any `json:"result"`
		Error  *rpcError      `json:"error"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		c.t.Fatalf("%s: reply %q: %v", method, raw, err)
	}
	return m.Result, m.Error
}

func (c *taskClient) send(id int, method string, params map[string]any) []byte {
	ch := make(chan json.RawMessage, 1)
	c.mu.Lock()
	c.replies[id] = ch
	c.mu.Unlock()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if _, err := c.in.Write(append(b, '\n')); err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
	select {
	case r := <-ch:
		return r
	case <-time.After(2 * time.Minute):
		c.t.Fatalf("%s: no reply in 2 minutes", method)
		return nil
	}
}

func (c *taskClient) post(id int, method string, params map[string]any, hdr map[string]string) []byte {
	c.t.Helper()
	meta := map[string]any{
		"io.modelcontextprotocol/protocolVersion":    newVersion,
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": c.caps,
	}
	p := map[string]any{"_meta": meta}
	for k, v := range params {
		p[k] = v
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": p})
	req, _ := http.NewRequestWithContext(c.t.Context(), http.MethodPost, c.url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", newVersion)
	req.Header.Set("Mcp-Method", method)
	switch method {
	case "tools/call":
		req.Header.Set("Mcp-Name", fmt.Sprint(params["name"]))
	case methodTasksGet, methodTasksUpdate, methodTasksCancel:
		req.Header.Set("Mcp-Name", fmt.Sprint(params["taskId"]))
	}
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	ctx, cancel := context.WithTimeout(c.t.Context(), 2*time.Minute)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return b
	}
	for line := range strings.Lines(string(b)) {
		data, ok := strings.CutPrefix(strings.TrimSpace(line), "data:")
		if ok && strings.Contains(data, `"id"`) && (strings.Contains(data, `"result"`) || strings.Contains(data, `"error"`)) {
			return []byte(data)
		}
	}
	c.t.Fatalf("%s: no reply in %q", method, b)
	return nil
}

// tool calls a tool and fails t on a JSON-RPC error.
func (c *taskClient) tool(name string, args map[string]any) map[string]any {
	c.t.Helper()
	res, e := c.call("tools/call", map[string]any{"name": name, "arguments": args}, nil)
	if e != nil {
		c.t.Fatalf("%s: %+v", name, e)
	}
	return res
}

// resultText is the text of a tool result as a raw client reads it.
func resultText(res any) string {
	m, _ := res.(map[string]any)
	var parts []string
	content, _ := m["content"].([]any)
	for _, c := range content {
		if cm, _ := c.(map[string]any); cm["type"] == "text" {
			parts = append(parts, fmt.Sprint(cm["text"]))
		}
	}
	return strings.Join(parts, "\n")
}

// newTask runs code as a task and checks the CreateTaskResult.
func (c *taskClient) newTask(session, code string) string {
	c.t.Helper()
	res := c.tool("execute_ipython_cell", map[string]any{"code": code, "session": session})
	id, _ := res["taskId"].(string)
	if res["resultType"] != "task" || id == "" {
		c.t.Fatalf("not a CreateTaskResult: %v", res)
	}
	for _, k := range []string{"result", "error", "inputRequests", "task", "ttl", "pollInterval", "requestState"} {
		if _, ok := res[k]; ok {
			c.t.Errorf("CreateTaskResult has %q: %v", k, res)
		}
	}
	for _, k := range []string{"createdAt", "lastUpdatedAt"} {
		if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(res[k])); err != nil {
			c.t.Errorf("%s: %v", k, err)
		}
	}
	for _, k := range []string{"ttlMs", "pollIntervalMs"} {
		if f, ok := res[k].(float64); !ok || f <= 0 || f != float64(int64(f)) {
			c.t.Errorf("%s = %v, want a positive integer", k, res[k])
		}
	}
	return id
}

// get is tasks/get, failing t on an error.
func (c *taskClient) get(id string) map[string]any {
	c.t.Helper()
	res, e := c.call(methodTasksGet, map[string]any{"taskId": id}, nil)
	if e != nil {
		c.t.Fatalf("tasks/get: %+v", e)
	}
	if res["resultType"] != "complete" || res["taskId"] != id {
		c.t.Errorf("tasks/get: %v", res)
	}
	return res
}

// await polls tasks/get until the task's status is one of want, or
// terminal.
func (c *taskClient) await(id string, want ...string) map[string]any {
	c.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		res := c.get(id)
		st := fmt.Sprint(res["status"])
		if st == "completed" || st == "cancelled" || st == "failed" || strings.Contains(strings.Join(want, " "), st) {
			return res
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("task %s still %s after 2 minutes: %v", id, st, res)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTasks: a 2026-07-28 client over HTTP and a 2025-11-25 client over
// stdio that declare the Tasks extension get a task for a cell; tasks/get
// shows it working with its output so far, then completed with the
// result inlined, again and again; tasks/cancel interrupts a cell and the
// kernel keeps its state; the removed methods are -32601, an unknown
// taskId -32602, a client that did not declare the extension -32021, and a
// client that did not declare it gets plain results. No goroutine is left.
func TestTasks(t *testing.T) {
	testenv.CheckGoroutines(t)
	for _, transport := range []string{"http", "stdio"} {
		t.Run(transport, func(t *testing.T) {
			srv := noQuick(newServer(t, &Options{Workspace: sharedWorkspace(t)}))
			var c, plain *taskClient
			h := ""
			if transport == "http" {
				url := serveHTTP(t, srv)
				c = httpTaskClient(t, url, testToken, withTasks())
				plain = httpTaskClient(t, url, testToken, map[string]any{})
				var out struct{ Session string }
				b, _ := json.Marshal(c.tool("create_session", map[string]any{})["structuredContent"])
				json.Unmarshal(b, &out)
				h = out.Session
				disc, e := c.call("server/discover", nil, nil)
				ext, _ := disc["capabilities"].(map[string]any)["extensions"].(map[string]any)
				if e != nil || ext[tasksExtension] == nil {
					t.Errorf("server/discover does not declare the extension: %v %+v", disc, e)
				}
			} else {
				c = stdioTaskClient(t, srv, withTasks())
				plain = stdioTaskClient(t, srv, map[string]any{})
			}
			id := c.newTask(h, "x = 41\nimport time; time.sleep(1)")
			// The session runs one cell at a time: a call meanwhile says
			// which task runs.
			if res := c.tool("execute_ipython_cell", map[string]any{"code": "1", "session": h}); res["isError"] != true || !strings.Contains(resultText(res), "runs as task "+id) {
				t.Errorf("a call while a task runs: %v", res)
			}
			c.await(id)
			code := "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.3)\nx += 1\nprint('x is', x)"
			id = c.newTask(h, code)
			first := c.get(id)
			if first["status"] != "working" || first["result"] != nil {
				t.Errorf("a running task: %v", first)
			}
			done := c.await(id)
			if done["status"] != "completed" || !strings.Contains(resultText(done["result"]), "tick 2\nx is 42") {
				t.Fatalf("completed task: %v", done)
			}
			// Nothing lost: the result stays.
			if again := c.get(id); resultText(again["result"]) != resultText(done["result"]) {
				t.Errorf("the second tasks/get: %v", again)
			}

			// tasks/cancel interrupts; the kernel keeps x.
			id = c.newTask(h, "x += 1\nprint('sleeping', flush=True)\nimport time; time.sleep(120)")
			// Cancel once the cell has run x += 1 ("working" is its
			// status from the start, before its code runs).
			for deadline := time.Now().Add(60 * time.Second); !strings.Contains(fmt.Sprint(c.get(id)["statusMessage"]), "sleeping"); {
				if time.Now().After(deadline) {
					t.Fatalf("the task printed nothing in 60 s: %v", c.get(id))
				}
				time.Sleep(20 * time.Millisecond) // polling tasks/get, as a client does
			}
			ack, e := c.call(methodTasksCancel, map[string]any{"taskId": id}, nil)
			if e != nil || ack["resultType"] != "complete" {
				t.Errorf("cancel ack: %v %+v", ack, e)
			}
			for k := range ack {
				if k != "resultType" && k != "_meta" {
					t.Errorf("cancel ack has %q: %v", k, ack)
				}
			}
			start := time.Now()
			res := c.await(id, "cancelled")
			if res["status"] != "cancelled" || !strings.Contains(fmt.Sprint(res["statusMessage"]), "interrupted by tasks/cancel") {
				t.Errorf("cancelled task: %v", res)
			}
			if time.Since(start) > 60*time.Second {
				t.Errorf("the cancel took %v", time.Since(start))
			}
			if ack, e := c.call(methodTasksCancel, map[string]any{"taskId": id}, nil); e != nil || ack["resultType"] != "complete" {
				t.Errorf("a second cancel: %v %+v", ack, e)
			}
			id = c.newTask(h, "print('x is', x)")
			if res := c.await(id); !strings.Contains(resultText(res["result"]), "x is 43") {
				t.Errorf("after the cancel: %v", res)
			}

			// A failing cell is completed with isError.
			id = c.newTask(h, "1/0")
			if res := c.await(id); res["status"] != "completed" || res["result"].(map[string]any)["isError"] != true {
				t.Errorf("failing cell: %v", res)
			}

			for _, m := range []string{"tasks/result", "tasks/list"} {
				if _, e := c.call(m, map[string]any{"taskId": id}, nil); e == nil || e.Code != -32601 {
					t.Errorf("%s: %+v, want -32601", m, e)
				}
			}
			if _, e := c.call(methodTasksGet, map[string]any{"taskId": "task_nonexistent"}, nil); e == nil || e.Code != -32602 {
				t.Errorf("unknown taskId: %+v", e)
			}
			for _, m := range []string{methodTasksGet, methodTasksUpdate, methodTasksCancel} {
				_, e := plain.call(m, map[string]any{"taskId": id, "inputResponses": map[string]any{}}, nil)
				if e == nil || e.Code != -32021 || !strings.Contains(string(e.Data), `"requiredCapabilities":{"extensions":{"io.modelcontextprotocol/tasks"`) {
					t.Errorf("%s without the extension: %+v", m, e)
				}
			}
			if res := plain.tool("execute_ipython_cell", map[string]any{"code": "print(6*7)", "session": h}); res["taskId"] != nil || resultText(res) != "42" {
				t.Errorf("a client without the extension: %v", res)
			}
			if transport == "http" {
				if _, e := c.call(methodTasksGet, map[string]any{"taskId": id}, map[string]string{"Mcp-Name": "task_other"}); e == nil || e.Code != -32020 {
					t.Errorf("Mcp-Name mismatch: %+v", e)
				}
			} else {
				// The per-request opt-in, on a connection without it.
				res, e := plain.call("tools/call", map[string]any{"name": "execute_ipython_cell", "arguments": map[string]any{"code": "print(6*7 + 2)"},
					"_meta": map[string]any{mcp.MetaKeyClientCapabilities: withTasks()}}, nil)
				if e != nil || res["resultType"] != "task" {
					t.Fatalf("per-request opt-in: %v %+v", res, e)
				}
				// Another connection of the same principal reaches it.
				if res := c.await(res["taskId"].(string)); !strings.Contains(resultText(res["result"]), "44") {
					t.Errorf("per-request opt-in: %v", res)
				}
			}
		})
	}
}

// TestTasksApprovalAsInputRequired: a task's cell that reaches a call
// needing approval makes the task input_required, with the question as an
// elicitation/create input request; answers to keys that are not open are
// ignored; tasks/update with the answer resumes the cell, whose next
// approval has a new key; the result has what the approved calls did.
func TestTasksApprovalAsInputRequired(t *testing.T) {
	t.Parallel()
	_, url := elicitServer(t, &Options{})
	c := httpTaskClient(t, url, testToken, withTasks())
	var out struct{ Session string }
	b, _ := json.Marshal(c.tool("create_session", map[string]any{})["structuredContent"])
	json.Unmarshal(b, &out)
	id := c.newTask(out.Session, "from mcptools.ap.tool_1 import Params, run\nprint('before', flush=True)\nprint(run(Params(s='one')))\n!echo two")
	var seen []string
	for _, want := range []string{`"s": "one"`, "echo two"} {
		res := c.await(id, "input_required")
		reqs, _ := res["inputRequests"].(map[string]any)
		if res["status"] != "input_required" || len(reqs) != 1 {
			t.Fatalf("want one approval open: %v", res)
		}
		for key, r := range reqs {
			rm := r.(map[string]any)
			msg := fmt.Sprint(rm["params"].(map[string]any)["message"])
			if rm["method"] != "elicitation/create" || !strings.Contains(msg, want) {
				t.Errorf("input request %s: %v, want %q in its message", key, rm, want)
			}
			if strings.Contains(strings.Join(seen, " "), key) {
				t.Errorf("key %s used twice", key)
			}
			seen = append(seen, key)
			// An answer to a key that is not open is ignored.
			ack, e := c.call(methodTasksUpdate, map[string]any{"taskId": id, "inputResponses": map[string]any{"approval-99": map[string]any{"action": "accept", "content": map[string]any{}}, "junk": map[string]any{"ignored": true}}}, nil)
			if e != nil || ack["resultType"] != "complete" {
				t.Fatalf("tasks/update: %v %+v", ack, e)
			}
			if again := c.get(id); again["status"] != "input_required" || again["inputRequests"].(map[string]any)[key] == nil {
				t.Errorf("after an answer to no open key: %v", again)
			}
			ack, e = c.call(methodTasksUpdate, map[string]any{"taskId": id, "inputResponses": map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{}}}}, nil)
			if e != nil || ack["resultType"] != "complete" {
				t.Fatalf("tasks/update: %v %+v", ack, e)
			}
			if again := c.get(id); again["inputRequests"] != nil && again["inputRequests"].(map[string]any)[key] != nil {
				t.Errorf("the answered key is still open: %v", again)
			}
		}
	}
	res := c.await(id)
	if got := resultText(res["result"]); res["status"] != "completed" || got != "before\ntool-1: one\ntwo" {
		t.Errorf("result: %v", res)
	}
}

// TestAttackOtherPrincipalsTasks: Bob, holding Alice's taskId (it leaked
// through a transcript), tries tasks/get, tasks/update and tasks/cancel
// with it and with variants of it: each answers as for a taskId that
// never existed, and Alice's task runs on, uncancelled, to its result.
// The cap on tasks is per principal: Alice at hers does not stop Bob.
func TestAttackOtherPrincipalsTasks(t *testing.T) {
	t.Parallel()
	const aliceTok, bobTok = "alice-token-0123456789", "bob-token-0123456789"
	srv := noQuick(newServer(t, &Options{Workspace: sharedWorkspace(t), HTTP: HTTPOptions{Principals: map[string]string{"alice": aliceTok, "bob": bobTok}}}))
	url := serveHTTP(t, srv)
	alice := httpTaskClient(t, url, aliceTok, withTasks())
	bob := httpTaskClient(t, url, bobTok, withTasks())
	session := func(c *taskClient) string {
		var out struct{ Session string }
		b, _ := json.Marshal(c.tool("create_session", map[string]any{})["structuredContent"])
		json.Unmarshal(b, &out)
		return out.Session
	}
	ha := session(alice)
	id := alice.newTask(ha, "import time\nfor i in range(20):\n    time.sleep(0.1)\nprint('alice done')")
	unknown := func(e *rpcError, probe string) string {
		if e == nil {
			return "<answered>"
		}
		return fmt.Sprint(e.Code, strings.ReplaceAll(e.Message, fmt.Sprintf("%q", probe), "ID"))
	}
	_, never := bob.call(methodTasksGet, map[string]any{"taskId": "task_" + strings.Repeat("z", 26)}, nil)
	want := unknown(never, "task_"+strings.Repeat("z", 26))
	if never == nil || never.Code != -32602 {
		t.Fatalf("unknown taskId: %+v", never)
	}
	for _, probe := range []string{id, " " + id, strings.ToUpper(id), id + "x", id[:len(id)-1]} {
		for _, m := range []string{methodTasksGet, methodTasksUpdate, methodTasksCancel} {
			res, e := bob.call(m, map[string]any{"taskId": probe, "inputResponses": map[string]any{"approval-1": map[string]any{"action": "accept"}}}, map[string]string{"Mcp-Name": strings.TrimSpace(probe)})
			if strings.TrimSpace(probe) != probe {
				// HTTP trims the header, not the body: a header mismatch.
				if e == nil || e.Code != -32020 {
					t.Errorf("bob's %s(%q): %v %+v, want -32020", m, probe, res, e)
				}
				continue
			}
			if got := unknown(e, probe); got != want {
				t.Errorf("bob's %s(%q): %v %q, want %q", m, probe, res, got, want)
			}
		}
	}
	if res := alice.await(id); res["status"] != "completed" || !strings.Contains(resultText(res["result"]), "alice done") {
		t.Errorf("alice's task after bob's tries: %v", res)
	}

	srv.tasks.mu.Lock()
	srv.tasks.max = 1
	srv.tasks.mu.Unlock()
	res := alice.tool("execute_ipython_cell", map[string]any{"code": "print('over')", "session": ha})
	// Past her cap, her call makes no task and runs as without the
	// extension, saying why.
	if txt := resultText(res); res["isError"] == true || res["taskId"] != nil || !strings.Contains(txt, "over") || !strings.Contains(txt, "you have 1 tasks (0 running), the most ipybox mcp keeps for one token") {
		t.Errorf("alice past the cap: %v", res)
	}
	if id := bob.newTask(session(bob), "print('bob')"); !strings.Contains(resultText(bob.await(id)["result"]), "bob") {
		t.Errorf("bob's task")
	}
}

// TestTasksExpire: a finished task is kept for its keep time, which its
// ttlMs says, then forgotten.
func TestTasksExpire(t *testing.T) {
	t.Parallel()
	srv := noQuick(newServer(t, &Options{Workspace: sharedWorkspace(t)}))
	srv.tasks.mu.Lock()
	srv.tasks.keep = 2 * time.Second
	srv.tasks.mu.Unlock()
	c := stdioTaskClient(t, srv, withTasks())
	id := c.newTask("", "print(1)")
	res := c.await(id)
	created, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(res["createdAt"]))
	ttl := time.Duration(res["ttlMs"].(float64)) * time.Millisecond
	if ttl < 2*time.Second || ttl > time.Minute {
		t.Errorf("ttlMs of a finished task kept 2s: %v", ttl)
	}
	time.Sleep(time.Until(created.Add(ttl)) + 100*time.Millisecond)
	if _, e := c.call(methodTasksGet, map[string]any{"taskId": id}, nil); e == nil || e.Code != -32602 {
		t.Errorf("tasks/get after the ttl: %+v", e)
	}
	if n := srv.tasks.count(); n != 0 {
		t.Errorf("%d tasks kept after their ttl", n)
	}
}

// TestTaskQuickWindow: a client that declares the extension (as the MCP
// Inspector does by default, in every request) gets a cell that ends
// within the quick window as a plain result, with no task kept; a longer
// one as a task whose result comes through tasks/get (an approval asked
// within the window makes a task at once: TestTasksApprovalAsInputRequired).
func TestTaskQuickWindow(t *testing.T) {
	t.Parallel()
	srv := newServer(t, &Options{Workspace: sharedWorkspace(t)})
	srv.tasks.mu.Lock()
	srv.tasks.quick = time.Second
	srv.tasks.mu.Unlock()
	c := stdioTaskClient(t, srv, withTasks())
	res := c.tool("execute_ipython_cell", map[string]any{"code": "print(6 * 7)"})
	if res["taskId"] != nil || res["resultType"] == "task" || resultText(res) != "42" {
		t.Errorf("a quick cell of a declaring client: %v, want the plain result 42", res)
	}
	if n := srv.tasks.count(); n != 0 {
		t.Errorf("%d tasks kept for a quick cell", n)
	}
	id := c.newTask("", "import time\ntime.sleep(3)\nprint('slow')")
	if done := c.await(id); done["status"] != "completed" || !strings.Contains(resultText(done["result"]), "slow") {
		t.Errorf("a slow cell's task: %v", done)
	}
}
