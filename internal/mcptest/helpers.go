package mcptest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/testenv"
)

// Handler returns an HTTP handler that serves NewServer(opts) over the given
// transport: "http" (streamable HTTP, served at /mcp) or "sse" (the
// 2024-11-05 SSE transport, served at every path, so both /sse and / work),
// and a shutdown function that ends every session (and, unless opts.Done was
// set, every blocked handler), as a server restart would. It panics on any
// other transport, which is a programmer error.
func Handler(transport string, opts *Options) (h http.Handler, shutdown func()) {
	var o Options
	if opts != nil {
		o = *opts
	}
	var done chan struct{}
	if o.Done == nil {
		done = make(chan struct{})
		o.Done = done
	}
	server := NewServer(&o)
	get := func(*http.Request) *mcp.Server { return server }
	switch transport {
	case "http":
		mux := http.NewServeMux()
		mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(get, nil))
		h = mux
	case "sse":
		h = mcp.NewSSEHandler(get, nil)
	default:
		panic(fmt.Sprintf("mcptest: transport %q: want \"http\" or \"sse\"", transport))
	}
	var once sync.Once
	shutdown = func() {
		once.Do(func() {
			if done != nil {
				close(done)
			}
			for ss := range server.Sessions() {
				ss.Close()
			}
		})
	}
	return h, shutdown
}

// URLPath is the path at which Handler serves the transport: "/mcp" for
// "http" and "/sse" for "sse".
func URLPath(transport string) string {
	if transport == "sse" {
		return "/sse"
	}
	return "/mcp"
}

// StartHTTP serves NewServer(opts) in process on 127.0.0.1 over transport
// ("http" or "sse") and returns the server's URL (ending in /mcp or /sse).
// When t ends, the server's sessions are closed and open streams are cut.
func StartHTTP(t testing.TB, transport string, opts *Options) string {
	t.Helper()
	h, shutdown := Handler(transport, opts)
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		shutdown()
		// SSE streams never end on their own: cut them so Close returns.
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL + URLPath(transport)
}

var build struct {
	once sync.Once
	path string
	err  error
}

// Build builds cmd/testmcp once per test process and returns the binary's
// path. It fails t when the build fails.
//
// The binary lives in a per-user folder under the system temp directory and
// is replaced atomically, so concurrent test processes do not collide. Its
// name holds a hash of the module root: test processes of another checkout
// (a git worktree, whose testmcp may differ) build a binary of their own
// instead of replacing this one.
func Build(t testing.TB) string {
	t.Helper()
	build.once.Do(func() {
		build.path, build.err = buildBinary(testenv.RepoRoot(t))
	})
	if build.err != nil {
		t.Fatalf("mcptest: %v", build.err)
	}
	return build.path
}

func buildBinary(root string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("building testmcp: go not on PATH: %w", err)
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("ipybox-mcptest-%d", os.Getuid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("building testmcp: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "testmcp-*.tmp")
	if err != nil {
		return "", fmt.Errorf("building testmcp: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name()) // a no-op after the rename
	cmd := exec.Command(goBin, "build", "-o", tmp.Name(), "./internal/mcptest/cmd/testmcp")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./internal/mcptest/cmd/testmcp: %v\n%s", err, strings.TrimSpace(string(out)))
	}
	sum := sha256.Sum256([]byte(root))
	final := filepath.Join(dir, "testmcp-"+hex.EncodeToString(sum[:6]))
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", fmt.Errorf("building testmcp: %w", err)
	}
	return final, nil
}
