package mcpserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestRedteamPoolAfterRegistration: `ipybox mcp --pool 2` keeps kernels
// started in advance. Session A registers a server whose config names a
// file and a credentials folder of the workspace; session B, connected
// afterwards, gets a kernel from the pool, started before the
// registration, and a reset of A gets one too. None may read the key.
func TestRedteamPoolAfterRegistration(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	const secret = "sk-pooled-4444444444"
	os.MkdirAll(filepath.Join(ws, "creds"), 0o755)
	os.WriteFile(filepath.Join(ws, "sa.json"), []byte(secret), 0o600)
	os.WriteFile(filepath.Join(ws, "creds", "token"), []byte(secret), 0o600)
	srv := newServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox(), Sessions: SessionOptions{Pool: 2}})
	url := serveHTTP(t, srv)
	a := connectHTTP(t, url, nil)
	run(t, a, "pass")
	testenv.WaitFor(t, 60*time.Second, "the pool to refill", func() bool { return srv.factory.warm.Ready() == 2 })
	res := call(t, a, "register_mcp_server", map[string]any{"server_name": "creds", "server_params": map[string]any{
		"command": mcptest.Build(t),
		"env":     map[string]any{"GOOGLE_APPLICATION_CREDENTIALS": "sa.json", "CLOUDSDK_CONFIG": "creds"},
	}})
	if res.IsError {
		t.Fatalf("register: %s", text(res))
	}
	b := connectHTTP(t, url, nil)
	if r := call(t, a, "reset", map[string]any{}); r.IsError {
		t.Fatalf("reset: %s", text(r))
	}
	code := `for p in ("sa.json", "creds/token"):
    try:
        print(p, open(p).read())
    except OSError as e:
        print(p, "DENIED", type(e).__name__)`
	for name, cs := range map[string]*mcp.ClientSession{"new session B": b, "reset session A": a} {
		got := run(t, cs, code)
		t.Logf("%s: %s", name, got)
		if strings.Contains(got, secret) {
			t.Errorf("%s reads a key that a server registered before it got its pooled kernel names: %s", name, got)
		}
	}
}
