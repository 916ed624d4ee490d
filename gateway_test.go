package ipybox_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
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
	t.Parallel()
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
	t.Parallel()
	_, err := ipybox.Start(context.Background(), &ipybox.Options{
		WorkDir: t.TempDir(),
		Gateway: &ipybox.GatewayConfig{URL: "http://127.0.0.1:1"},
		Sandbox: ipybox.DefaultSandbox(),
	})
	if err == nil || !strings.Contains(err.Error(), "leave them nil") {
		t.Fatalf("err = %v", err)
	}
}

// hostAddress returns a non-loopback IPv4 address of this machine, or
// skips (no such interface).
func hostAddress(t *testing.T) string {
	t.Helper()
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	testenv.Missing(t, "no non-loopback IPv4 address on this machine")
	return ""
}

// TestGatewayToolServerTLS: with ToolServerAddr, a gateway kernel reaches
// the tool server over HTTPS on that address and pins its certificate;
// approvals stay on the host. The port refuses plain HTTP, a foreign Host
// and a missing token, and a runtime with another pin sends nothing.
func TestGatewayToolServerTLS(t *testing.T) {
	t.Parallel()
	addr := hostAddress(t)
	j := testenv.JupyterServer(t, nil)
	ex := start(t, &ipybox.Options{
		Gateway:        &ipybox.GatewayConfig{URL: j.URL, Token: j.Token},
		ToolServerAddr: addr,
	})
	toolURL := run(t, ex, "import os\nprint(os.environ['IPYBOX_TOOL_URL'])").Text
	if !strings.HasPrefix(toolURL, "https://"+addr+":") {
		t.Fatalf("tool server URL %q, want https on %s", toolURL, addr)
	}
	register(t, ex, "go", testmcpStdio(t))
	imports := "from mcptools.go.tool_1 import Params, run\n"
	reqs, events, err := collect(t, ex, imports+"print(run(Params(s='1')))", nil, nil)
	if err != nil || len(reqs) != 1 || resultText(events) != "tool-1: 1" {
		t.Fatalf("approved call over https: %v, %d requests, %q", err, len(reqs), resultText(events))
	}

	token := run(t, ex, "print(os.environ['IPYBOX_TOOL_TOKEN'])").Text
	insecure := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(client *http.Client, url, host, auth string) (int, string) {
		req, _ := http.NewRequest("GET", url+"/v1/health", nil)
		if host != "" {
			req.Host = host
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return resp.StatusCode, string(b)
	}
	if code, _ := get(insecure, toolURL, "", "Bearer "+token); code != 200 {
		t.Errorf("the kernel's own request: %d", code)
	}
	if code, body := get(insecure, toolURL, "", ""); code != 401 || strings.Contains(body, token) {
		t.Errorf("no token: %d %s", code, body)
	}
	if code, body := get(insecure, toolURL, "evil.example:443", "Bearer "+token); code != 403 {
		t.Errorf("foreign Host: %d %s", code, body)
	}
	if code, _ := get(&http.Client{Timeout: 10 * time.Second}, "http://"+strings.TrimPrefix(toolURL, "https://"), "", "Bearer "+token); code == 200 {
		t.Error("plain HTTP was served on the TLS port")
	}

	// A runtime that pins another certificate sends nothing.
	_, err = ex.Execute(context.Background(), "import os\nos.environ['IPYBOX_TOOL_CERT_SHA256'] = '0' * 64\n"+imports+"run(Params(s='2'))", nil)
	var pe *ipybox.PythonError
	if !errors.As(err, &pe) || !strings.Contains(pe.Value, "fingerprint") {
		t.Fatalf("wrong pin: err = %v", err)
	}
}
