// Command conformance-client is the client the MCP conformance suite's
// auth scenarios drive (`conformance client --suite auth --command ...`).
// It connects through mcpconn, as ipybox does, so the suite tests ipybox's
// OAuth glue: the server's config is what a user would register, the
// authorization URL goes to an Options.OAuthURL that plays the browser
// (it follows the redirects, which end at mcpconn's loopback listener),
// and tokens go to a token file in a temporary folder.
//
// Usage: conformance-client SERVER_URL, with MCP_CONFORMANCE_SCENARIO and
// (for pre-registered clients) MCP_CONFORMANCE_CONTEXT set by the suite.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ipybox/ipybox/internal/mcpconn"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatalf("usage: %s SERVER_URL (with MCP_CONFORMANCE_SCENARIO set)", os.Args[0])
	}
	if err := run(os.Args[1], os.Getenv("MCP_CONFORMANCE_SCENARIO"), os.Getenv("MCP_CONFORMANCE_CONTEXT")); err != nil {
		log.Fatal(err)
	}
}

func run(serverURL, scenario, confCtx string) error {
	var cc struct {
		ClientID     string `json:"client_id"`
		ClientSecret string `json:"client_secret"`
	}
	if confCtx != "" {
		if err := json.Unmarshal([]byte(confCtx), &cc); err != nil {
			return fmt.Errorf("MCP_CONFORMANCE_CONTEXT: %v", err)
		}
	}
	// Most scenarios run with the plain {"url": ...} config: OAuth by
	// discovery and dynamic registration, with no oauth block.
	cfg := mcpconn.Config{URL: serverURL}
	env := map[string]string{}
	if scenario == "auth/basic-cimd" {
		// A client ID metadata document; the suite's server does not fetch it.
		cfg.OAuth = &mcpconn.OAuthConfig{ClientMetadataURL: "https://conformance-test.local/client-metadata.json"}
	}
	if cc.ClientID != "" {
		// A pre-registered client, configured as a user would: the secret
		// as a ${VAR} placeholder.
		cfg.OAuth = &mcpconn.OAuthConfig{ClientID: cc.ClientID}
		if cc.ClientSecret != "" {
			cfg.OAuth.ClientSecret = "${CONFORMANCE_CLIENT_SECRET}"
			env["CONFORMANCE_CLIENT_SECRET"] = cc.ClientSecret
		}
		if strings.HasPrefix(scenario, "auth/client-credentials") {
			cfg.OAuth.Grant = mcpconn.GrantClientCredentials
		}
	}
	reg := mcpconn.NewRegistry()
	if err := reg.Add("conformance", cfg); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "ipybox-conformance-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	m, err := mcpconn.New(reg, &mcpconn.Options{
		Logger:           slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})),
		LookupEnv:        func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		TokenFile:        filepath.Join(dir, "tokens.json"),
		OAuthURL:         browse,
		ConnectTimeout:   20 * time.Second,
		AuthorizeTimeout: 20 * time.Second,
	})
	if err != nil {
		return err
	}
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	if _, err := m.ListTools(ctx, "conformance"); err != nil {
		return err
	}
	if _, err := m.CallTool(ctx, "conformance", "test-tool", map[string]any{}); err != nil {
		return err
	}
	return nil
}

// browse plays the user's browser: the suite's authorization server
// approves at once and redirects to mcpconn's listener, which the client
// follows.
func browse(ctx context.Context, server, authURL string) error {
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, authURL, nil)
		if err != nil {
			log.Printf("browser: %v", err)
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Printf("browser: %v", err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}()
	return nil
}
