package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/mcpconn"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// browsingWriter collects what the command prints and, like a user,
// opens the authorization URL it prints.
type browsingWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	opened int
}

var printedURL = regexp.MustCompile(`\n  (http://\S+/authorize\?\S+)\n`)

func (w *browsingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if m := printedURL.FindStringSubmatch(w.buf.String()); m != nil && w.opened == 0 {
		w.opened++
		testenv.Browse(m[1], 0, 10*time.Second)
	}
	return len(p), nil
}

func (w *browsingWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestAuthCommands: ipybox auth login prints the authorization URL and
// stores the token once the browser comes back; status shows the sign-in
// without any token; logout forgets it.
func TestAuthCommands(t *testing.T) {
	cfgHome := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfgHome)
	s := mcptest.NewOAuthServer(nil)
	t.Cleanup(s.Close)
	ws := t.TempDir()
	reg := mcpconn.NewRegistry()
	if err := reg.Add("remote", mcpconn.Config{URL: s.URL}); err != nil {
		t.Fatal(err)
	}
	if err := reg.Save(filepath.Join(ws, ".ipybox", "servers.json")); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) (int, string, string) {
		var out bytes.Buffer
		errOut := &browsingWriter{}
		env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: errOut, getenv: os.Getenv}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		code := run(ctx, env, append([]string{"auth"}, args...))
		return code, out.String(), errOut.String()
	}

	code, out, errOut := cli("status", "--workspace", ws)
	if code != 0 || !regexp.MustCompile(`remote\s+`+regexp.QuoteMeta(s.URL)+`\s+not signed in`).MatchString(out) {
		t.Errorf("status before login: %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = cli("login", "--workspace", ws, "remote")
	if code != 0 || !strings.Contains(out, "signed in to remote") || !strings.Contains(errOut, "MCP server remote needs you to sign in") {
		t.Fatalf("login: %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = cli("status", "--workspace", ws)
	if code != 0 || !regexp.MustCompile(`remote\s+`+regexp.QuoteMeta(s.URL)+`\s+signed in, expires in (60m|1h00m), refreshable`).MatchString(out) ||
		!strings.Contains(out, filepath.Join(cfgHome, "ipybox", "oauth-tokens.json")) {
		t.Errorf("status after login: %d\n%s%s", code, out, errOut)
	}
	for _, tok := range s.Tokens() {
		if strings.Contains(out+errOut, tok) {
			t.Errorf("status shows a token")
		}
	}
	// Login again replaces the sign-in.
	if code, out, errOut = cli("login", "--workspace", ws, s.URL); code != 0 {
		t.Fatalf("login by URL: %d\n%s%s", code, out, errOut)
	}
	if c := s.Counts(); c.Authorizations != 2 {
		t.Errorf("counts: %+v", c)
	}
	code, out, _ = cli("logout", "--workspace", ws, "remote")
	if code != 0 || !strings.Contains(out, "signed out of remote") {
		t.Errorf("logout: %d %s", code, out)
	}
	_, out, _ = cli("status", "--workspace", ws)
	if !strings.Contains(out, "not signed in") {
		t.Errorf("status after logout: %s", out)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"login", "--workspace", ws, "nosuch"}, exitUsage, "no server \"nosuch\" in the workspace; registered: remote"},
		{[]string{"login", "--workspace", ws}, exitUsage, "name one SERVER"},
		{[]string{"frobnicate"}, exitUsage, `unknown subcommand "frobnicate"`},
		{[]string{"status", "--workspace", ws, "extra"}, exitUsage, "takes no arguments"},
	} {
		code, out, errOut := cli(tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("auth %v: %d %s%s; want %d and %q", tc.args, code, out, errOut, tc.code, tc.want)
		}
	}
}

// TestAuthSignInBoundToWorkspace: a sign-in made with ipybox auth login in
// one workspace is that workspace's. status in another workspace that
// registers the same name and URL lists it as not used there and the
// server as not signed in; an entry of token file version 2 (name and
// URL, no workspace) is listed as unused.
func TestAuthSignInBoundToWorkspace(t *testing.T) {
	cfgHome := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfgHome)
	s := mcptest.NewOAuthServer(nil)
	t.Cleanup(s.Close)
	wsA, wsB := t.TempDir(), t.TempDir()
	for _, ws := range []string{wsA, wsB} {
		reg := mcpconn.NewRegistry()
		if err := reg.Add("remote", mcpconn.Config{URL: s.URL}); err != nil {
			t.Fatal(err)
		}
		if err := reg.Save(filepath.Join(ws, ".ipybox", "servers.json")); err != nil {
			t.Fatal(err)
		}
	}
	cli := func(args ...string) (int, string, string) {
		var out bytes.Buffer
		errOut := &browsingWriter{}
		env := &cliEnv{stdin: strings.NewReader(""), stdout: &out, stderr: errOut, getenv: os.Getenv}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		code := run(ctx, env, append([]string{"auth"}, args...))
		return code, out.String(), errOut.String()
	}
	if code, out, errOut := cli("login", "--workspace", wsA, "remote"); code != 0 {
		t.Fatalf("login: %d\n%s%s", code, out, errOut)
	}
	code, out, errOut := cli("status", "--workspace", wsB)
	if code != 0 || !regexp.MustCompile(`remote\s+`+regexp.QuoteMeta(s.URL)+`\s+not signed in`).MatchString(out) ||
		!strings.Contains(out, "signed in for the workspace "+wsA+", not used here") {
		t.Errorf("status in another workspace: %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := cli("logout", "--workspace", wsB, "remote"); code != 0 || !strings.Contains(out, "no stored sign-in") {
		t.Errorf("logout in another workspace: %d %s", code, out)
	}
	if _, out, _ := cli("status", "--workspace", wsA); !regexp.MustCompile(`remote\s+` + regexp.QuoteMeta(s.URL) + `\s+signed in, expires`).MatchString(out) {
		t.Errorf("status in the sign-in's workspace:\n%s", out)
	}
	file := filepath.Join(cfgHome, "ipybox", "oauth-tokens.json")
	os.WriteFile(file, []byte(`{"version":2,"signIns":{"remote":{"`+s.URL+`":{"clientId":"c","accessToken":"old","tokenUrl":"https://e.example/t"}}}}`), 0o600)
	if _, out, _ := cli("status", "--workspace", wsA); !strings.Contains(out, "signed in by an older ipybox for any workspace, not used") ||
		!regexp.MustCompile(`remote\s+`+regexp.QuoteMeta(s.URL)+`\s+not signed in`).MatchString(out) {
		t.Errorf("status with a version-2 entry:\n%s", out)
	}
}
