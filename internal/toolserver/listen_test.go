package toolserver_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/toolserver"
)

// TestListenLocal: a unix socket where kernels can reach one, loopback TCP
// where they cannot (Windows).
func TestListenLocal(t *testing.T) {
	for _, tc := range []struct {
		unix bool
		want string
	}{{true, "unix://"}, {false, "http://127.0.0.1:"}} {
		restore := toolserver.SetKernelsHaveUnixSockets(tc.unix)
		s, err := toolserver.New(toolserver.CallerFunc(func(context.Context, string, string, json.RawMessage) (*mcp.CallToolResult, error) {
			return nil, nil
		}), nil)
		if err != nil {
			t.Fatal(err)
		}
		dir, err := os.MkdirTemp("", "ts-")
		if err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(dir, "tool.sock")
		url, err := s.ListenLocal(sock)
		if err != nil || !strings.HasPrefix(url, tc.want) {
			t.Errorf("unix sockets %v: ListenLocal = %q, %v; want a %s URL", tc.unix, url, err, tc.want)
		}
		if _, err := os.Lstat(sock); (err == nil) != tc.unix {
			t.Errorf("unix sockets %v: socket file exists: %v", tc.unix, err == nil)
		}
		s.Close()
		os.RemoveAll(dir)
		restore()
	}
}
