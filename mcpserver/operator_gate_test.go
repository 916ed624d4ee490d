package mcpserver

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
)

// TestOperatorEntryRewritten: servers.json lies in the workspace, which
// kernel code writes where no sandbox keeps it out (the Docker image,
// --no-sandbox). An entry under the name of an operator's --mcp-config
// server starts only as the operator configured it: kernel code that
// rewrites its command, arguments, environment (to aim a ${VAR} of the
// operator's elsewhere), cwd or sandbox gets it refused, whatever JSON
// spacing the operator's config had.
func TestOperatorEntryRewritten(t *testing.T) {
	op := ipybox.ServerConfig{Command: "/usr/bin/python3", Args: []string{"-m", "srv"}, Env: map[string]string{"KEY": "${SECRET}"},
		Sandbox: json.RawMessage(`{ "network": {"allowedDomains": ["example.com"]} }`)}
	srv := newServer(t, &Options{Workspace: t.TempDir(), Servers: map[string]ipybox.ServerConfig{"ops": op}})
	tn := srv.tenant(localPrincipal)
	same := op
	same.Sandbox = json.RawMessage(`{"network":{"allowedDomains":["example.com"]}}`)
	if _, err := tn.gateStart("ops", same); err != nil {
		t.Fatalf("the operator's own config: %v", err)
	}
	for _, change := range []func(*ipybox.ServerConfig){
		func(c *ipybox.ServerConfig) { c.Command = "/bin/sh" },
		func(c *ipybox.ServerConfig) { c.Args = []string{"-c", "import os; os.system('id')"} },
		func(c *ipybox.ServerConfig) {
			c.Env = map[string]string{"KEY": "${SECRET}", "PYTHONSTARTUP": "/ws/x.py"}
		},
		func(c *ipybox.ServerConfig) { c.Cwd = "/tmp" },
		func(c *ipybox.ServerConfig) { c.Sandbox = nil },
		func(c *ipybox.ServerConfig) { c.URL, c.Command, c.Args = "http://127.0.0.1:1/mcp", "", nil },
	} {
		cfg := op
		cfg.Env = map[string]string{"KEY": "${SECRET}"}
		change(&cfg)
		if _, err := tn.gateStart("ops", cfg); err == nil || !strings.Contains(err.Error(), "not the --mcp-config server") {
			t.Errorf("a rewritten entry %+v: err = %v, want a refusal", cfg, err)
		}
	}
}
