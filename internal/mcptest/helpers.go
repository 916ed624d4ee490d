package mcptest

import (
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
// 2024-11-05 SSE transport, served at every path, so both /sse and / work).
// It panics on any other transport, which is a programmer error.
func Handler(transport string, opts *Options) http.Handler {
	server := NewServer(opts)
	get := func(*http.Request) *mcp.Server { return server }
	switch transport {
	case "http":
		mux := http.NewServeMux()
		mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(get, nil))
		return mux
	case "sse":
		return mcp.NewSSEHandler(get, nil)
	default:
		panic(fmt.Sprintf("mcptest: transport %q: want \"http\" or \"sse\"", transport))
	}
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
// The server is shut down when t ends; open streams are cut at that point.
func StartHTTP(t testing.TB, transport string, opts *Options) string {
	t.Helper()
	srv := httptest.NewServer(Handler(transport, opts))
	t.Cleanup(func() {
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
// is replaced atomically, so concurrent test processes do not collide.
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
	final := filepath.Join(dir, "testmcp")
	if err := os.Rename(tmp.Name(), final); err != nil {
		return "", fmt.Errorf("building testmcp: %w", err)
	}
	return final, nil
}
