package ipybox_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestGatewayExecutor runs an Executor whose kernel lives on a real
// Jupyter Server, over both websocket protocols: state, images saved on
// the host, a timeout, Reset, and MCP tool calls that reach the host's
// tool server (on loopback TCP) and wait for the host's approval.
func TestGatewayExecutor(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		name := "v1"
		if legacy {
			name = "legacy"
		}
		t.Run(name, func(t *testing.T) {
			j := testenv.JupyterServer(t, &testenv.JupyterServerOptions{Legacy: legacy})
			ex := start(t, &ipybox.Options{
				Gateway:   &ipybox.GatewayConfig{URL: j.URL, Token: j.Token},
				KernelEnv: map[string]string{"GREETING": "hello"},
			})
			if got := run(t, ex, "import os\nx = 2\nprint(os.environ['GREETING'], x * 21)").Text; got != "hello 42" {
				t.Errorf("text = %q", got)
			}
			// The kernel's working directory is the gateway's, not the
			// workspace: the runtime came over the channel.
			if got := run(t, ex, "import ipybox_runtime, os\nprint(ipybox_runtime.__file__.startswith(os.path.join(__import__('tempfile').gettempdir(), 'ipybox-runtime-')))").Text; got != "True" {
				t.Errorf("runtime location: %q", got)
			}
			res := run(t, ex, "from IPython.display import Image, display\nimport base64\n"+
				"display(Image(data=base64.b64decode('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==')))")
			if len(res.Images) != 1 || !strings.HasPrefix(res.Images[0], filepath.Join(ex.Workspace(), "images")) {
				t.Errorf("images = %v", res.Images)
			} else if _, err := os.Stat(res.Images[0]); err != nil {
				t.Error(err)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := ex.Execute(ctx, "import time\ntime.sleep(30)", &ipybox.ExecOptions{Timeout: 500 * time.Millisecond})
			if !errors.Is(err, ipybox.ErrTimeout) {
				t.Errorf("timeout: %v", err)
			}
			if got := run(t, ex, "x").Text; got != "2" {
				t.Errorf("state after the timeout: %q", got)
			}

			register(t, ex, "go", testmcpStdio(t))
			imports := "from mcptools.go.tool_1 import Params, run\n"
			_, _, err = collect(t, ex, imports+"run(Params(s='x'))", nil, func(r *ipybox.ApprovalRequest) { r.Reject("not today") })
			var pe *ipybox.PythonError
			if !errors.As(err, &pe) || pe.Name != "ApprovalRejectedError" || !strings.Contains(pe.Value, "not today") {
				t.Fatalf("rejected call: err = %v", err)
			}
			reqs, events, err := collect(t, ex, imports+"print(run(Params(s='1')))", nil, nil)
			if err != nil || len(reqs) != 1 || resultText(events) != "tool-1: 1" {
				t.Fatalf("approved call: %v, %d requests, %q", err, len(reqs), resultText(events))
			}

			// The tool server's TCP port is an attack surface: anyone on
			// the host (another kernel of the same gateway) can reach it.
			toolURL := run(t, ex, "import os\nprint(os.environ['IPYBOX_TOOL_URL'])").Text
			token := run(t, ex, "print(os.environ['IPYBOX_TOOL_TOKEN'])").Text
			if !strings.HasPrefix(toolURL, "http://127.0.0.1:") {
				t.Fatalf("tool server URL %q, want loopback TCP", toolURL)
			}
			attackToolServer(t, toolURL, token)

			if err := ex.Reset(ctx); err != nil {
				t.Fatal(err)
			}
			if got := run(t, ex, "'x' in globals()").Text; got != "False" {
				t.Errorf("after Reset: %q", got)
			}
			if err := ex.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
}

// attackToolServer: without the token, with a foreign Host, or with a
// body past the limit, a request is refused, and no answer holds the
// token.
func attackToolServer(t *testing.T, base, token string) {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second}
	body := `{"server":"go","tool":"tool_1","arguments":{"s":"x"}}`
	for _, tc := range []struct {
		name, auth, host, body string
		want                   int
	}{
		{"no token", "", "", body, 401},
		{"wrong token", "Bearer " + strings.Repeat("0", len(token)), "", body, 401},
		{"foreign Host (DNS rebinding)", "Bearer " + token, "evil.example:80", body, 403},
		{"body past the limit", "Bearer " + token, "", `{"server":"go","tool":"tool_1","arguments":{"s":"` + strings.Repeat("x", 17<<20) + `"}}`, 413},
	} {
		req, _ := http.NewRequest("POST", base+"/v1/tools/call", strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		if tc.host != "" {
			req.Host = tc.host
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d: %s", tc.name, resp.StatusCode, tc.want, answer)
		}
		if strings.Contains(string(answer), token) {
			t.Errorf("%s: the answer holds the token", tc.name)
		}
	}
}

// TestGatewayExcludesLocalOptions: a gateway with a sandbox is refused,
// with the fix.
func TestGatewayExcludesLocalOptions(t *testing.T) {
	_, err := ipybox.Start(context.Background(), &ipybox.Options{
		WorkDir: t.TempDir(),
		Gateway: &ipybox.GatewayConfig{URL: "http://127.0.0.1:1"},
		Sandbox: ipybox.DefaultSandbox(),
	})
	if err == nil || !strings.Contains(err.Error(), "leave them nil") {
		t.Fatalf("err = %v", err)
	}
}
