package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv"
)

// TestMCPHTTPUnauthorized: a request to ipybox mcp --http without the
// right bearer token gets a 401 whose WWW-Authenticate says why (RFC 6750
// error and error_description) and advertises no OAuth
// (resource_metadata); the OAuth endpoints a client probes next are not
// found, with the fix in the body.
func TestMCPHTTPUnauthorized(t *testing.T) {
	t.Parallel()
	srv := startHTTP(t, "--no-sandbox", "--pool", "0", "--workspace", t.TempDir())
	for _, tc := range []struct {
		name, auth, error, desc string
	}{
		{"no token", "", `error="invalid_request"`, `error_description="no bearer token: ipybox mcp needs Authorization: Bearer <token>`},
		{"wrong token", "Bearer not-the-token-0123456789", `error="invalid_token"`, `error_description="the bearer token is wrong: send Authorization: Bearer <token>`},
	} {
		req, _ := http.NewRequest("POST", srv.url, strings.NewReader(`{}`))
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		ch := resp.Header.Get("WWW-Authenticate")
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(ch, `Bearer realm="ipybox", `) ||
			!strings.Contains(ch, tc.error) || !strings.Contains(ch, tc.desc) || strings.Contains(ch, "resource_metadata") {
			t.Errorf("%s: %d, WWW-Authenticate %q", tc.name, resp.StatusCode, ch)
		}
	}
	base := strings.TrimSuffix(srv.url, "/mcp")
	for _, p := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-authorization-server", "/register"} {
		resp, err := http.Post(base+p, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || !strings.HasPrefix(b.String(), "ipybox mcp offers no OAuth") {
			t.Errorf("%s: %d %q", p, resp.StatusCode, b.String())
		}
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestMCPHTTPUnauthorizedClients: what the real clients print for a
// missing or wrong token. The MCP TypeScript SDK starts an OAuth flow on
// any 401 when the client has an OAuth provider, whatever
// WWW-Authenticate says; the flow then ends at the client registration,
// whose answer carries ipybox's fix. A client that does not start OAuth
// shows the 401's own text.
func TestMCPHTTPUnauthorizedClients(t *testing.T) {
	t.Parallel()
	node := testenv.NPMBin(t, "node")
	insp := testenv.NPMBin(t, "inspector")
	srv := startHTTP(t, "--no-sandbox", "--pool", "0", "--workspace", t.TempDir())
	const wrong = "not-the-token-0123456789"
	const wrongText = "ipybox mcp: the bearer token is wrong: send Authorization: Bearer <token> with the token of ipybox mcp's --auth-token-file"
	const noOAuth = "Dynamic Client Registration rejected (HTTP 404): ipybox mcp offers no OAuth (no authorization server, no client registration)"
	run := func(env []string, name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdin = nil // no terminal
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	// The Inspector's CLI: without a terminal it refuses the OAuth flow
	// it would start ("Interactive OAuth requires a TTY"), before any
	// request of it reaches the server; --stored-auth-only shows the
	// 401's text, and with a terminal (MCP_AUTO_OPEN_ENABLED=true stands
	// for one) the flow ends at the registration.
	base := []string{insp, "--cli", srv.url, "--transport", "http", "--method", "tools/list"}
	out := run(nil, node, append(base, "--header", "Authorization: Bearer "+wrong, "--stored-auth-only")...)
	t.Logf("inspector --cli, wrong token, --stored-auth-only:\n%s", out)
	if !strings.Contains(out, wrongText) {
		t.Errorf("inspector, wrong token, --stored-auth-only: want %q", wrongText)
	}
	out = run([]string{"MCP_AUTO_OPEN_ENABLED=true", "BROWSER=/bin/false", "MCP_INSPECTOR_SECRET_STORE=memory"}, node, base...)
	t.Logf("inspector --cli, no token, as on a terminal:\n%s", out)
	if !strings.Contains(out, noOAuth) {
		t.Errorf("inspector, no token: want %q", noOAuth)
	}

	// Claude Code: with the README's --header it does not start OAuth and
	// shows the 401's text; without a header it starts one, which ends at
	// the registration.
	claude := filepath.Join(testenv.RepoRoot(t), "tools", "claude", "node_modules", ".bin", "claude")
	if _, err := os.Stat(claude); err != nil {
		testenv.Missing(t, "%s not installed; run scripts/setup-claude.sh", claude)
	}
	for _, tc := range []struct {
		name   string
		header []string
		want   string
	}{
		{"wrong token", []string{"--header", "Authorization: Bearer " + wrong}, "(HTTP 401). Check that the token is valid for this MCP endpoint — OAuth fallback is disabled when headers.Authorization is set. Error detail: " + wrongText},
		{"no token", nil, noOAuth},
	} {
		home := t.TempDir()
		project := filepath.Join(home, "project")
		os.Mkdir(project, 0o755)
		env := []string{"HOME=" + home, "CLAUDE_CONFIG_DIR=" + filepath.Join(home, ".claude"), "DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}
		for _, kv := range os.Environ() {
			if strings.HasPrefix(kv, "ANTHROPIC_") {
				k, _, _ := strings.Cut(kv, "=")
				env = append(env, k+"=")
			}
		}
		sh := func(args ...string) string {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, claude, args...)
			cmd.Dir = project
			cmd.Env = append(os.Environ(), env...)
			cmd.WaitDelay = 10 * time.Second
			out, _ := cmd.CombinedOutput()
			return string(out)
		}
		sh(slices.Concat([]string{"mcp", "add", "--transport", "http", "ipybox", srv.url}, tc.header)...)
		out := sh("mcp", "list")
		t.Logf("claude mcp list, %s:\n%s", tc.name, out)
		if !strings.Contains(out, tc.want) {
			t.Errorf("claude mcp list, %s: want %q", tc.name, tc.want)
		}
	}
}
