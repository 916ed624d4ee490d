package ipybox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/mcpconn"
	"github.com/ipybox/ipybox/internal/pygen"
	"github.com/ipybox/ipybox/internal/pyruntime"
	"github.com/ipybox/ipybox/internal/toolserver"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ServerConfig is an MCP server's config: a command to run (stdio) or a
// URL (streamable HTTP or SSE), in the "mcpServers" JSON format of MCP
// clients. Every string value except Type and Sandbox may hold ${VAR}
// placeholders, which are replaced when the server is started (from the
// workspace's .env and [GenerateOptions].DotEnv); the registry keeps them
// as written.
type ServerConfig struct {
	// Command is the program of a stdio server.
	Command string `json:"command,omitempty"`
	// Args are the program's arguments.
	Args []string `json:"args,omitempty"`
	// Env is added to the stdio server's minimal environment.
	Env map[string]string `json:"env,omitempty"`
	// Cwd is the stdio server's working directory. Empty means ours.
	Cwd string `json:"cwd,omitempty"`
	// URL is the endpoint of a remote server.
	URL string `json:"url,omitempty"`
	// Headers are sent with every HTTP request to URL.
	Headers map[string]string `json:"headers,omitempty"`
	// Type chooses the transport: "stdio", "http" (or its spellings
	// "streamable_http" and "streamableHttp") or "sse". Empty means: stdio
	// when Command is set; SSE when URL's path contains "/sse"; otherwise
	// streamable HTTP, falling back to SSE when the server rejects the
	// streamable HTTP initialize request with a 4xx status.
	Type string `json:"type,omitempty"`
	// Sandbox asks for the stdio server to run sandboxed: true, or a
	// [SandboxConfig] in its JSON form. Empty means unsandboxed.
	Sandbox json.RawMessage `json:"sandbox,omitempty"`
	// OAuth configures OAuth 2.1 for a streamable HTTP server. Nil still
	// gets OAuth, with discovery and dynamic client registration, when the
	// server answers 401 with an OAuth challenge and the config sets no
	// Authorization header.
	OAuth *OAuthConfig `json:"oauth,omitempty"`
	// Origin says who wrote the config: empty for the operator (a config
	// file, an application through the Go API), "client" for an MCP
	// client of ipybox mcp (register_mcp_server). A client's config gets
	// no ${VAR} filling from the host's environment or .env (unless
	// [Options].ClientVars), and ipybox mcp gates a client's stdio server
	// again at every start, under the flags of that run.
	Origin string `json:"origin,omitempty"`
}

// OAuthConfig is [ServerConfig].OAuth: a pre-registered OAuth client of a
// streamable HTTP server, its scopes and its grant.
type OAuthConfig struct {
	// ClientID is a pre-registered OAuth client. Empty means dynamic
	// client registration with the server's authorization server. It may
	// be a ${VAR} placeholder.
	ClientID string `json:"clientId,omitempty"`
	// ClientSecret is the pre-registered client's secret. It must be a
	// ${VAR} placeholder (the config is saved in servers.json, which never
	// holds secrets). Empty means a public client.
	ClientSecret string `json:"clientSecret,omitempty"`
	// Scopes are the scopes to ask for. Empty means those the server
	// names in its 401 challenge or its resource metadata.
	Scopes []string `json:"scopes,omitempty"`
	// RedirectPort is the port of the loopback redirect listener
	// (http://127.0.0.1:PORT/callback), for a pre-registered client whose
	// redirect URI is fixed. Zero means a free port.
	RedirectPort int `json:"redirectPort,omitempty"`
	// Grant is "authorization_code" (a person signs in, in a browser: the
	// default when empty) or "client_credentials" (the client signs in
	// with its ID and secret).
	Grant string `json:"grant,omitempty"`
	// ClientMetadataURL is the https URL of a client ID metadata document
	// that describes ipybox with a loopback redirect URI. It is used when
	// the authorization server supports such documents; otherwise ClientID
	// or dynamic registration is. Empty means none.
	ClientMetadataURL string `json:"clientMetadataUrl,omitempty"`
}

// ToolModule describes one generated tool module.
type ToolModule struct {
	Name string // the Python module name: "read_text_file", "tool_1"
	Tool string // the MCP tool name it calls: "read_text_file", "tool-1"
	// Signature tells how to call the tool, with the input models the
	// parameters use, e.g.
	// "run(Params(path: str, head: float | None = None)) -> Result".
	Signature string
}

// mcpConfig is c as the mcpconn package takes it.
func (c ServerConfig) mcpConfig() mcpconn.Config {
	m := mcpconn.Config{Command: c.Command, Args: c.Args, Env: c.Env, Cwd: c.Cwd, URL: c.URL,
		Headers: c.Headers, Type: c.Type, Sandbox: c.Sandbox, Origin: c.Origin}
	if o := c.OAuth; o != nil {
		m.OAuth = &mcpconn.OAuthConfig{ClientID: o.ClientID, ClientSecret: o.ClientSecret, Scopes: o.Scopes,
			RedirectPort: o.RedirectPort, Grant: mcpconn.OAuthGrant(o.Grant), ClientMetadataURL: o.ClientMetadataURL}
	}
	return m
}

// serverConfigOf is m as the public API shows it.
func serverConfigOf(m mcpconn.Config) ServerConfig {
	c := ServerConfig{Command: m.Command, Args: m.Args, Env: m.Env, Cwd: m.Cwd, URL: m.URL,
		Headers: m.Headers, Type: m.Type, Sandbox: m.Sandbox, Origin: m.Origin}
	if o := m.OAuth; o != nil {
		c.OAuth = &OAuthConfig{ClientID: o.ClientID, ClientSecret: o.ClientSecret, Scopes: o.Scopes,
			RedirectPort: o.RedirectPort, Grant: string(o.Grant), ClientMetadataURL: o.ClientMetadataURL}
	}
	return c
}

// toolModulesOf converts generated modules.
func toolModulesOf(ms []pygen.Module) []ToolModule {
	if ms == nil {
		return nil
	}
	out := make([]ToolModule, len(ms))
	for i, m := range ms {
		out[i] = ToolModule{Name: m.Name, Tool: m.Tool, Signature: m.Signature}
	}
	return out
}

// registryPath is where a workspace's MCP servers are recorded, with their
// ${VAR} placeholders (never the values).
func registryPath(workspace string) string {
	return filepath.Join(workspace, ".ipybox", "servers.json")
}

// hostWritable is kernelWritable with "~" expanded, and a glob (the
// sandbox expands allowWrite's) cut to the folder above its first glob
// character, which holds every folder it may name: the folders where no
// host process starts (invariant 14).
func hostWritable(ws string, o *Options) []string {
	out := kernelWritable(ws, o)
	for i, w := range out {
		if strings.HasPrefix(w, "~") {
			if home, err := os.UserHomeDir(); err == nil {
				w = filepath.Join(home, strings.TrimPrefix(w, "~"))
			}
		}
		if j := strings.IndexAny(w, "*?["); j >= 0 {
			w = filepath.Dir(w[:j] + "x")
		}
		out[i] = w
	}
	return out
}

// startTools loads the workspace's registry and starts the MCP manager and
// the tool server (on a unix socket in the run directory).
func (e *Executor) startTools() error {
	reg, err := mcpconn.LoadRegistry(registryPath(e.workspace))
	if err != nil {
		return err
	}
	e.registry = reg
	tokens := ""
	if e.opts.Tenant && e.opts.Principal != "" {
		// Another principal's sign-ins are not this one's.
		if tokens, err = mcpconn.PrincipalTokenFile(e.opts.Principal); err != nil {
			return err
		}
	}
	if e.mcp, err = mcpconn.New(reg, &mcpconn.Options{
		TokenFile: tokens,
		// A sign-in is this workspace's (the tenant's folder, with
		// several principals): another workspace's ipybox, whose operator
		// may have configured no such server, signs in anew.
		Workspace:         e.workspace,
		Logger:            e.log,
		CallTimeout:       e.toolCallTimeout(),
		DotEnv:            e.opts.DotEnv,
		StdioCommand:      e.stdioCommand,
		Writable:          hostWritable(e.workspace, &e.opts),
		ClientVars:        e.opts.ClientVars,
		ClientPrivateURLs: e.opts.ClientPrivateURLs,
		OAuthURL:          e.opts.OAuthURL,
	}); err != nil {
		return err
	}
	var modules func(string) ([]byte, bool, error)
	if e.opts.Gateway != nil {
		// The kernel may not share this disk: it imports mcptools from
		// the tool server.
		modules = toolModules(e.workspace)
	}
	// With a policy, every call goes to the approver: deny and ask rules
	// apply where tool approval is off.
	autoTools := e.opts.NoToolApproval && e.opts.ApprovalPolicy == nil
	ts, err := toolserver.New(toolserver.CallerFunc(e.callTool), &toolserver.Options{
		Approver:         approver{e},
		AutoApproveTools: autoTools,
		KnownServer: func(name string) bool {
			_, ok := reg.Get(name)
			return ok
		},
		CallTimeout:     e.toolCallTimeout(),
		ApprovalTimeout: e.approvalTimeout(),
		Modules:         modules,
		Logger:          e.log,
		Observe:         e.observe,
		Principal:       e.opts.Principal,
	})
	if err != nil {
		return err
	}
	e.tools = ts
	switch {
	case e.opts.ToolServerAddr != "":
		// A kernel on another machine: HTTPS, the certificate pinned.
		e.toolURL, e.toolPin, err = ts.ListenTLS(e.opts.ToolServerAddr)
		return err
	case e.opts.Gateway != nil:
		// A gateway kernel cannot reach a unix socket of this host: it
		// reaches the tool server on loopback TCP, with the same token
		// and the Host check (docs/scale.md).
		e.toolURL, err = ts.ListenTCP()
		return err
	}
	if e.toolURL, err = ts.ListenLocal(filepath.Join(e.runDir, "tool.sock")); err != nil {
		return err
	}
	return nil
}

// approvalTimeout and toolCallTimeout are the Options after Start set
// their defaults.
func (e *Executor) approvalTimeout() time.Duration { return e.opts.ApprovalTimeout }
func (e *Executor) toolCallTimeout() time.Duration { return e.opts.ToolCallTimeout }

// toolEnv is the kernel's view of the tool server.
func (e *Executor) toolEnv() []string {
	// The runtime's own socket timeout must outlast the host's bounds.
	wait := e.approvalTimeout() + e.toolCallTimeout() + 30*time.Second
	env := []string{
		toolserver.EnvURL + "=" + e.toolURL,
		toolserver.EnvToken + "=" + e.tools.Token(),
		toolserver.EnvTimeout + "=" + strconv.Itoa(int(wait.Seconds())),
	}
	if e.toolPin != "" {
		env = append(env, toolserver.EnvCertSHA256+"="+e.toolPin)
	}
	// With approval on, the runtime publishes a sync marker before each
	// request, so that approvals follow the output printed before them.
	if !e.opts.NoToolApproval || e.opts.ApproveShellCommands {
		env = append(env, "IPYBOX_TOOL_SYNC=1")
	}
	return env
}

// RegisterMCPServer connects to an MCP server, lists its tools, generates
// mcptools/<name>/ in the workspace (one typed module per tool), and
// records the server in <workspace>/.ipybox/servers.json with its ${VAR}
// placeholders. Kernel code can then import the modules:
//
//	from mcptools.<name>.<module> import Params, run
//
// name must be a Python identifier that is not a keyword. Registering a
// name again replaces the server and its modules.
func (e *Executor) RegisterMCPServer(ctx context.Context, name string, cfg ServerConfig) ([]ToolModule, error) {
	t, _ := cfg.mcpConfig().Transport()
	ctx, span := e.tel.StartRegister(ctx, name, string(t))
	mods, err := e.registerMCPServer(ctx, name, cfg)
	e.tel.EndRegister(span, len(mods), err)
	return mods, err
}

func (e *Executor) registerMCPServer(ctx context.Context, name string, cfg ServerConfig) ([]ToolModule, error) {
	if err := pygen.ValidServerName(name); err != nil {
		return nil, fmt.Errorf("ipybox: register MCP server: %w", err)
	}
	old, had := e.registry.Get(name)
	if err := e.registry.Add(name, cfg.mcpConfig()); err != nil {
		return nil, fmt.Errorf("ipybox: register: %w", err) // it names the server
	}
	restore := func() {
		if had {
			e.registry.Add(name, old)
		} else {
			e.registry.Remove(name)
		}
	}
	tools, err := e.mcp.ListTools(ctx, name)
	if err != nil {
		restore()
		return nil, fmt.Errorf("ipybox: register: %w", err) // it names the server
	}
	mods, err := writeModules(filepath.Join(e.workspace, "mcptools"), name, tools)
	if err != nil {
		restore()
		return nil, fmt.Errorf("ipybox: register MCP server %q: %w", name, err)
	}
	if err := e.registry.SaveEntry(registryPath(e.workspace), name); err != nil {
		return nil, fmt.Errorf("ipybox: register MCP server %q: save registry: %w", name, err)
	}
	e.forgetModules(name)
	return mods, nil
}

// writeModules generates root/<name>/ from an MCP server's tool list.
func writeModules(root, name string, tools []*mcp.Tool) ([]ToolModule, error) {
	gen := make([]pygen.Tool, 0, len(tools))
	for _, t := range tools {
		in, err := json.Marshal(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("tool %q: input schema: %w", t.Name, err)
		}
		g := pygen.Tool{Name: t.Name, Description: t.Description, InputSchema: in}
		if t.OutputSchema != nil {
			if g.OutputSchema, err = json.Marshal(t.OutputSchema); err != nil {
				return nil, fmt.Errorf("tool %q: output schema: %w", t.Name, err)
			}
		}
		gen = append(gen, g)
	}
	mods, err := pygen.Write(root, name, gen)
	return toolModulesOf(mods), err
}

// GenerateOptions configures GenerateToolModules. A nil *GenerateOptions
// means the defaults.
type GenerateOptions struct {
	// DotEnv supplies ${VAR} values after the environment (for example a
	// workspace's .env). Nil means none.
	DotEnv map[string]string
	// OAuthURL is as Options.OAuthURL. Nil means none.
	OAuthURL func(ctx context.Context, server, url string) error
}

// GenerateToolModules connects to an MCP server, lists its tools and writes
// the typed Python modules to <dir>/<name>/, without a kernel (this is
// `ipybox apigen`). dir is usually a workspace's mcptools folder.
func GenerateToolModules(ctx context.Context, name string, cfg ServerConfig, dir string, opts *GenerateOptions) ([]ToolModule, error) {
	var o GenerateOptions
	if opts != nil {
		o = *opts
	}
	if err := pygen.ValidServerName(name); err != nil {
		return nil, fmt.Errorf("ipybox: %w", err)
	}
	reg := mcpconn.NewRegistry()
	if err := reg.Add(name, cfg.mcpConfig()); err != nil {
		return nil, fmt.Errorf("ipybox: %w", err) // it names the server
	}
	m, err := mcpconn.New(reg, &mcpconn.Options{DotEnv: o.DotEnv, OAuthURL: o.OAuthURL})
	if err != nil {
		return nil, fmt.Errorf("ipybox: %w", err)
	}
	defer m.Close()
	tools, err := m.ListTools(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("ipybox: %w", err)
	}
	mods, err := writeModules(dir, name, tools)
	if err != nil {
		return nil, fmt.Errorf("ipybox: server %q: %w", name, err)
	}
	return mods, nil
}

// MCPServers returns the names of the registered MCP servers.
func (e *Executor) MCPServers() []string { return e.registry.Names() }

// forgetModules makes the kernel drop its cached imports of a regenerated
// server before the next cell, so that the next import sees the new
// modules. It does not wait for a running cell: a registration must not
// stall behind one (in ipybox mcp, other sessions' registrations wait for
// this one).
func (e *Executor) forgetModules(name string) {
	e.forgetMu.Lock()
	defer e.forgetMu.Unlock()
	if !slices.Contains(e.forget, name) {
		e.forget = append(e.forget, name)
	}
}

// forgetPending drops the imports forgetModules recorded. The caller holds
// the executor (no cell runs).
func (e *Executor) forgetPending(ctx context.Context) {
	e.forgetMu.Lock()
	names := e.forget
	e.forget = nil
	e.forgetMu.Unlock()
	for _, name := range names {
		code := fmt.Sprintf(`(lambda sys, il, p: ([sys.modules.pop(m) for m in list(sys.modules) if m == p or m.startswith(p + ".")], il.invalidate_caches()))(__import__("sys"), __import__("importlib"), %s)`, pyruntime.Quote("mcptools."+name))
		if _, err := e.k.Execute(ctx, code, &kernel.ExecOptions{Silent: true}); err != nil {
			e.log.Warn("the kernel may still import the old modules of a re-registered server; Reset it to be sure",
				"server", name, "err", err)
		}
	}
}
