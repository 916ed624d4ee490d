package toolserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/toolserver"
)

// This example serves one tool on a unix socket, and calls it the way the
// kernel-side runtime does: with the token, Host: localhost, and a JSON
// body naming the server, the tool and the arguments.
func Example() {
	caller := toolserver.CallerFunc(func(ctx context.Context, server, tool string, args json.RawMessage) (*mcp.CallToolResult, error) {
		if server != "greeter" {
			return nil, toolserver.ErrUnknownServer
		}
		// A real Caller passes args on to the MCP server as they are.
		var a struct{ Name string }
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello, " + a.Name}}}, nil
	})
	srv, err := toolserver.New(caller, &toolserver.Options{
		// Auto mode. Without an Approver every call would be rejected.
		Approver: toolserver.AutoApprove,
	})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	dir, err := os.MkdirTemp("", "ipybox-example-") // mode 0700
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "tool.sock")
	url, err := srv.ListenUnix(sock)
	if err != nil {
		panic(err)
	}
	// The kernel gets these two variables.
	_ = []string{toolserver.EnvURL + "=" + url, toolserver.EnvToken + "=" + srv.Token()}

	client := &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	for _, server := range []string{"greeter", "stranger"} {
		req, _ := http.NewRequest("POST", "http://localhost/v1/tools/call",
			strings.NewReader(`{"server": "`+server+`", "tool": "greet", "args": {"name": "${USER}"}}`))
		req.Header.Set("Authorization", "Bearer "+srv.Token())
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body))
	}
	// Output:
	// 200 {"content":[{"type":"text","text":"hello, ${USER}"}]}
	// 404 {"error":{"kind":"unknown_server","message":"unknown MCP server \"stranger\"; register it on the host (the kernel cannot add servers)"}}
}
