package mcpconn

import (
	"errors"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		json     string
		want     Transport
		fallback bool
		err      []string // substrings of the error; nil means success
	}{
		{name: "stdio", json: `{"command": "srv", "args": ["-x"], "env": {"A": "1"}, "cwd": "/tmp"}`, want: Stdio},
		{name: "stdio typed", json: `{"type": "stdio", "command": "srv"}`, want: Stdio},
		{name: "stdio sandbox true", json: `{"command": "srv", "sandbox": true}`, want: Stdio},
		{name: "stdio sandbox object", json: `{"command": "srv", "sandbox": {"network": {"allowedDomains": ["x.org"]}}}`, want: Stdio},
		{name: "url guesses streamable", json: `{"url": "http://127.0.0.1:3000/mcp"}`, want: StreamableHTTP, fallback: true},
		{name: "url guesses sse", json: `{"url": "https://example.com/sse"}`, want: SSE},
		{name: "url sse subpath", json: `{"url": "https://example.com/v1/sse/abc"}`, want: SSE},
		{name: "sse only in query", json: `{"url": "https://example.com/mcp?x=/sse"}`, want: StreamableHTTP, fallback: true},
		{name: "type http", json: `{"type": "http", "url": "http://h/mcp"}`, want: StreamableHTTP},
		{name: "type streamable_http", json: `{"type": "streamable_http", "url": "http://h/mcp"}`, want: StreamableHTTP},
		{name: "type streamableHttp", json: `{"type": "streamableHttp", "url": "http://h/sse"}`, want: StreamableHTTP},
		{name: "type sse", json: `{"type": "sse", "url": "http://h/events"}`, want: SSE},
		{name: "headers", json: `{"url": "http://h/mcp", "headers": {"Authorization": "Bearer ${T}"}}`, want: StreamableHTTP, fallback: true},
		{name: "placeholder url", json: `{"url": "${BASE}/mcp"}`, want: StreamableHTTP, fallback: true},

		{name: "oauth", json: `{"url": "https://h/mcp", "oauth": {"clientId": "id", "clientSecret": "${S}", "scopes": ["a", "b:c"], "redirectPort": 8765}}`, want: StreamableHTTP},
		{name: "oauth empty block", json: `{"url": "https://h/mcp", "oauth": {}}`, want: StreamableHTTP},
		{name: "oauth client credentials", json: `{"url": "https://h/mcp", "oauth": {"grant": "client_credentials", "clientId": "${ID}", "clientSecret": "${S}"}}`, want: StreamableHTTP},
		{name: "oauth literal secret", json: `{"url": "https://h/mcp", "oauth": {"clientId": "id", "clientSecret": "abc123"}}`, err: []string{`"clientSecret" must be a ${VAR} placeholder`, `"clientSecret":"\u003credacted\u003e"`}},
		{name: "oauth on sse", json: `{"url": "https://h/sse", "oauth": {}}`, err: []string{`"oauth" needs the streamable HTTP transport`, "SSE client has no OAuth support"}},
		{name: "oauth on stdio", json: `{"command": "srv", "oauth": {}}`, err: []string{`"oauth" applies only to url servers`}},
		{name: "oauth bad grant", json: `{"url": "https://h/mcp", "oauth": {"grant": "password"}}`, err: []string{`unknown grant "password"`, `"authorization_code"`, `"client_credentials"`}},
		{name: "oauth cc without client", json: `{"url": "https://h/mcp", "oauth": {"grant": "client_credentials"}}`, err: []string{`needs "clientId" and "clientSecret"`}},
		{name: "oauth cc with port", json: `{"url": "https://h/mcp", "oauth": {"grant": "client_credentials", "clientId": "i", "clientSecret": "${S}", "redirectPort": 9}}`, err: []string{`"redirectPort" applies only`}},
		{name: "oauth secret without id", json: `{"url": "https://h/mcp", "oauth": {"clientSecret": "${S}"}}`, err: []string{`"clientSecret" needs "clientId"`}},
		{name: "oauth bad port", json: `{"url": "https://h/mcp", "oauth": {"redirectPort": 70000}}`, err: []string{`"redirectPort" 70000 is not a port`}},
		{name: "oauth bad scope", json: `{"url": "https://h/mcp", "oauth": {"scopes": ["a b"]}}`, err: []string{`scope "a b" is not a scope token`}},
		{name: "oauth bad metadata url", json: `{"url": "https://h/mcp", "oauth": {"clientMetadataUrl": "http://x/m.json"}}`, err: []string{`must be an https URL with a path`}},
		{name: "oauth unknown field", json: `{"url": "https://h/mcp", "oauth": {"client_id": "x"}}`, err: []string{`unknown field "client_id"`}},

		{name: "empty", json: `{}`, err: []string{`neither "command"`, "{}"}},
		{name: "both", json: `{"command": "srv", "url": "http://h/mcp"}`, err: []string{`both "command" and "url"`, `"command":"srv"`, `"url":"http://h/mcp"`}},
		{name: "unknown type", json: `{"type": "websocket", "url": "ws://h"}`, err: []string{`unknown type "websocket"`, `"stdio", "http", "streamable_http", "streamableHttp" or "sse"`}},
		{name: "type case matters", json: `{"type": "SSE", "url": "http://h/sse"}`, err: []string{`unknown type "SSE"`}},
		{name: "stdio type with url", json: `{"type": "stdio", "url": "http://h/mcp"}`, err: []string{`needs "command"`}},
		{name: "sse type with command", json: `{"type": "sse", "command": "srv"}`, err: []string{`needs "url"`}},
		{name: "headers on stdio", json: `{"command": "srv", "headers": {"A": "b"}}`, err: []string{`"headers" apply only to url servers`}},
		{name: "env on url", json: `{"url": "http://h/mcp", "env": {"A": "b"}}`, err: []string{`"env" applies only to command`}},
		{name: "args on url", json: `{"url": "http://h/mcp", "args": ["x"]}`, err: []string{`"args" apply only`}},
		{name: "sandbox on url", json: `{"url": "http://h/mcp", "sandbox": true}`, err: []string{`"sandbox" applies only`}},
		{name: "bad sandbox", json: `{"command": "srv", "sandbox": "yes"}`, err: []string{"sandbox must be true, false or a settings object"}},
		{name: "bad scheme", json: `{"url": "ftp://h/mcp"}`, err: []string{"scheme must be http or https"}},
		{name: "no host", json: `{"url": "http:///mcp"}`, err: []string{"has no host"}},
		{name: "unknown field", json: `{"command": "srv", "comand": "x"}`, err: []string{`unknown field "comand"`, "fields: command, args"}},
		{name: "unknown field hides secrets", json: `{"command": "srv", "env": {"T": "abc123"}, "x": 1}`, err: []string{`unknown field "x"`}},
		{name: "not json", json: `{"command": `, err: []string{"server config"}},
		{name: "trailing", json: `{"command": "srv"} {}`, err: []string{"trailing data"}},
		{name: "secret redacted", json: `{"command": "srv", "url": "http://h", "env": {"TOKEN": "abc123", "REF": "${X}"}}`, err: []string{`"TOKEN":"\u003credacted\u003e"`, `"REF":"${X}"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tc.json))
			if tc.err != nil {
				if err == nil {
					t.Fatalf("ParseConfig(%s): no error, want one containing %q", tc.json, tc.err)
				}
				for _, s := range tc.err {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				if strings.Contains(err.Error(), "abc123") {
					t.Errorf("error %q shows a secret", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseConfig(%s): %v", tc.json, err)
			}
			got, fallback, err := c.resolve()
			if err != nil || got != tc.want || fallback != tc.fallback {
				t.Errorf("resolve() = %q, %v, %v; want %q, %v", got, fallback, err, tc.want, tc.fallback)
			}
			if tr, _ := c.Transport(); tr != tc.want {
				t.Errorf("Transport() = %q, want %q", tr, tc.want)
			}
		})
	}
}

func TestSandboxRequested(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]bool{"": false, "false": false, "null": false, "true": true, `{}`: true, `{"a":1}`: true} {
		if got := (Config{Command: "x", Sandbox: []byte(raw)}).SandboxRequested(); got != want {
			t.Errorf("SandboxRequested(%q) = %v, want %v", raw, got, want)
		}
	}
}

func TestExpand(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"TOKEN": "s3cret", "HOST": "127.0.0.1", "EMPTY": "", "DIR": "/srv"}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	c := Config{
		Command: "${DIR}/bin/server",
		Args:    []string{"--host=${HOST}", "$HOME", "price: $5", "${EMPTY}x"},
		Env:     map[string]string{"API_KEY": "${TOKEN}", "PLAIN": "v"},
		Cwd:     "${DIR}",
		Sandbox: []byte(`{"x": "${TOKEN}"}`),
	}
	got, err := c.Expand(lookup)
	if err != nil {
		t.Fatal(err)
	}
	if got.Command != "/srv/bin/server" || got.Cwd != "/srv" {
		t.Errorf("command, cwd = %q, %q", got.Command, got.Cwd)
	}
	wantArgs := []string{"--host=127.0.0.1", "$HOME", "price: $5", "x"}
	for i := range wantArgs {
		if got.Args[i] != wantArgs[i] {
			t.Errorf("args[%d] = %q, want %q", i, got.Args[i], wantArgs[i])
		}
	}
	if got.Env["API_KEY"] != "s3cret" || got.Env["PLAIN"] != "v" {
		t.Errorf("env = %v", got.Env)
	}
	if string(got.Sandbox) != `{"x": "${TOKEN}"}` {
		t.Errorf("sandbox was substituted: %s", got.Sandbox)
	}
	// The original keeps its placeholders.
	if c.Env["API_KEY"] != "${TOKEN}" || c.Args[0] != "--host=${HOST}" || c.Command != "${DIR}/bin/server" {
		t.Errorf("Expand changed the original: %+v", c)
	}

	r := Config{URL: "http://${HOST}:8080/mcp", Headers: map[string]string{"Authorization": "Bearer ${TOKEN}"}}
	got, err = r.Expand(lookup)
	if err != nil || got.URL != "http://127.0.0.1:8080/mcp" || got.Headers["Authorization"] != "Bearer s3cret" {
		t.Errorf("remote: %+v, %v", got, err)
	}

	for _, tc := range []struct {
		cfg  Config
		want []string
		miss string
	}{
		{Config{Command: "x", Args: []string{"${NOPE}"}}, []string{"${NOPE}", "args[0]", "set NOPE"}, "NOPE"},
		{Config{URL: "http://h", Headers: map[string]string{"X-Key": "${GONE}"}}, []string{`headers["X-Key"]`}, "GONE"},
		{Config{Command: "x", Env: map[string]string{"K": "a${MISSING}b"}}, []string{`env["K"]`}, "MISSING"},
		{Config{Command: "x", Args: []string{"${UNTERMINATED"}}, []string{"unterminated"}, ""},
		{Config{Command: "x", Args: []string{"${X:-default}"}}, []string{"not a variable name", "defaults"}, ""},
		{Config{Command: "x", Args: []string{"${}"}}, []string{"not a variable name"}, ""},
		{Config{Command: "${1X}"}, []string{"command", "not a variable name"}, ""},
	} {
		_, err := tc.cfg.Expand(lookup)
		if err == nil {
			t.Errorf("Expand(%+v): no error", tc.cfg)
			continue
		}
		for _, s := range tc.want {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("Expand(%+v): error %q does not contain %q", tc.cfg, err, s)
			}
		}
		var mv *MissingVarError
		if errors.As(err, &mv) != (tc.miss != "") || tc.miss != "" && mv.Var != tc.miss {
			t.Errorf("Expand(%+v): error %v, want MissingVarError for %q", tc.cfg, err, tc.miss)
		}
	}
}
