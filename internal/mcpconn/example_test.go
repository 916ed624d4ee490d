package mcpconn_test

import (
	"context"
	"fmt"
	"log"
	"net/http/httptest"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/mcpconn"
	"github.com/ipybox/ipybox/internal/mcptest"
)

func ExampleManager() {
	// An MCP server to talk to: here the repo's test server, in process.
	h, shutdown := mcptest.Handler("http", nil)
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer shutdown()

	reg := mcpconn.NewRegistry()
	// A stdio server would be Config{Command: "mcp-server-x", Args: ...}.
	if err := reg.Add("demo", mcpconn.Config{URL: srv.URL + "/mcp"}); err != nil {
		log.Fatal(err)
	}
	m, err := mcpconn.New(reg, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	ctx := context.Background()
	tools, err := m.ListTools(ctx, "demo") // connects on first use
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("tools:", len(tools))

	res, err := m.CallTool(ctx, "demo", "tool-1", map[string]any{"s": "hello"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Content[0].(*mcp.TextContent).Text)

	// A tool's own failure is a result, not a Go error.
	res, err = m.CallTool(ctx, "demo", "fail", map[string]any{"reason": "no"})
	fmt.Println(res.IsError, err)
	// Output:
	// tools: 8
	// tool-1: hello
	// true <nil>
}
