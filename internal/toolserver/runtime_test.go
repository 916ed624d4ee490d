package toolserver_test

// Tests of the kernel-side runtime (internal/pyruntime/ipybox_runtime)
// against a real Server: each case runs a real Python interpreter as a
// plain process. Tier 3 for the Python side; the Caller is a fake because
// these tests are about the runtime and the wire, not about MCP.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/testenv"
	"github.com/ipybox/ipybox/internal/toolserver"
)

// pngPixel is a 1x1 PNG.
var pngPixel = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\xcf\xc0\xf0\x1f\x00\x05\x00\x01\xff\x89\x99=\x1d\x00\x00\x00\x00IEND\xaeB`\x82")

// pythons returns the interpreters to test the runtime with: every python3
// on PATH (the pyenv one has pydantic 2) and /usr/bin/python3 (Debian's,
// with pydantic 1 and IPython). The runtime is stdlib only, so ipykernel
// is not required.
func pythons(t *testing.T) []string {
	t.Helper()
	if testing.Short() {
		t.Skip("tier 3 test: skipped with -short")
	}
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if p == "" || seen[p] {
			return
		}
		if _, err := os.Stat(p); err != nil {
			return
		}
		seen[p] = true
		out = append(out, p)
	}
	if p, err := exec.LookPath("python3"); err == nil {
		add(p)
	}
	add("/usr/bin/python3")
	if len(out) == 0 {
		testenv.Missing(t, "python3 (to test ipybox_runtime)")
	}
	return out
}

// barrier releases its waiters once n have arrived, proving that n calls
// are in flight at the same time.
type barrier struct {
	mu      sync.Mutex
	arrived map[string]int
	release map[string]chan struct{}
}

func (b *barrier) wait(ctx context.Context, group string, n int) error {
	b.mu.Lock()
	if b.release == nil {
		b.arrived, b.release = map[string]int{}, map[string]chan struct{}{}
	}
	ch := b.release[group]
	if ch == nil {
		ch = make(chan struct{})
		b.release[group] = ch
	}
	b.arrived[group]++
	if b.arrived[group] == n {
		close(ch)
	}
	b.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return errors.New("barrier: not all calls arrived; calls are not concurrent")
	case <-time.After(20 * time.Second):
		return errors.New("barrier: not all calls arrived within 20s; calls are not concurrent")
	}
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// runtimeCaller implements the tools the Python cases call.
func runtimeCaller(b *barrier, seen *sync.Map) toolserver.Caller {
	return &fakeCaller{fn: func(ctx context.Context, server, tool string, args map[string]any) (*mcp.CallToolResult, error) {
		if server != "srv" {
			return nil, fmt.Errorf("%w: %q", toolserver.ErrUnknownServer, server)
		}
		seen.Store(tool, args)
		switch tool {
		case "echo":
			bs, err := json.Marshal(args)
			return text(string(bs)), err
		case "two_texts":
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a"}, &mcp.TextContent{Text: "b"}}}, nil
		case "empty":
			return &mcp.CallToolResult{}, nil
		case "image":
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "a pixel"},
				&mcp.ImageContent{Data: pngPixel, MIMEType: "image/png"},
				&mcp.AudioContent{Data: []byte("RIFF"), MIMEType: "audio/wav"},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///r.txt", MIMEType: "text/plain", Text: "res text"}},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///r.bin", Blob: []byte{0, 1, 2}}},
				&mcp.ResourceLink{URI: "file:///link", Name: "link"},
			}}, nil
		case "structured":
			return &mcp.CallToolResult{
				Content:           []mcp.Content{&mcp.TextContent{Text: `{"name":"x","inner":{"count":2}}`}},
				StructuredContent: map[string]any{"name": "x", "inner": map[string]any{"count": 2}},
			}, nil
		case "structured_only":
			return &mcp.CallToolResult{StructuredContent: map[string]any{"n": 1}}, nil
		case "fail":
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{
				&mcp.TextContent{Text: "fail: bad input"},
				&mcp.ImageContent{Data: pngPixel, MIMEType: "image/png"},
			}}, nil
		case "boom":
			return nil, errors.New("connection to server lost")
		case "slow":
			select {
			case <-time.After(300 * time.Millisecond):
				return text("slow done"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case "barrier":
			n, _ := args["n"].(json.Number).Int64()
			if err := b.wait(ctx, fmt.Sprint(args["group"]), int(n)); err != nil {
				return nil, err
			}
			return text("released"), nil
		}
		return nil, fmt.Errorf("no tool %q", tool)
	}}
}

// runtimeApprover rejects tool calls whose args say so, and approves only
// shell commands that start with "echo".
type runtimeApprover struct {
	mu    sync.Mutex
	shell []string
}

func (a *runtimeApprover) ApproveTool(ctx context.Context, c *toolserver.ToolCall) error {
	var args struct {
		Reject          bool `json:"reject"`
		ApprovalTimeout bool `json:"approval_timeout"`
	}
	json.Unmarshal(c.Args, &args) // fields it does not name are not decoded
	switch {
	case args.Reject:
		return &toolserver.RejectedError{Reason: "not allowed today"}
	case args.ApprovalTimeout:
		return toolserver.ErrApprovalTimeout
	}
	return nil
}

func (a *runtimeApprover) ApproveShell(ctx context.Context, command string) error {
	a.mu.Lock()
	a.shell = append(a.shell, command)
	a.mu.Unlock()
	if strings.HasPrefix(command, "echo") {
		return nil
	}
	if strings.HasPrefix(command, "sleep") {
		return toolserver.ErrApprovalTimeout
	}
	return &toolserver.RejectedError{Reason: "no " + strings.Fields(command)[0]}
}

const pyPrelude = `
import asyncio, json, os, sys, threading, time
from ipybox_runtime import *
import ipybox_runtime
def show(fn):
    try:
        r = fn()
    except ToolRunnerError as e:
        print(type(e).__name__, "|", [c.__name__ for c in type(e).__mro__ if c.__name__.endswith("Error")][1:3], "|", e.kind, e.status, "|", e)
    else:
        print(type(r).__name__, "|", r)
`

func TestRuntime(t *testing.T) {
	pys := pythons(t)
	testenv.CheckGoroutines(t)
	var b barrier
	var seen sync.Map
	ap := &runtimeApprover{}
	ts := start(t, runtimeCaller(&b, &seen), &toolserver.Options{Approver: ap})
	pkg := filepath.Join(testenv.RepoRoot(t), "internal", "pyruntime")
	tmp := t.TempDir()

	for _, tc := range []struct {
		name  string
		code  string
		want  string // exact stdout, trailing space trimmed
		tcp   bool   // use the loopback listener
		token string // override the token; "" keeps the right one
		noEnv bool   // run without the tool server variables
	}{
		{name: "text", code: `show(lambda: run_tool("srv", "echo", {"path": "${HOME}", "n": 9007199254740993}))`,
			want: `str | {"n":9007199254740993,"path":"${HOME}"}`},
		{name: "text over tcp", tcp: true, code: `show(lambda: run_tool("srv", "echo", {"a": "é✓"}))`,
			want: `str | {"a":"é✓"}`},
		{name: "pydantic params by alias and result_type", code: `
from pydantic import BaseModel, Field
class Params(BaseModel):
    from_: str = Field(alias="from")
    limit: int = 3
class Inner(BaseModel):
    count: int
class Result(BaseModel):
    name: str
    inner: Inner
show(lambda: run_tool("srv", "echo", Params(**{"from": "${HOME}"})))
r = run_tool("srv", "structured", {}, Result)
print(type(r).__name__, r.name, r.inner.count)
`,
			want: `str | {"from":"${HOME}","limit":3}` + "\nResult x 2"},
		{name: "no params", code: `show(lambda: run_tool("srv", "echo"))`, want: `str | {}`},
		{name: "texts joined", code: `show(lambda: run_tool("srv", "two_texts", {}))`, want: "str | a\nb"},
		{name: "empty result", code: `print(repr(run_tool("srv", "empty", {})))`, want: `''`},
		{name: "structured without result_type is the text",
			code: `show(lambda: run_tool("srv", "structured", {}))`, want: `str | {"name":"x","inner":{"count":2}}`},
		{name: "structured only", code: `show(lambda: run_tool("srv", "structured_only", {}))`, want: `dict | {'n': 1}`},
		{name: "mixed result keeps everything", code: `
r = run_tool("srv", "image", {})
print(type(r).__name__, r)
print(repr(r.text), len(r.content))
img = r.images[0]
print(img.mime_type, img.data == bytes.fromhex(sys.argv[1]), img)
p = img.save(os.path.join(sys.argv[2], "pixel.png"))
print(open(p, "rb").read() == img.data)
print(r.audio[0].mime_type, r.audio[0].data)
print([(x.uri, x.text, x.blob, x.is_link) for x in r.resources])
print(img._repr_png_() == img.data, img._repr_jpeg_())
b = img._repr_mimebundle_()
print(sorted(b), b["image/png"] == __import__("base64").b64encode(img.data).decode())
`, want: `ToolResult <ToolResult text=7 chars, images=1, audio=1, resources=3>
'a pixel' 6
image/png True <Image image/png, 70 bytes>
True
audio/wav b'RIFF'
[('file:///r.txt', 'res text', None, False), ('file:///r.bin', None, b'\x00\x01\x02', False), ('file:///link', None, None, True)]
True None
['image/png', 'text/plain'] True`},
		{name: "tool error", code: `
try:
    run_tool("srv", "fail", {})
except ToolError as e:
    print(e, "|", e.kind, "|", len(e.result.images), isinstance(e, ToolRunnerError))`,
			want: `fail: bad input | tool_error | 1 True`},
		{name: "call failed", code: `show(lambda: run_tool("srv", "boom", {}))`,
			want: `ToolError | ['ToolRunnerError'] | tool_error 502 | tool call srv.boom failed: connection to server lost`},
		{name: "rejected", code: `show(lambda: run_tool("srv", "echo", {"reject": True}))`,
			want: `ApprovalRejectedError | ['ToolRunnerError'] | rejected 403 | tool call srv.echo rejected by the application: not allowed today`},
		{name: "approval timeout", code: `show(lambda: run_tool("srv", "echo", {"approval_timeout": True}))`,
			want: `ApprovalTimeoutError | ['ToolRunnerError'] | approval_timeout 504 | tool call srv.echo was not approved in time (the host waits up to 5m0s)`},
		{name: "unknown server", code: `show(lambda: run_tool("nope", "echo", {}))`,
			want: `ToolServerError | ['ToolRunnerError'] | unknown_server 404 | unknown MCP server "nope"; register it on the host (the kernel cannot add servers)`},
		{name: "wrong token", token: strings.Repeat("f", 64), code: `show(lambda: run_tool("srv", "echo", {}))`,
			want: `ToolServerError | ['ToolRunnerError'] | unauthorized 401 | missing or wrong token; send Authorization: Bearer $IPYBOX_TOOL_TOKEN`},
		{name: "not configured", noEnv: true, code: `show(lambda: run_tool("srv", "echo", {}))`,
			want: `ToolServerError | ['ToolRunnerError'] | not_configured None | IPYBOX_TOOL_URL and IPYBOX_TOOL_TOKEN not set: this kernel has no tool server (ipybox sets these variables when it starts the kernel)`},
		{name: "server gone", code: `
os.environ["IPYBOX_TOOL_URL"] = "unix://" + os.path.join(sys.argv[2], "missing.sock")
try:
    run_tool("srv", "echo", {})
except ToolServerError as e:
    print(e.kind, e.status)`, want: `unavailable None`},
		{name: "client timeout", code: `show(lambda: run_tool("srv", "slow", {}, timeout=0.05))`,
			want: `ToolServerError | ['ToolRunnerError'] | timeout None | no answer from the tool server within 0.05 s (IPYBOX_TOOL_TIMEOUT)`},
		{name: "async does not block the loop", code: `
async def main():
    ticks = 0
    stop = False
    async def ticker():
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0.01)
    t = asyncio.ensure_future(ticker())
    r = await run_tool_async("srv", "slow", {})
    stop = True
    await t
    print(r, ticks >= 10)
asyncio.run(main())`, want: `slow done True`},
		{name: "async errors", code: `
async def main():
    try:
        await run_tool_async("srv", "echo", {"reject": True})
    except ApprovalRejectedError as e:
        print("rejected", e.status)
asyncio.run(main())`, want: `rejected 403`},
		{name: "10 threads", code: `
out = []
def work():
    out.append(run_tool("srv", "barrier", {"group": "threads", "n": 10}))
ts = [threading.Thread(target=work) for _ in range(10)]
[t.start() for t in ts]
[t.join() for t in ts]
print(out.count("released"))`, want: `10`},
		{name: "10 async tasks", code: `
async def main():
    rs = await asyncio.gather(*[run_tool_async("srv", "barrier", {"group": "tasks", "n": 10}) for _ in range(10)])
    print(rs.count("released"))
asyncio.run(main())`, want: `10`},
		{name: "shell approved", code: `print(approve_shell("echo 'h\u00e9llo ✓' $HOME"))`, want: `None`},
		{name: "shell rejected", code: `show(lambda: approve_shell("rm -rf /"))`,
			want: `ApprovalRejectedError | ['ToolRunnerError'] | rejected 403 | shell command rejected by the application: no rm`},
		{name: "shell timeout", code: `show(lambda: approve_shell("sleep 1"))`,
			want: `ApprovalTimeoutError | ['ToolRunnerError'] | approval_timeout 504 | shell command was not approved in time (the host waits up to 5m0s)`},
		{name: "shell not valid unicode", code: `
try:
    approve_shell("echo \udcff")
except ValueError as e:
    print("ValueError")`, want: `ValueError`},
	} {
		for _, py := range pys {
			t.Run(tc.name+"/"+py, func(t *testing.T) {
				url, token := ts.unixURL, ts.Token()
				if tc.tcp {
					url = ts.tcpURL
				}
				if tc.token != "" {
					token = tc.token
				}
				env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + tmp, "PYTHONPATH=" + pkg, "PYTHONDONTWRITEBYTECODE=1"}
				if !tc.noEnv {
					env = append(env, toolserver.EnvURL+"="+url, toolserver.EnvToken+"="+token)
				}
				got := runPy(t, py, env, pyPrelude+tc.code, fmt.Sprintf("%x", pngPixel), tmp)
				if got != tc.want {
					t.Errorf("stdout:\n%s\nwant:\n%s", got, tc.want)
				}
			})
		}
	}

	// The host saw the kernel's data unchanged.
	if v, _ := seen.Load("echo"); v == nil {
		t.Error("echo was never called")
	}
	ap.mu.Lock()
	defer ap.mu.Unlock()
	if len(ap.shell) == 0 || ap.shell[0] != "echo 'h\u00e9llo ✓' $HOME" {
		t.Errorf("approver saw shell commands %q; want the first exactly %q", ap.shell, "echo 'h\u00e9llo ✓' $HOME")
	}
}

// TestRuntimeDisplay checks that IPython displays a returned image as
// image/png, which is what makes ipybox save it like a plot.
func TestRuntimeDisplay(t *testing.T) {
	pys := pythons(t)
	pkg := filepath.Join(testenv.RepoRoot(t), "internal", "pyruntime")
	code := `
import base64, sys
from IPython.core.formatters import DisplayFormatter
from ipybox_runtime import Image, ToolResult
data = bytes.fromhex(sys.argv[1])
fmt, _ = DisplayFormatter().format(Image(data, "image/png"))
print(sorted(fmt), base64.b64decode(fmt["image/png"]) == data)
fmt, _ = DisplayFormatter().format(Image(b"<svg/>", "image/svg+xml"))
print(sorted(fmt))
r = ToolResult({"content": [{"type": "text", "text": "cap"}, {"type": "image", "mimeType": "image/png", "data": base64.b64encode(data).decode()}]})
from IPython.core.interactiveshell import InteractiveShell
import IPython.core.display_functions as df
shown = []
df.publish_display_data = lambda data, metadata=None, **kw: shown.append(sorted(data))
InteractiveShell.instance()
r._ipython_display_()
print(shown)
`
	ran := false
	for _, py := range pys {
		if exec.Command(py, "-c", "import IPython.core.display_functions").Run() != nil {
			continue
		}
		ran = true
		t.Run(py, func(t *testing.T) {
			got := runPy(t, py, []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "PYTHONPATH=" + pkg, "PYTHONDONTWRITEBYTECODE=1"}, code, fmt.Sprintf("%x", pngPixel))
			want := "['image/png', 'text/plain'] True\n['image/svg+xml', 'text/plain']\ncap\n[['image/png', 'text/plain']]"
			if got != want {
				t.Errorf("stdout:\n%s\nwant:\n%s", got, want)
			}
		})
	}
	if !ran {
		testenv.Missing(t, "a python3 with IPython (Debian: apt-get install python3-ipykernel)")
	}
}

// runPy runs code with py and returns its trimmed stdout; a non-zero exit
// fails the test with stderr.
func runPy(t *testing.T, py string, env []string, code string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{"-c", code}, args...)...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", py, err, stdout.String(), stderr.String())
	}
	return strings.TrimRight(stdout.String(), "\n ")
}
