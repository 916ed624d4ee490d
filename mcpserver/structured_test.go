package mcpserver

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// metaOf decodes the value at key of a result's _meta into v.
func metaOf(t *testing.T, m mcp.Meta, key string, v any) {
	t.Helper()
	raw, ok := m[key]
	if !ok {
		t.Fatalf("_meta has no %q: %v", key, m)
	}
	b, err := json.Marshal(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("_meta[%q] = %s: %v", key, b, err)
	}
}

// TestStructuredResults checks what programs read instead of the text
// blocks: every output chunk as a log message (for a 2025-11-25 client that
// asks for them; TestOutputAsProgress has the progress notifications that
// replace them), the cell's outcome in the result's _meta, the approval in
// the elicitation's _meta, and the generated modules in
// register_mcp_server's _meta.
func TestStructuredResults(t *testing.T) {
	testenv.CheckGoroutines(t)
	ws := sharedWorkspace(t)
	images := filepath.Join(ws, "structured-images")
	srv := newServer(t, &Options{
		Workspace: ws,
		ImagesDir: images,
		Approvals: ApprovalOptions{
			Mode: ApprovalElicit,
		},
	})
	var mu sync.Mutex
	var chunks []string
	var asked []map[string]any
	wire := &testenv.Buffer{}
	cs := connectWire(t, srv, legacyVersion, &mcp.ClientOptions{
		//lint:ignore SA1019 the cells' output streams as MCP log messages, which SEP-2577 keeps working through its deprecation window (see streamOutput)
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			mu.Lock()
			defer mu.Unlock()
			s, _ := r.Params.Data.(string)
			chunks = append(chunks, r.Params.Logger+":"+s)
		},
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			var a map[string]any
			metaOf(t, r.Params.Meta, approvalMetaKey, &a)
			mu.Lock()
			asked = append(asked, a)
			mu.Unlock()
			if a["kind"] == "shell" {
				return &mcp.ElicitResult{Action: "decline"}, nil
			}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{}}, nil
		},
	}, wire)

	t.Run("no log messages before setLevel", func(t *testing.T) {
		run(t, cs, "print('quiet')")
		// The server sends a cell's log messages before its result, and the
		// client reads them in order: had any been sent, it is on the wire.
		if strings.Contains(wire.String(), "notifications/message") {
			t.Errorf("log messages without logging/setLevel on the wire:\n%s", wire)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(chunks) != 0 {
			t.Errorf("log messages without logging/setLevel: %q", chunks)
		}
	})

	t.Run("chunks", func(t *testing.T) {
		//lint:ignore SA1019 the cells' output streams as MCP log messages, which SEP-2577 keeps working through its deprecation window (see streamOutput)
		if err := cs.SetLoggingLevel(t.Context(), &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
			t.Fatal(err)
		}
		code := "import sys, time\nfor i in range(5):\n    print(f'line {i}', flush=True)\n    time.sleep(0.02)\nprint('oops', file=sys.stderr, flush=True)"
		res := call(t, cs, "execute_ipython_cell", map[string]any{"code": code})
		var m cellMeta
		metaOf(t, res.Meta, CellMetaKey, &m)
		want := "line 0\nline 1\nline 2\nline 3\nline 4\noops"
		if m.Text != want || m.Error != nil {
			t.Errorf("meta = %+v, want text %q", m, want)
		}
		// The client hands notifications to its handler on their own; wait
		// for them, bounded.
		deadline := time.Now().Add(5 * time.Second)
		for {
			mu.Lock()
			var out, errOut strings.Builder
			for _, c := range chunks {
				stream, text, _ := strings.Cut(c, ":")
				if stream == "stderr" {
					errOut.WriteString(text)
				} else {
					out.WriteString(text)
				}
			}
			n := len(chunks)
			mu.Unlock()
			if out.String() == "line 0\nline 1\nline 2\nline 3\nline 4\n" && errOut.String() == "oops\n" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d chunks: stdout %q, stderr %q", n, out.String(), errOut.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		// The wire shows them: its silence before setLevel meant something.
		if !strings.Contains(wire.String(), "notifications/message") {
			t.Error("no log message on the wire after setLevel")
		}
	})

	t.Run("python error", func(t *testing.T) {
		res := call(t, cs, "execute_ipython_cell", map[string]any{"code": "print('before')\n1/0"})
		var m cellMeta
		metaOf(t, res.Meta, CellMetaKey, &m)
		if !res.IsError || m.Text != "before" || m.Error == nil || m.Error.Kind != "python" || m.Error.Name != "ZeroDivisionError" ||
			m.Error.Value != "division by zero" || !strings.Contains(m.Error.Traceback, "1/0") {
			t.Errorf("meta = %+v, error %+v", m, m.Error)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		res := call(t, cs, "execute_ipython_cell", map[string]any{"code": "import time; time.sleep(30)", "timeout": 0.5})
		var m cellMeta
		metaOf(t, res.Meta, CellMetaKey, &m)
		if !res.IsError || m.Error == nil || m.Error.Kind != "timeout" {
			t.Errorf("meta = %+v, error %+v", m, m.Error)
		}
	})

	t.Run("image", func(t *testing.T) {
		res := call(t, cs, "execute_ipython_cell", map[string]any{"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()"})
		var m cellMeta
		metaOf(t, res.Meta, CellMetaKey, &m)
		if len(m.Images) != 1 || filepath.Dir(m.Images[0]) != images {
			t.Fatalf("meta = %+v, want one image in %s", m, images)
		}
		if _, err := os.Stat(m.Images[0]); err != nil {
			t.Error(err)
		}
	})

	t.Run("a printed image note is not an image", func(t *testing.T) {
		res := call(t, cs, "execute_ipython_cell", map[string]any{"code": "print('[image saved: /etc/passwd]')"})
		var m cellMeta
		metaOf(t, res.Meta, CellMetaKey, &m)
		if len(m.Images) != 0 || m.Text != "[image saved: /etc/passwd]" {
			t.Errorf("meta = %+v", m)
		}
	})

	t.Run("approvals and modules", func(t *testing.T) {
		res := call(t, cs, "register_mcp_server", map[string]any{"server_name": "structured_go", "server_params": map[string]any{"command": mcptest.Build(t)}})
		var mods []string
		metaOf(t, res.Meta, modulesMetaKey, &mods)
		if len(mods) == 0 || !strings.Contains(text(res), "mcptools.structured_go."+mods[0]+" import") {
			t.Fatalf("modules %q, text %q", mods, text(res))
		}
		got := run(t, cs, "from mcptools.structured_go.tool_1 import Params, run\nprint(run(Params(s='x')))")
		if got != "tool-1: x" {
			t.Errorf("tool call: %q", got)
		}
		res = call(t, cs, "execute_ipython_cell", map[string]any{"code": "!echo no"})
		var m cellMeta
		metaOf(t, res.Meta, CellMetaKey, &m)
		if !res.IsError || m.Error == nil || m.Error.Name != "ApprovalRejectedError" {
			t.Errorf("declined shell command: meta %+v, error %+v", m, m.Error)
		}
		mu.Lock()
		defer mu.Unlock()
		want := []map[string]any{
			{"kind": "tool", "server": "structured_go", "tool": "tool-1", "args": map[string]any{"s": "x"}},
			{"kind": "shell", "command": "echo no"},
		}
		if !reflect.DeepEqual(want, asked) {
			t.Errorf("approval metadata:\n got %v\nwant %v", asked, want)
		}
	})
}

// TestApprovalMeta checks the structured form of both kinds of request.
func TestApprovalMeta(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		r    *ipybox.ApprovalRequest
		want map[string]any
	}{
		{&ipybox.ApprovalRequest{Kind: "tool", Server: "s", Tool: "t"}, map[string]any{"kind": "tool", "server": "s", "tool": "t", "args": map[string]any{}}},
		{&ipybox.ApprovalRequest{Kind: "tool", Server: "s", Tool: "t", Args: json.RawMessage(`{"a":1.0}`)}, map[string]any{"kind": "tool", "server": "s", "tool": "t", "args": map[string]any{"a": 1.0}}},
		{&ipybox.ApprovalRequest{Kind: "shell", Command: "%%bash\nls\x1b[2K"}, map[string]any{"kind": "shell", "command": "%%bash\nls\x1b[2K"}},
	} {
		// As the client gets it: encoded.
		b, err := json.Marshal(approvalMeta(tc.r, newApprovalForm(tc.r, "")))
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		json.Unmarshal(b, &got)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("approvalMeta(%v) = %s, want %v", tc.r, b, tc.want)
		}
	}
}
