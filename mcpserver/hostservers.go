package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/approvaltext"
	"github.com/ipybox/ipybox/internal/escape"
	"github.com/ipybox/ipybox/internal/mcpconn"
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
// (docs/design.md, invariant 14.)

// errHostServer is the refusal of a stdio server that would run on the
// host.
var errHostServer = errors.New("a stdio server registered through register_mcp_server runs its command on this host, and this ipybox mcp has no sandbox to run it in (its kernels run unsandboxed, in a container or on a gateway); " +
	"ask the operator to add the server to --mcp-config, to run ipybox mcp with the sandbox, or to allow host servers with --allow-host-servers (every client that can call tools can then run commands on the host)")

// gateServer returns the config a server registered through the tool is
// recorded with: the client's (Origin), which gets no ${VAR} filling
// from the host unless this run allows host servers, and
// for a stdio server the intent "sandbox": true, or the registration is
// refused. The policy itself is not recorded: gateStart applies the
// policy of the run that starts the server, so that a narrower one later
// (an --allowed-domain less) holds for it too.
func (s *Server) gateServer(cfg ipybox.ServerConfig) (ipybox.ServerConfig, error) {
	cfg.Origin = mcpconn.OriginClient
	if _, err := mcpconnConfig(cfg).Expand(func(string) (string, bool) { return "", false }); err != nil && !s.opts.AllowHostServers {
		return cfg, fmt.Errorf("server_params: %w", err)
	}
	if t, _ := mcpconnConfig(cfg).Transport(); t != mcpconn.Stdio || s.opts.AllowHostServers {
		return cfg, nil
	}
	if raw := bytes.TrimSpace(cfg.Sandbox); len(raw) > 0 && !bytes.Equal(raw, []byte("true")) {
		return cfg, errors.New(`server_params.factory.sandbox: a stdio server registered here runs in the sandbox under this server's policy, which a client does not choose; leave "sandbox" out`)
	}
	if s.factory.sandbox == nil {
		return cfg, errHostServer
	}
	cfg.Sandbox = json.RawMessage("true")
	return cfg, nil
}

// gateStart is the tenant's executors' Options.ServerGate: a stdio server
// that a client registered passes the gate again at every start, under
// this run's flags, wherever it comes from (this run's registration, or
// servers.json of an earlier run, made under --allow-host-servers or
// before the gate existed). It runs sandboxed under this run's policy, or
// on the host when this run allows host servers (or the user approved
// this very config in this run), or it is refused. An entry without
// Origin (ipybox before it) that is not the operator's --mcp-config
// server of that name counts as a client's.
func (t *tenant) gateStart(name string, cfg ipybox.ServerConfig) (ipybox.ServerConfig, error) {
	s := t.s
	if op, operator := s.opts.Servers[name]; cfg.Origin != mcpconn.OriginClient && operator {
		if !sameConfig(op, cfg) {
			// servers.json lies in the workspace, which kernel code writes
			// where no sandbox keeps it out (the Docker image, --no-sandbox):
			// an entry under an operator's name runs only as the operator
			// configured it.
			return cfg, fmt.Errorf("servers.json's entry for %q is not the --mcp-config server of that name (something rewrote it; kernel code can write the workspace where it runs unsandboxed); it is not started: remove the entry, and ipybox mcp records the operator's config again at its next start", name)
		}
		return cfg, nil
	}
	if t.hostApproved(name, cfg) {
		return cfg, nil
	}
	if s.opts.AllowHostServers && (!mcpconnConfig(cfg).SandboxRequested() || s.factory.sandbox == nil) {
		return cfg, nil
	}
	if s.factory.sandbox == nil {
		return cfg, fmt.Errorf("a client registered this stdio server, which would run its command on this host, and this ipybox mcp has no sandbox to run it in; it starts on the host only when the operator runs ipybox mcp with --allow-host-servers (every client that can call tools can then run commands on the host), or adds it to --mcp-config")
	}
	b, err := json.Marshal(s.factory.sandbox)
	if err != nil {
		return cfg, fmt.Errorf("the sandbox policy: %w", err)
	}
	cfg.Sandbox = b
	return cfg, nil
}

// approveHost records that the user approved cfg as name's host server
// (askHostServer), for this run; hostApproved reports it.
func (t *tenant) approveHost(name string, cfg ipybox.ServerConfig) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.hostOK == nil {
		t.hostOK = map[string]ipybox.ServerConfig{}
	}
	t.hostOK[name] = cfg
}

func (t *tenant) hostApproved(name string, cfg ipybox.ServerConfig) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ok, had := t.hostOK[name]
	return had && reflect.DeepEqual(ok, cfg)
}

// askHostServer asks the person at the client whether the stdio server
// name may run on this host, unsandboxed, as cfg says: with --approval
// elicit, and a client that can be asked. Otherwise, or when the person
// declines, the registration is refused.
func (s *Server) askHostServer(ctx context.Context, req *mcp.CallToolRequest, name string, cfg ipybox.ServerConfig) error {
	if s.opts.Approvals.Mode != ApprovalElicit || req == nil || req.Session == nil {
		return errHostServer
	}
	if ip := req.Session.InitializeParams(); ip == nil || ip.Capabilities == nil || ip.Capabilities.Elicitation == nil {
		return fmt.Errorf("%w; this MCP client does not support elicitation, so it cannot be asked instead", errHostServer)
	}
	if !legacyClient(req.Session) {
		// 2026-07-28 asks through multi round-trip results, which a
		// registration does not make (a cell's approvals do).
		return fmt.Errorf("%w; this MCP client (protocol 2026-07-28) cannot be asked about it during a registration", errHostServer)
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("server_params: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Approvals.Timeout)
	defer cancel()
	res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{
		Mode: "form",
		Message: fmt.Sprintf("ipybox: the agent wants to register the MCP server %s, which runs a command on this host, unsandboxed, with your rights:\n\n%s\n\nAccept to run it, decline to refuse.",
			escape.Text(name), approvaltext.Args(raw)),
		RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{}},
	})
	switch {
	case err != nil:
		return fmt.Errorf("%w; asking the MCP client instead failed: %v", errHostServer, err)
	case res.Action != "accept":
		return fmt.Errorf("the user did not allow the MCP server %s to run on this host (%s); the operator can add it to --mcp-config, or run ipybox mcp with the sandbox", quote(name), res.Action)
	}
	s.log.Info("a stdio server registered through the tool runs on the host: the user accepted it", "server", name, "command", cfg.Command)
	return nil
}

// mcpconnConfig is cfg as mcpconn takes it: the two share their JSON form
// (the registry's), so a round trip through it converts every field.
func mcpconnConfig(cfg ipybox.ServerConfig) mcpconn.Config {
	var m mcpconn.Config
	if b, err := json.Marshal(cfg); err == nil {
		json.Unmarshal(b, &m)
	}
	return m
}

// sameConfig reports whether two configs are the same server, Origin
// aside: their JSON forms, with the raw values (Sandbox) compacted.
func sameConfig(a, b ipybox.ServerConfig) bool {
	norm := func(c ipybox.ServerConfig) []byte {
		c.Origin = ""
		if len(c.Sandbox) > 0 {
			var buf bytes.Buffer
			if json.Compact(&buf, c.Sandbox) == nil {
				c.Sandbox = buf.Bytes()
			}
		}
		raw, err := json.Marshal(c)
		if err != nil {
			return nil
		}
		return raw
	}
	x, y := norm(a), norm(b)
	return x != nil && bytes.Equal(x, y)
}
