package ipybox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// rawPost is kernel code that talks to the tool server directly, as hostile
// code would: it prints "<status> <body>".
const rawPost = `
import http.client, json, os, socket
class _C(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(os.environ["IPYBOX_TOOL_URL"][len("unix://"):])
def raw(path, body=None, token=None, method="POST"):
    c = _C("localhost")
    h = {"Content-Type": "application/json"}
    if token is not None:
        h["Authorization"] = "Bearer " + token
    c.request(method, path, body=None if body is None else json.dumps(body), headers=h)
    r = c.getresponse()
    return r.status, r.read().decode()
TOKEN = os.environ["IPYBOX_TOOL_TOKEN"]
`

func TestAttackToolServerAuth(t *testing.T) {
	t.Parallel()
	ex := start(t, nil)
	register(t, ex, "go", testmcpStdio(t))
	run(t, ex, rawPost)
	for _, tc := range []struct{ code, want string }{
		// No token, a wrong token: 401, and the tool never runs.
		{`raw("/v1/tools/call", {"server": "go", "tool": "tool-1", "args": {"s": "x"}})[0]`, "401"},
		{`raw("/v1/tools/call", {"server": "go", "tool": "tool-1", "args": {"s": "x"}}, token="0" * 64)[0]`, "401"},
		{`raw("/v1/shell/approve", {"command": "id"}, token="wrong")[0]`, "401"},
		// There is no endpoint that approves, registers or configures.
		{`[raw(p, {"approved": True}, token=TOKEN)[0] for p in ("/v1/approve", "/v1/approvals", "/v1/tools/approve", "/v1/servers", "/v1/register", "/v1/config")]`, "[404, 404, 404, 404, 404, 404]"},
	} {
		if got := run(t, ex, tc.code).Text; got != tc.want {
			t.Errorf("%s = %s, want %s", tc.code, got, tc.want)
		}
	}
}

func TestAttackRequestsChooseNothing(t *testing.T) {
	t.Setenv("IPYBOX_TEST_SECRET", "s3cret")
	ex := start(t, &ipybox.Options{NoToolApproval: true})
	register(t, ex, "go", testmcpStdio(t))
	run(t, ex, rawPost)
	marker := filepath.Join(t.TempDir(), "pwned")
	for _, tc := range []struct{ code, want string }{
		// An unregistered server: refused.
		{`raw("/v1/tools/call", {"server": "evil", "tool": "x", "args": {}}, token=TOKEN)[0]`, "404"},
		// A command, URL or headers in the request: rejected, not run.
		{`raw("/v1/tools/call", {"server": "go", "tool": "tool-1", "args": {"s": "x"}, "command": "touch ` + marker + `"}, token=TOKEN)[0]`, "400"},
		{`raw("/v1/tools/call", {"server": "go", "tool": "tool-1", "args": {"s": "x"}, "url": "http://127.0.0.1:1/"}, token=TOKEN)[0]`, "400"},
		{`raw("/v1/tools/call", {"server": "go", "tool": "tool-1", "args": {"s": "x"}, "headers": {"X": "y"}}, token=TOKEN)[0]`, "400"},
		// ${VAR} in arguments is data: never substituted.
		{`json.loads(raw("/v1/tools/call", {"server": "go", "tool": "tool-1", "args": {"s": "${IPYBOX_TEST_SECRET} $(touch ` + marker + `)"}}, token=TOKEN)[1])["content"][0]["text"]`,
			`'tool-1: ${IPYBOX_TEST_SECRET} $(touch ` + marker + `)'`},
		// The server name cannot be a path or a command either.
		{`raw("/v1/tools/call", {"server": "../../bin/sh", "tool": "x", "args": {}}, token=TOKEN)[0]`, "404"},
	} {
		if got := run(t, ex, tc.code).Text; got != tc.want {
			t.Errorf("%s\n = %s, want %s", tc.code, got, tc.want)
		}
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("a command from a request ran: %s exists", marker)
	}
}

func TestAttackThreadOutlivingItsCell(t *testing.T) {
	t.Parallel()
	ex := start(t, nil)
	register(t, ex, "go", testmcpStdio(t))
	// A thread started by one cell calls a tool after the cell ended: no
	// cell is running, so nobody can approve it, and it is rejected. The
	// thread calls once the test says the cell has ended (a file), and says
	// when it has its outcome (another file).
	dir := t.TempDir()
	ended, called := filepath.Join(dir, "ended"), filepath.Join(dir, "called")
	reqs, _, err := collect(t, ex, fmt.Sprintf(`import os, threading, time
from mcptools.go.tool_1 import Params, run
outcome = []
def later():
    deadline = time.monotonic() + 60
    while not os.path.exists(%[1]q) and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        outcome.append(run(Params(s="late")))
    except Exception as e:
        outcome.append(type(e).__name__ + ": " + str(e))
    open(%[2]q, "w").close()
threading.Thread(target=later).start()`, ended, called), nil, nil)
	if err != nil || len(reqs) != 0 {
		t.Fatalf("err %v, requests %v", err, reqs)
	}
	if err := os.WriteFile(ended, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFile(t, called, 60*time.Second)
	got := run(t, ex, "outcome").Text
	if !strings.Contains(got, "ApprovalRejectedError") || !strings.Contains(got, "no cell is running") {
		t.Errorf("late call: %s", got)
	}
}

func TestShellApproval(t *testing.T) {
	t.Parallel()
	// Shell approval on, tool approval off: shell approval still applies.
	ex := start(t, &ipybox.Options{ApproveShellCommands: true, NoToolApproval: true})
	dir := ex.Workspace()
	for _, tc := range []struct {
		name, code, wantCmd, wantText string
	}{
		{"bang", "!echo hi", "echo hi", "hi\r"},
		{"assign", "x = !echo assigned\nprint(x)", "echo assigned", "['assigned']"},
		{"braces expand once", "v = '{w}'\nw = 'SECOND'\n!echo {v}", "echo {w}", "{w}\r"},
		{"dollar expands once", "v = '$w'\nw = 'SECOND'\n!echo $v end", "echo $w end", "end\r"},
		{"in a function's frame", "def f():\n    local = 'frame'\n    return get_ipython().getoutput('echo {local}')\nf()", "echo frame", "['frame']"},
		{"system_raw", "get_ipython().system_raw('echo raw')", "echo raw", "raw"},
		{"bash magic", "%%bash\necho from bash", "%%bash\necho from bash\n", "from bash"},
		{"sh magic with args", "%%sh --no-raise-error\necho from sh", "%%sh --no-raise-error\necho from sh\n", "from sh"},
		{"script magic", "%%script bash\necho from script", "%%script bash\necho from script\n", "from script"},
		{"literal braces", "import os\nos.makedirs('sub', exist_ok=True)\nopen('sub/a.tmp', 'w').close()\n!find sub -name '*.tmp' -exec rm {} \\;\nos.listdir('sub')", "find sub -name '*.tmp' -exec rm {} \\;", "[]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reqs, events, err := collect(t, ex, tc.code, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(reqs) != 1 || reqs[0].Kind != "shell" || reqs[0].Command != tc.wantCmd {
				var cmds []string
				for _, r := range reqs {
					cmds = append(cmds, string(r.Kind)+":"+r.Command)
				}
				t.Fatalf("requests %q, want one shell request %q", cmds, tc.wantCmd)
			}
			if got := strings.TrimSpace(resultText(events)); got != strings.TrimSpace(tc.wantText) {
				t.Errorf("text = %q, want %q", got, tc.wantText)
			}
		})
	}
	// A rejected command does not run, and raises in the cell.
	marker := filepath.Join(dir, "rejected-ran")
	for _, code := range []string{"!touch " + marker, "%%bash\ntouch " + marker, "get_ipython().system_raw('touch " + marker + "')", "x = !touch " + marker} {
		_, _, err := collect(t, ex, code, nil, func(r *ipybox.ApprovalRequest) { r.Reject("no shell today") })
		var pe *ipybox.PythonError
		if !errors.As(err, &pe) || pe.Name != "ApprovalRejectedError" || !strings.Contains(pe.Value, "no shell today") {
			t.Errorf("%q rejected: err = %v", code, err)
		}
		if _, err := os.Stat(marker); !os.IsNotExist(err) {
			t.Fatalf("%q ran although rejected", code)
		}
	}
	// Tool calls still need no approval here.
	register(t, ex, "go", testmcpStdio(t))
	reqs, _, err := collect(t, ex, "from mcptools.go.tool_1 import Params, run\nrun(Params(s='t'))", nil, nil)
	if err != nil || len(reqs) != 0 {
		t.Errorf("tool call with tool approval off: err %v, requests %d", err, len(reqs))
	}
}

func TestShellNotAskedByDefault(t *testing.T) {
	t.Parallel()
	ex := start(t, nil)
	reqs, events, err := collect(t, ex, "!echo free", nil, nil)
	if err != nil || len(reqs) != 0 || strings.TrimSpace(resultText(events)) != "free" {
		t.Errorf("err %v, requests %d, text %q", err, len(reqs), resultText(events))
	}
}

func TestRequireShellEscape(t *testing.T) {
	t.Parallel()
	ex := start(t, &ipybox.Options{RequireShellEscape: true})
	for _, code := range []string{
		"import subprocess\nsubprocess.run(['true'])",
		"import os\nos.system('true')",
		"import os\nos.execv('/bin/true', ['true'])",
		"import os\nos.posix_spawn('/bin/true', ['true'], {})",
		"import pty\npty.spawn('true')",
	} {
		_, err := ex.Execute(context.Background(), code, nil)
		var pe *ipybox.PythonError
		if !errors.As(err, &pe) || pe.Name != "PermissionError" || !strings.Contains(pe.Value, "!cmd") {
			t.Errorf("%q: err = %v, want a PermissionError pointing at !cmd", code, err)
		}
	}
	// The shell escapes still work.
	if got := strings.TrimSpace(run(t, ex, "!echo via-bang").Text); got != "via-bang" {
		t.Errorf("!echo: %q", got)
	}
	if got := strings.TrimSpace(run(t, ex, "%%bash\necho via-bash").Text); got != "via-bash" {
		t.Errorf("%%%%bash: %q", got)
	}
}

func TestAsyncAndConcurrentToolCalls(t *testing.T) {
	t.Parallel()
	ex := start(t, &ipybox.Options{NoToolApproval: true})
	register(t, ex, "go", testmcpStdio(t))
	res := run(t, ex, `import asyncio, time
from concurrent.futures import ThreadPoolExecutor
from mcptools.go import tool_2, tool_1
t0 = time.time()
await asyncio.gather(*[tool_2.run_async(tool_2.Params(delay=0.3)) for _ in range(8)])
async_s = time.time() - t0
with ThreadPoolExecutor(8) as pool:
    outs = list(pool.map(lambda i: tool_1.run(tool_1.Params(s=str(i))), range(8)))
print(async_s < 1.5, outs == ["tool-1: %d" % i for i in range(8)])`)
	if res.Text != "True True" {
		t.Errorf("concurrent calls: %q", res.Text)
	}
}
