package mcpserver

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv"
)

// spillPath finds the file a result's text names for the whole output.
var spillPath = regexp.MustCompile(`is in (ipybox-outputs/\S+) in the workspace`)

// checkSpill runs a cell in session h that reads file and reports whether
// it holds exactly the lines "line 0" to "line n-1".
func checkSpill(t *testing.T, c *taskClient, h, text string, n int) {
	t.Helper()
	m := spillPath.FindStringSubmatch(text)
	if m == nil {
		t.Errorf("no file with the whole output named in %q", clipN(text, 2000))
		return
	}
	id := c.newTask(h, fmt.Sprintf("L = open(%q).read().splitlines()\nprint(len(L), L == [f'line {i}' for i in range(%d)])", m[1], n))
	if got := resultText(c.await(id)["result"]); got != fmt.Sprintf("%d True", n) {
		t.Errorf("%s holds: %q, want every line", m[1], got)
	}
}

// TestTaskOutputNeverDropped: a task's output is not streamed to its
// client, so what the result cannot show goes to a file: every line a
// task printed, before its CreateTaskResult, between two polls and after
// the last, is in the completed result or in the file it names, and a
// cancelled task's statusMessage names the file too. tasks/get shows the
// latest output while the cell runs. (Before, output of up to 64 KiB past
// max_output_chars was cut from the middle, and a cancelled task's
// message was clipped to 4000 bytes, past the file's name.)
func TestTaskOutputNeverDropped(t *testing.T) {
	testenv.CheckGoroutines(t)
	srv := noQuick(newServer(t, &Options{Workspace: sharedWorkspace(t)}))
	c := httpTaskClient(t, serveHTTP(t, srv), testToken, withTasks())
	var out struct{ Session string }
	b, _ := json.Marshal(c.tool("create_session", map[string]any{})["structuredContent"])
	json.Unmarshal(b, &out)
	h := out.Session

	const n = 3000
	code := fmt.Sprintf("import time\nfor i in range(%d):\n    print(f'line {i}', flush=True)\n    if i %% 1000 == 999: time.sleep(1)", n)
	id := c.newTask(h, code)
	deadline := time.Now().Add(2 * time.Minute)
	sawWorking := false
	for {
		res := c.get(id)
		if res["status"] != "working" {
			break
		}
		if msg := fmt.Sprint(res["statusMessage"]); regexp.MustCompile(`its latest output: (\.\.\.)?[\s\S]*line \d+\n$`).MatchString(msg) {
			sawWorking = true
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s still runs after 2 minutes", id)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !sawWorking {
		t.Errorf("no tasks/get of the running cell showed its latest output")
	}
	done := c.await(id)
	text := resultText(done["result"])
	if done["status"] != "completed" || !strings.Contains(text, "line 0\nline 1\n") || !strings.HasSuffix(text, fmt.Sprintf("line %d", n-1)) {
		t.Fatalf("completed task: %v: %q", done["status"], lastChars(text, 400))
	}
	checkSpill(t, c, h, text, n)

	// Cancelled: the output so far is in the file its message names.
	id = c.newTask(h, fmt.Sprintf("for i in range(%d):\n    print(f'line {i}', flush=True)\nimport time; time.sleep(120)", n))
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if res := c.get(id); strings.Contains(fmt.Sprint(res["statusMessage"]), fmt.Sprintf("line %d\n", n-1)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s printed no line %d in 2 minutes", id, n-1)
		}
	}
	if _, e := c.call(methodTasksCancel, map[string]any{"taskId": id}, nil); e != nil {
		t.Fatalf("tasks/cancel: %+v", e)
	}
	res := c.await(id, "cancelled")
	msg := fmt.Sprint(res["statusMessage"])
	if res["status"] != "cancelled" || !strings.Contains(msg, "interrupted by tasks/cancel") {
		t.Fatalf("cancelled task: %v", clipN(fmt.Sprint(res), 3000))
	}
	checkSpill(t, c, h, msg, n)
}

// TestTaskOutlivesItsConnection: a stdio connection whose implicit
// session runs a task's cell ends (its client went away); the cell runs
// on to its end, another connection of the same principal gets its
// result with tasks/get, and the session ends with the cell. (Before, the
// session ended with the connection, and the cell with it.)
func TestTaskOutlivesItsConnection(t *testing.T) {
	testenv.CheckGoroutines(t)
	srv := noQuick(newServer(t, &Options{Workspace: sharedWorkspace(t)}))
	a := stdioTaskClient(t, srv, withTasks())
	// The kernel starts with the first cell; the task's cell then runs
	// for a few seconds.
	if id := a.newTask("", "x = 1"); a.await(id)["status"] != "completed" {
		t.Fatalf("first task")
	}
	id := a.newTask("", "print('started', flush=True)\nimport time; time.sleep(3)\nprint('survived', x + 1)")
	a.await(id, "working")
	a.in.Close() // the client goes away

	b := stdioTaskClient(t, srv, withTasks())
	res := b.await(id)
	if got := resultText(res["result"]); res["status"] != "completed" || got != "started\nsurvived 2" {
		t.Fatalf("the task of a connection that ended: %v", res)
	}
	// The session ended with its cell: no kernel is left behind.
	for deadline := time.Now().Add(30 * time.Second); len(srv.sessions.store.all()) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions left 30s after the task's cell ended", len(srv.sessions.store.all()))
		}
	}
}
