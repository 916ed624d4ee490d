package mcpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ipybox/ipybox"
)

// Registering a stdio server runs its command, and register_mcp_server
// takes the command from the client: over HTTP, from anyone who holds a
// token; over stdio, from a model that text in its context can steer. So
// a stdio server registered through the tool runs in the sandbox, under
// the server's own policy (the kernels' Options.Sandbox: its masks, its
// limits, and its network allowlist, through an egress proxy of the
// server's own), unless the operator allows host servers
// (Options.AllowHostServers, ipybox mcp --allow-host-servers). With no
// sandbox (unsandboxed, container or gateway kernels), it is refused.
// Servers of Options.Servers (the operator's --mcp-config) run as they
// are configured; so do those an application registers through the Go
// API (ipybox.Executor.RegisterMCPServer): they are the operator's own.
// (DESIGN.md invariant 14.)

// errHostServer is the refusal of a stdio server that would run on the
// host.
var errHostServer = errors.New("a stdio server registered through register_mcp_server runs its command on this host, and this ipybox mcp has no sandbox to run it in (its kernels run unsandboxed, in a container or on a gateway); " +
	"ask the operator to add the server to --mcp-config, to run ipybox mcp with the sandbox, or to allow host servers with --allow-host-servers (every client that can call tools can then run commands on the host)")

// gateServer returns the config a server registered through the tool
// runs with: a stdio server's sandbox is the kernels' policy, or the
// registration is refused.
func (s *Server) gateServer(cfg ipybox.ServerConfig) (ipybox.ServerConfig, error) {
	if t, _ := cfg.Transport(); t != "stdio" || s.opts.AllowHostServers {
		return cfg, nil
	}
	if raw := bytes.TrimSpace(cfg.Sandbox); len(raw) > 0 && !bytes.Equal(raw, []byte("true")) {
		return cfg, errors.New(`server_params.sandbox: a stdio server registered here runs in the sandbox under this server's policy, which a client does not choose; leave "sandbox" out`)
	}
	if s.sandbox == nil {
		return cfg, errHostServer
	}
	b, err := json.Marshal(s.sandbox)
	if err != nil {
		return cfg, fmt.Errorf("server_params: the sandbox policy: %w", err)
	}
	cfg.Sandbox = b
	return cfg, nil
}
