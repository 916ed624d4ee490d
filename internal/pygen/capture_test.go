package pygen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var capture = flag.Bool("capture", false, "rewrite testdata/schemas/*.json from the tools/list of the npm MCP servers")

// corpusServers are the npm test servers whose tools form the golden corpus.
// Their captured tool lists live in testdata/schemas/<name>.json.
var corpusServers = []struct {
	name string // server name in the generated layout and the schema file
	bin  string // entry point in tools/npm/node_modules/.bin
	args func(dir string) []string
	env  func(dir string) []string
}{
	{name: "everything", bin: "mcp-server-everything", args: func(string) []string { return []string{"stdio"} }},
	{name: "filesystem", bin: "mcp-server-filesystem", args: func(dir string) []string { return []string{dir} }},
	{name: "memory", bin: "mcp-server-memory", env: func(dir string) []string {
		return []string{"MEMORY_FILE_PATH=" + filepath.Join(dir, "memory.jsonl")}
	}},
}

// TestCapture lists the tools of each corpus server over stdio, with the
// go-sdk client and its pagination. With -capture it saves them as
// testdata/schemas/<server>.json; without, it checks that the saved files
// are what the installed servers (pinned by tools/npm) list today. The
// raw tools/list results are kept, not the client's decoded maps, so that
// property order survives: it decides the order of generated fields.
func TestCapture(t *testing.T) {
	for _, s := range corpusServers {
		t.Run(s.name, func(t *testing.T) {
			bin := testenv.NPMBin(t, s.bin)
			dir := t.TempDir()
			cmd := exec.Command(bin)
			if s.args != nil {
				cmd.Args = append(cmd.Args, s.args(dir)...)
			}
			cmd.Env = append(os.Environ(), "NO_COLOR=1")
			if s.env != nil {
				cmd.Env = append(cmd.Env, s.env(dir)...)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rec := &recordingTransport{inner: &mcp.CommandTransport{Command: cmd, TerminateDuration: 500 * time.Millisecond}}
			client := mcp.NewClient(&mcp.Implementation{Name: "ipybox-pygen-capture", Version: "v0"}, nil)
			cs, err := client.Connect(ctx, rec, nil)
			if err != nil {
				t.Fatalf("connect %s: %v", bin, err)
			}
			defer cs.Close()
			n := 0
			for _, err := range cs.Tools(ctx, nil) {
				if err != nil {
					t.Fatalf("tools/list: %v", err)
				}
				n++
			}
			tools := rec.tools()
			if len(tools) != n || n == 0 {
				t.Fatalf("recorded %d raw tools, client listed %d", len(tools), n)
			}
			out, err := json.MarshalIndent(tools, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, '\n')
			path := filepath.Join("testdata", "schemas", s.name+".json")
			if *capture {
				if err := os.WriteFile(path, out, 0o644); err != nil {
					t.Fatal(err)
				}
				t.Logf("wrote %d tools to %s", n, path)
				return
			}
			saved, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(saved, out) {
				t.Errorf("%s differs from what %s lists now; run go test ./pygen -run TestCapture -capture, then -update, and review both", path, s.bin)
			}
		})
	}
}

// capturedTool is one tool as stored in testdata/schemas: the fields pygen
// reads, with the schemas exactly as the server sent them.
type capturedTool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
}

// recordingTransport keeps the raw result of every tools/list response.
type recordingTransport struct {
	inner mcp.Transport

	mu    sync.Mutex
	ids   map[jsonrpc.ID]bool
	pages []json.RawMessage
}

func (r *recordingTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := r.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &recordingConn{Connection: c, r: r}, nil
}

func (r *recordingTransport) tools() []capturedTool {
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []capturedTool
	for _, p := range r.pages {
		var page struct{ Tools []capturedTool }
		if err := json.NewDecoder(bytes.NewReader(p)).Decode(&page); err == nil {
			all = append(all, page.Tools...)
		}
	}
	return all
}

type recordingConn struct {
	mcp.Connection
	r *recordingTransport
}

func (c *recordingConn) Write(ctx context.Context, m jsonrpc.Message) error {
	if req, ok := m.(*jsonrpc.Request); ok && req.Method == "tools/list" {
		c.r.mu.Lock()
		if c.r.ids == nil {
			c.r.ids = map[jsonrpc.ID]bool{}
		}
		c.r.ids[req.ID] = true
		c.r.mu.Unlock()
	}
	return c.Connection.Write(ctx, m)
}

func (c *recordingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if resp, ok := m.(*jsonrpc.Response); ok && err == nil {
		c.r.mu.Lock()
		if c.r.ids[resp.ID] {
			c.r.pages = append(c.r.pages, resp.Result)
		}
		c.r.mu.Unlock()
	}
	return m, err
}
