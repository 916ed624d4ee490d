package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestGatewaySessions: with Options.Gateway, each HTTP session gets its
// own kernel on the Jupyter Server (or Enterprise Gateway 3.3.0), state
// stays per session, and Close leaves no kernel on the server.
func TestGatewaySessions(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"jupyter-server", "enterprise-gateway"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var j *testenv.Jupyter
			if kind == "jupyter-server" {
				j = testenv.JupyterServer(t, nil)
			} else {
				j = testenv.EnterpriseGateway(t)
			}
			testGatewaySessions(t, j)
		})
	}
}

func testGatewaySessions(t *testing.T, j *testenv.Jupyter) {
	srv := newServer(t, &Options{
		Workspace: t.TempDir(),
		Gateway:   &ipybox.GatewayConfig{URL: j.URL, Token: j.Token},
	})
	url := serveHTTP(t, srv)
	a := connectHTTP(t, url, nil)
	b := connectHTTP(t, url, nil)
	run(t, a, "x = 'a'")
	run(t, b, "x = 'b'")
	if got := run(t, a, "print(x)"); got != "a" {
		t.Errorf("session a: %q", got)
	}
	if got := run(t, b, "print(x)"); got != "b" {
		t.Errorf("session b: %q", got)
	}
	if n := len(gatewayKernels(t, j)); n < 2 {
		t.Errorf("the server has %d kernels for 2 sessions", n)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ks := gatewayKernels(t, j)
		if len(ks) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Close the server still has kernels %v", ks)
		}
	}
}

// gatewaySession starts a Jupyter Server, an ipybox mcp server whose
// kernels live on it (workspace ws), and one HTTP session of it.
func gatewaySession(t *testing.T) (*testenv.Jupyter, string, *mcp.ClientSession) {
	t.Helper()
	j := testenv.JupyterServer(t, nil)
	ws := t.TempDir()
	srv := newServer(t, &Options{
		Workspace: ws,
		Gateway:   &ipybox.GatewayConfig{URL: j.URL, Token: j.Token},
	})
	return j, ws, connectHTTP(t, serveHTTP(t, srv), nil)
}

func gatewayKernels(t *testing.T, j *testenv.Jupyter) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", j.URL+"/api/kernels", nil)
	req.Header.Set("Authorization", "token "+j.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ks []map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&ks); err != nil {
		t.Fatal(err)
	}
	return ks
}

// TestGatewayFileTools: with a gateway, upload_file and download_file
// move files to and from the kernel's working directory (the gateway's
// disk, not the workspace) over the kernel's channel, a failed download
// leaves the host's file as it was, and install_package installs into the
// kernel's interpreter, for good across a reset.
func TestGatewayFileTools(t *testing.T) {
	t.Parallel()
	j, ws, cs := gatewaySession(t)
	host := t.TempDir()
	src := filepath.Join(host, "in.bin")
	data := bytes.Repeat([]byte{0, 1, 2, 255}, 1<<20)
	os.WriteFile(src, data, 0o600)
	if res := call(t, cs, "upload_file", map[string]any{"relpath": "up/in.bin", "local_path": src}); res.IsError {
		t.Fatalf("upload: %s", text(res))
	}
	if got, err := os.ReadFile(filepath.Join(j.Dir, "up", "in.bin")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the kernel's copy: %d bytes, %v", len(got), err)
	}
	if _, err := os.Stat(filepath.Join(ws, "up")); err == nil {
		t.Error("the upload went to the host's workspace")
	}
	if res := call(t, cs, "upload_file", map[string]any{"relpath": ".git/hooks/pre-commit", "local_path": src}); !res.IsError || !strings.Contains(text(res), ".git") {
		t.Errorf("upload into .git/hooks: %q", text(res))
	}
	if got := run(t, cs, "print(len(open('up/in.bin', 'rb').read()))"); got != "4194304" {
		t.Errorf("the kernel reads %q bytes", got)
	}
	dst := filepath.Join(host, "out", "copy.bin")
	if res := call(t, cs, "download_file", map[string]any{"relpath": "up/in.bin", "local_path": dst}); res.IsError {
		t.Fatalf("download: %s", text(res))
	}
	if got, err := os.ReadFile(dst); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("downloaded: %d bytes, %v", len(got), err)
	}
	res := call(t, cs, "download_file", map[string]any{"relpath": "no/such.bin", "local_path": dst})
	if !res.IsError || !strings.Contains(text(res), "no such file") {
		t.Errorf("missing file: %q", text(res))
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, data) {
		t.Error("a failed download changed the host's file")
	}
	if ents, _ := os.ReadDir(filepath.Dir(dst)); len(ents) != 1 {
		t.Errorf("a failed download left files: %v", ents)
	}

	whl := buildWheel(t, host)
	if res := call(t, cs, "upload_file", map[string]any{"relpath": "dist/" + whl, "local_path": filepath.Join(host, whl)}); res.IsError {
		t.Fatalf("upload the wheel: %s", text(res))
	}
	res = call(t, cs, "install_package", map[string]any{"package_name": "dist/" + whl})
	if res.IsError || !strings.Contains(text(res), "Successfully installed ipybox-testpkg-0.1") {
		t.Fatalf("install: %q", text(res))
	}
	check := "import ipybox_testpkg\nprint(ipybox_testpkg.VALUE)"
	if got := run(t, cs, check); got != "installed from a local wheel" {
		t.Errorf("import after install: %q", got)
	}
	if res := call(t, cs, "reset", map[string]any{}); res.IsError {
		t.Fatal(text(res))
	}
	if got := run(t, cs, check); got != "installed from a local wheel" {
		t.Errorf("import after reset: %q", got)
	}
	res = call(t, cs, "install_package", map[string]any{"package_name": "dist/no-such-file.whl"})
	if !res.IsError || !strings.Contains(text(res), "no-such-file.whl") {
		t.Errorf("failed install: %q", text(res))
	}
}
