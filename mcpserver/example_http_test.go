package mcpserver_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/mcpserver"
)

// bearer adds the server's token to each request, as an MCP client's
// configuration does ("Authorization: Bearer <token>").
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// The HTTP server (streamable HTTP, on loopback here) refuses a request
// without the token, and serves an MCP client that sends it; each session
// (create_session) gets its own kernel in the shared workspace.
func ExampleServer_Handler_client() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "ipybox-mcpserver-example")
	defer os.RemoveAll(dir)
	const token = "an-example-token-of-32-characters!"

	srv, err := mcpserver.New(&mcpserver.Options{Workspace: dir, HTTP: mcpserver.HTTPOptions{AuthToken: token}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()

	resp, err := http.Post(hs.URL+"/mcp", "application/json", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println("without the token:", resp.StatusCode)

	client := mcp.NewClient(&mcp.Implementation{Name: "example", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   hs.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{token}},
	}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cs.Close()
	// Over HTTP, a call runs in a session of create_session, named by its
	// handle, which any later connection of the same token may use.
	created, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_session"})
	if err != nil {
		fmt.Println(err)
		return
	}
	handle := created.StructuredContent.(map[string]any)["session"]
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{
		Name:      "execute_ipython_cell",
		Arguments: map[string]any{"code": "print(6 * 7)", "session": handle},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("with it:", res.Content[0].(*mcp.TextContent).Text)
	// Output:
	// without the token: 401
	// with it: 42
}
