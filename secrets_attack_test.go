package ipybox_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// syncBuffer is a buffer safe for concurrent writers and readers.
type syncBuffer = testenv.Buffer

// TestAttackSecretsInErrors: no expanded ${VAR} value reaches kernel code
// (in a ToolError), the Go caller (a registration error) or the logs, on any
// transport and whatever fails: the server down, refusing, answering 401,
// timing out, or a command that does not start or dies printing its token.
func TestAttackSecretsInErrors(t *testing.T) {
	t.Parallel()
	const secret = "sk-live-9f8e7d6c5b4a3210" // long and distinctive
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ex := start(t, &ipybox.Options{
		Logger: log, DotEnv: map[string]string{"KEY": secret, "CMD": "/nonexistent/" + secret},
		NoToolApproval: true, ToolCallTimeout: 3 * time.Second,
	})
	ctx := context.Background()
	leaks := func(where, text string) {
		t.Helper()
		for _, form := range []string{secret, strings.ReplaceAll(secret, "-", "%2D")} {
			if strings.Contains(text, form) {
				t.Errorf("%s holds the secret: %s", where, text)
			}
		}
	}

	// 1. Registered while up, called while down: the kernel's ToolError.
	h, shutdown := mcptest.Handler("http", nil)
	srv := httptest.NewServer(h)
	url := srv.URL + "/mcp?api_key=${KEY}"
	if _, err := ex.RegisterMCPServer(ctx, "up", ipybox.ServerConfig{URL: url, Headers: map[string]string{"Authorization": "Bearer ${KEY}"}}); err != nil {
		t.Fatal(err)
	}
	shutdown()
	srv.CloseClientConnections()
	srv.Close()
	res, err := ex.Execute(ctx, `from mcptools.up.tool_1 import Params, run
try:
    run(Params(s="x"))
except Exception as e:
    print(type(e).__name__, e)`, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Text, "ToolError") {
		t.Errorf("the call to a down server did not fail as a ToolError: %q", res.Text)
	}
	leaks("the kernel's ToolError", res.Text)

	// 2. Registrations that fail: refused, 401, silent, a missing command,
	// a command that prints its token and dies.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().String()
	ln.Close()
	unauthorized := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="x"`)
		http.Error(w, "bad token "+r.Header.Get("Authorization")+" for "+r.URL.String(), http.StatusUnauthorized)
	}))
	defer unauthorized.Close()
	silent, _ := net.Listen("tcp", "127.0.0.1:0")
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close() // hold the connection, answer nothing
		}
	}()
	for name, cfg := range map[string]ipybox.ServerConfig{
		"refused":      {URL: "http://" + closed + "/mcp?api_key=${KEY}"},
		"sse-refused":  {URL: "http://" + closed + "/sse?api_key=${KEY}", Headers: map[string]string{"X-Key": "${KEY}"}},
		"unauthorized": {URL: unauthorized.URL + "/mcp?api_key=${KEY}", Headers: map[string]string{"Authorization": "Bearer ${KEY}"}},
		"silent":       {URL: "http://" + silent.Addr().String() + "/mcp?k=${KEY}"},
		"no-command":   {Command: "${CMD}", Args: []string{"--token", "${KEY}"}},
		"prints-token": {Command: "/bin/sh", Args: []string{"-c", "echo token is $TOKEN >&2; exit 3"}, Env: map[string]string{"TOKEN": "${KEY}"}},
	} {
		ctx, cancel := context.WithTimeout(ctx, 6*time.Second)
		_, err := ex.RegisterMCPServer(ctx, strings.ReplaceAll(name, "-", "_"), cfg)
		cancel()
		if err == nil {
			t.Errorf("%s: registration succeeded", name)
			continue
		}
		leaks(name+"'s registration error", err.Error())
	}
	leaks("the executor's log", logs.String())
	if !strings.Contains(logs.String(), "token is <redacted>") {
		t.Errorf("the stdio server's stderr was not logged (scrubbed): the check proves nothing\n%s", logs.String())
	}
}
