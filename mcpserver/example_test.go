package mcpserver_test

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/mcpserver"
)

// Example connects an MCP client to the server (over in-memory transports;
// `ipybox mcp` uses stdio) and runs two cells in the session's kernel.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ipybox-mcpserver-example")
	defer os.RemoveAll(dir)

	srv, err := mcpserver.New(&mcpserver.Options{Workspace: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	clientSide, serverSide := mcp.NewInMemoryTransports()
	go srv.Serve(ctx, serverSide)

	client := mcp.NewClient(&mcp.Implementation{Name: "example", Version: "1"}, nil)
	cs, err := client.Connect(ctx, clientSide, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cs.Close()
	for _, code := range []string{"x = 6 * 7", "print(x)"} {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{
			Name:      "execute_ipython_cell",
			Arguments: map[string]any{"code": code},
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	}
	// Output:
	// [no output]
	// 42
}

// ExampleServer_Handler serves streamable HTTP on loopback; each MCP
// session gets its own kernel in the shared workspace. Clients send
// "Authorization: Bearer <token>".
func ExampleServer_Handler() {
	if err := mcpserver.CheckHTTPAddr("127.0.0.1:8080", false); err != nil {
		fmt.Println(err)
		return
	}
	token := os.Getenv("IPYBOX_MCP_AUTH_TOKEN") // a long random string
	srv, err := mcpserver.New(&mcpserver.Options{Workspace: ".", HTTP: mcpserver.HTTPOptions{AuthToken: token}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	http.Handle("/mcp", srv.Handler())
	http.ListenAndServe("127.0.0.1:8080", nil)
}
