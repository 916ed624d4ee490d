package mcpconn_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"

	"github.com/ipybox/ipybox/internal/mcpconn"
	"github.com/ipybox/ipybox/internal/mcptest"
)

// A server that wants an OAuth sign-in: the authorization URL goes to
// Options.OAuthURL, which would open a browser; here it fetches the URL,
// whose test authorization server approves at once and redirects back to
// the Manager's loopback listener.
func ExampleOptions_oAuthURL() {
	srv := mcptest.NewOAuthServer(nil)
	defer srv.Close()
	dir, _ := os.MkdirTemp("", "example-")
	defer os.RemoveAll(dir)

	reg := mcpconn.NewRegistry()
	// No oauth block: discovery and dynamic client registration.
	reg.Add("remote", mcpconn.Config{URL: srv.URL})
	m, err := mcpconn.New(reg, &mcpconn.Options{
		TokenFile: filepath.Join(dir, "tokens.json"), // normally DefaultTokenFile()
		OAuthURL: func(ctx context.Context, server, url string) error {
			fmt.Println("sign in to", server)
			go func() { // the user's browser
				if resp, err := http.Get(url); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
			return nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	if _, err := m.ListTools(context.Background(), "remote"); err != nil {
		log.Fatal(err)
	}
	stored, _ := mcpconn.ListTokens(filepath.Join(dir, "tokens.json"))
	fmt.Println("stored sign-ins:", len(stored), "refreshable:", stored[0].Refreshable)

	// Without OAuthURL and without a stored token, the error says what to do.
	mcpconn.DeleteToken(filepath.Join(dir, "tokens.json"), "", "remote", srv.URL)
	m2, err := mcpconn.New(reg, &mcpconn.Options{TokenFile: filepath.Join(dir, "tokens.json")})
	if err != nil {
		log.Fatal(err)
	}
	defer m2.Close()
	_, err = m2.ListTools(context.Background(), "remote")
	var lre *mcpconn.LoginRequiredError
	fmt.Println(errors.As(err, &lre))
	fmt.Println(lre)
	// Output:
	// sign in to remote
	// stored sign-ins: 1 refreshable: true
	// true
	// MCP server "remote" needs an OAuth sign-in: it asks for one and no stored token works; sign in with `ipybox auth login remote` and try again
}
