// Package mcpconn holds the host side's MCP server configs and sessions.
//
// A Registry maps server names (valid Python identifiers, since each
// becomes the module mcptools.<name>) to Configs. A Manager opens a session
// per server on first use and keeps it:
//
//	reg := mcpconn.NewRegistry()
//	reg.Add("github", mcpconn.Config{
//		URL:     "https://api.githubcopilot.com/mcp/",
//		Headers: map[string]string{"Authorization": "Bearer ${GITHUB_TOKEN}"},
//	})
//	m, err := mcpconn.New(reg, nil)
//	defer m.Close()
//	tools, err := m.ListTools(ctx, "github")
//	res, err := m.CallTool(ctx, "github", "search_repositories", map[string]any{"query": "mcp"})
//
// Transports: a Config with a command is a stdio server; one with a URL
// speaks streamable HTTP, or SSE when its type says so or its path contains
// /sse. Without a type, a server that rejects the streamable HTTP initialize
// with a 4xx status is tried again over SSE.
//
// Secrets: ${VAR} placeholders in a config are replaced from the host
// environment (then from a .env file, see LoadDotEnv) only when connecting;
// the Registry and servers.json keep the placeholders. A stdio server gets
// PATH, HOME, LANG, USER, SHELL and TERM from the host plus its config's env,
// and nothing else.
//
// OAuth: a streamable HTTP server that answers 401 with an OAuth challenge
// is signed in to with the MCP Go SDK's auth package (discovery, client ID
// metadata documents, pre-registered clients or dynamic registration, PKCE),
// configured by the config's "oauth" block (OAuthConfig) if it has one. The
// authorization URL goes to Options.OAuthURL; the browser comes back to a
// listener on 127.0.0.1. Tokens are kept on the host only, in
// Options.TokenFile (DefaultTokenFile: mode 0600 under os.UserConfigDir),
// keyed by Options.Workspace, server name and URL (a sign-in is used only
// where it was made), refreshed before they expire and once on a 401. A
// server that needs a sign-in that cannot happen fails with a
// *LoginRequiredError. SSE servers cannot use OAuth (the SDK's SSE client has
// no OAuth support).
//
// Failures: a tool's failure is a result with IsError set. Go errors are for
// calls that did not complete: ErrUnknownServer, a *MissingVarError, connect
// and call timeouts (wrapping context.DeadlineExceeded), and a connection
// lost during the call. A server that died between calls is restarted by the
// next call.
package mcpconn
