package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ipybox/ipybox/internal/escape"
	"github.com/ipybox/ipybox/internal/mcpconn"
)

const authUsage = `
Usage: ipybox auth login [--workspace DIR] SERVER
       ipybox auth status [--workspace DIR]
       ipybox auth logout [--workspace DIR] SERVER

Manages OAuth sign-ins to remote MCP servers. SERVER is the name of a server
registered in the workspace (.ipybox/servers.json), or its URL.

login   signs in now: prints the authorization URL to open in a browser, waits
        for the browser to come back to a listener on 127.0.0.1, and stores
        the token (or, for the client_credentials grant, checks the client).
status  lists the stored sign-ins and the workspace's remote servers.
logout  forgets the stored sign-in of SERVER (the authorization server is not
        told; revoke the grant there to end it).

Tokens are kept on this host only, in $XDG_CONFIG_HOME/ipybox/oauth-tokens.json
(~/.config/ipybox/ on Linux; mode 0600), keyed by workspace, server name and
URL. A sign-in is used only in the workspace (a tenant's folder, with several
principals) and under the name it was made for, so the approval rules on that
name hold for every call made with it, and the operator of another workspace,
who may have configured no such server, never finds it used there: the same
URL registered under another name, or in another workspace, signs in anew.
The workspace is DIR as an absolute path (links are not followed). They never
reach the kernel, servers.json or the logs.
`

func authCommand() *command {
	return &command{name: "auth", summary: "sign in to remote MCP servers with OAuth (login, status, logout)", run: runAuth}
}

func runAuth(ctx context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet(env, "auth", authUsage)
	workspace := fs.String("workspace", ".", "the workspace `DIR` whose servers.json and .env name the servers")
	timeout := fs.Duration("timeout", mcpconn.DefaultAuthorizeTimeout, "bound on waiting for the browser to come back")
	sub, done, code := parseSubcommand(fs, env, args)
	if done {
		return code
	}
	want := map[string]int{"login": 1, "logout": 1, "status": 0}
	n, ok := want[sub]
	if !ok {
		fmt.Fprintf(env.stderr, "ipybox auth: unknown subcommand %q; use login, status or logout (see `ipybox help auth`)\n", sub)
		return exitUsage
	}
	if fs.NArg() != n {
		if n == 1 {
			fmt.Fprintf(env.stderr, "ipybox auth %s: name one SERVER (a registered name or a URL), after the flags\n", sub)
		} else {
			fmt.Fprintf(env.stderr, "ipybox auth %s: takes no arguments\n", sub)
		}
		return exitUsage
	}
	reg, dot, err := loadWorkspaceServers(*workspace)
	if err != nil {
		fmt.Fprintf(env.stderr, "ipybox auth %s: %v\n", sub, err)
		return exitFail
	}
	// The sign-ins are the workspace's: bound to it as ipybox mcp and
	// the library bind theirs (their WorkDir, made absolute).
	ws, err := mcpconn.SignInWorkspace(*workspace)
	if err != nil {
		fmt.Fprintf(env.stderr, "ipybox auth %s: %v\n", sub, err)
		return exitFail
	}
	switch sub {
	case "login":
		return authLogin(ctx, env, ws, reg, dot, fs.Arg(0), *timeout)
	case "logout":
		return authLogout(env, ws, reg, dot, fs.Arg(0))
	default:
		return authStatus(env, ws, reg, dot)
	}
}

// loadWorkspaceServers reads a workspace's registry and .env.
func loadWorkspaceServers(workspace string) (*mcpconn.Registry, map[string]string, error) {
	reg, err := mcpconn.LoadRegistry(filepath.Join(workspace, ".ipybox", "servers.json"))
	if err != nil {
		return nil, nil, err
	}
	dot, err := mcpconn.LoadDotEnv(filepath.Join(workspace, ".env"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("workspace .env: %w", err)
	}
	return reg, dot, nil
}

// resolveServer turns SERVER (a registered name, or the URL of one) into
// a registry holding it and its name there. A sign-in is bound to the
// server's name (a rule on that name governs every call made with it), so
// a URL stands for the workspace's server at that URL, and one that no
// name registers is refused.
func resolveServer(reg *mcpconn.Registry, dot map[string]string, arg string) (*mcpconn.Registry, string, error) {
	if _, ok := reg.Get(arg); ok {
		return reg, arg, nil
	}
	if strings.HasPrefix(arg, "http://") || strings.HasPrefix(arg, "https://") {
		var at []string
		for _, n := range reg.Names() {
			if u, err := serverURL(reg, dot, n); err == nil && u == arg {
				at = append(at, n)
			}
		}
		switch len(at) {
		case 1:
			return reg, at[0], nil
		case 0:
			return nil, "", fmt.Errorf("no server at %s in the workspace: a sign-in is made for a server's name, so that the approval rules on that name hold for every call it makes; register the server (or add it to --mcp-config) and sign in with its name", showURL(arg))
		}
		return nil, "", fmt.Errorf("several servers at %s in the workspace (%s): a sign-in is made for one name; name the server", showURL(arg), strings.Join(at, ", "))
	}
	names := reg.Names()
	if len(names) == 0 {
		return nil, "", fmt.Errorf("no server %q: the workspace registers no servers; name a registered server or give its URL (or use --workspace)", arg)
	}
	return nil, "", fmt.Errorf("no server %q in the workspace; registered: %s (or give the server's URL)", arg, strings.Join(names, ", "))
}

// serverURL is the expanded URL of a registered server.
func serverURL(reg *mcpconn.Registry, dot map[string]string, name string) (string, error) {
	cfg, _ := reg.Get(name)
	exp, err := cfg.Expand(lookupWith(dot))
	if err != nil {
		return "", err
	}
	return exp.URL, nil
}

func lookupWith(dot map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		if v, ok := os.LookupEnv(k); ok {
			return v, true
		}
		v, ok := dot[k]
		return v, ok
	}
}

func authLogin(ctx context.Context, env *cliEnv, ws string, reg *mcpconn.Registry, dot map[string]string, arg string, timeout time.Duration) int {
	reg, name, err := resolveServer(reg, dot, arg)
	if err != nil {
		fmt.Fprintf(env.stderr, "ipybox auth login: %v\n", err)
		return exitUsage
	}
	m, err := mcpconn.New(reg, &mcpconn.Options{
		Workspace:        ws,
		DotEnv:           dot,
		OAuthURL:         printAuthURL(env.stderr, "ipybox auth login"),
		AuthorizeTimeout: timeout,
	})
	if err != nil {
		fmt.Fprintf(env.stderr, "ipybox auth login: %v\n", err)
		return exitUsage
	}
	defer m.Close()
	if err := m.Login(ctx, name); err != nil {
		fmt.Fprintf(env.stderr, "ipybox auth login: %v\n", err)
		return exitFail
	}
	fmt.Fprintf(env.stdout, "signed in to %s\n", escape.Text(arg))
	return exitOK
}

func authLogout(env *cliEnv, ws string, reg *mcpconn.Registry, dot map[string]string, arg string) int {
	reg, name, err := resolveServer(reg, dot, arg)
	if err != nil {
		fmt.Fprintf(env.stderr, "ipybox auth logout: %v\n", err)
		return exitUsage
	}
	u, err := serverURL(reg, dot, name)
	if err != nil {
		fmt.Fprintf(env.stderr, "ipybox auth logout: %v\n", err)
		return exitFail
	}
	had, err := mcpconn.DeleteToken("", ws, name, u)
	if err != nil {
		fmt.Fprintf(env.stderr, "ipybox auth logout: %v\n", err)
		return exitFail
	}
	if !had {
		fmt.Fprintf(env.stdout, "no stored sign-in for %s\n", escape.Text(arg))
		return exitOK
	}
	fmt.Fprintf(env.stdout, "signed out of %s (the authorization server still honours its tokens until they expire; revoke the grant there to end them)\n", escape.Text(arg))
	return exitOK
}

func authStatus(env *cliEnv, ws string, reg *mcpconn.Registry, dot map[string]string) int {
	file, err := mcpconn.DefaultTokenFile()
	if err != nil {
		fmt.Fprintf(env.stderr, "ipybox auth status: %v\n", err)
		return exitFail
	}
	stored, err := mcpconn.ListTokens(file)
	if err != nil {
		fmt.Fprintf(env.stderr, "ipybox auth status: %v\n", err)
		return exitFail
	}
	fmt.Fprintf(env.stdout, "tokens: %s\n\n", file)
	// The workspace's remote servers and their URLs.
	type key struct{ name, url string }
	var remote []key
	for _, n := range reg.Names() {
		if cfg, _ := reg.Get(n); cfg.URL == "" {
			continue
		}
		u, err := serverURL(reg, dot, n)
		if err != nil {
			u = "(" + err.Error() + ")"
		}
		remote = append(remote, key{n, u})
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tURL\tSTATUS")
	seen := map[key]bool{}
	now := time.Now()
	for _, s := range stored {
		switch {
		case s.Old && s.Server == "":
			// Stored by URL alone, by an ipybox before sign-ins were bound
			// to names: no registration uses it.
			fmt.Fprintf(tw, "%s\t%s\t%s\n", "-", showURL(s.URL), "signed in by an older ipybox, not used: sign in again by name")
			continue
		case s.Old:
			// Stored by name and URL, by an ipybox before sign-ins were
			// bound to a workspace: no registration uses it.
			fmt.Fprintf(tw, "%s\t%s\t%s\n", escape.Text(s.Server), showURL(s.URL), "signed in by an older ipybox for any workspace, not used: sign in again")
			continue
		case s.Workspace != ws:
			where := "no workspace (ipybox apigen)"
			if s.Workspace != "" {
				where = "the workspace " + escape.Text(s.Workspace)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", escape.Text(s.Server), showURL(s.URL), "signed in for "+where+", not used here")
			continue
		}
		seen[key{s.Server, s.URL}] = true
		fmt.Fprintf(tw, "%s\t%s\t%s\n", escape.Text(s.Server), showURL(s.URL), tokenState(s, now))
	}
	for _, k := range remote {
		if !seen[k] {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", escape.Text(k.name), showURL(k.url), "not signed in")
		}
	}
	tw.Flush()
	return exitOK
}

func tokenState(s mcpconn.StoredToken, now time.Time) string {
	var st string
	switch {
	case s.Expiry.IsZero():
		st = "signed in (no expiry given)"
	case s.Expiry.After(now):
		st = "signed in, expires in " + approx(s.Expiry.Sub(now))
	default:
		st = "access token expired " + approx(now.Sub(s.Expiry)) + " ago"
	}
	if s.Refreshable {
		st += ", refreshable"
	} else {
		st += ", no refresh token"
	}
	return st
}

// showURL shows a server URL without its query, which may hold an
// expanded ${VAR} secret such as an API key.
func showURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	q := ""
	if u.RawQuery != "" {
		q = "?…"
	}
	u.RawQuery, u.User = "", nil
	return escape.Text(u.String() + q)
}

// approx shows d to the minute, or to the second under a minute.
func approx(d time.Duration) string {
	switch {
	case d >= time.Hour:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	case d >= time.Minute:
		return fmt.Sprintf("%dm", int(d.Round(time.Minute).Minutes()))
	}
	return fmt.Sprintf("%ds", int(d.Round(time.Second).Seconds()))
}

// printAuthURL returns an OAuthURL callback that prints the authorization
// URL for the user to open.
func printAuthURL(w io.Writer, cmd string) func(ctx context.Context, server, url string) error {
	return func(_ context.Context, server, url string) error {
		fmt.Fprintf(w, "%s: MCP server %s needs you to sign in; open this URL in a browser on this machine:\n\n  %s\n\n", cmd, escape.Text(server), escape.Text(url))
		return nil
	}
}
