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

type (
	// ServerConfig is an MCP server's config: a command (stdio) or a URL
	// (streamable HTTP or SSE). String values may hold ${VAR} placeholders.
	ServerConfig = mcpconn.Config
	// ToolModule describes one generated tool module: its Python module
	// name, the tool's original name, and the call signature.
	ToolModule = pygen.Module
	// OAuthConfig is ServerConfig.OAuth: a pre-registered OAuth client of
	// a streamable HTTP server, its scopes and its grant.
	OAuthConfig = mcpconn.OAuthConfig
	// OAuthGrant is OAuthConfig.Grant.
	OAuthGrant = mcpconn.OAuthGrant
)

// The OAuth grants (OAuthConfig.Grant).
const (
	// GrantAuthorizationCode: a person signs in, in a browser (the default).
	GrantAuthorizationCode = mcpconn.GrantAuthorizationCode
	// GrantClientCredentials: the client signs in with its ID and secret.
	GrantClientCredentials = mcpconn.GrantClientCredentials
)

// LoadDotEnv reads a .env file (KEY=VALUE lines, # comments, quoted
// values; nothing is interpolated) for GenerateOptions.DotEnv. A missing
// file is an error that matches fs.ErrNotExist.
func LoadDotEnv(path string) (map[string]string, error) { return mcpconn.LoadDotEnv(path) }

// registryPath is where a workspace's MCP servers are recorded, with their
// ${VAR} placeholders (never the values).
func registryPath(workspace string) string {
	return filepath.Join(workspace, ".ipybox", "servers.json")
}

// hostWritable is kernelWritable with "~" expanded: the folders where no
// host process starts (invariant 14).
func hostWritable(ws string, o *Options) []string {
	out := kernelWritable(ws, o)
	for i, w := range out {
		if strings.HasPrefix(w, "~") {
			if home, err := os.UserHomeDir(); err == nil {
				out[i] = filepath.Join(home, strings.TrimPrefix(w, "~"))
			}
		}
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
		TokenFile:    tokens,
		Logger:       e.log,
		CallTimeout:  e.toolCallTimeout(),
		DotEnv:       e.opts.DotEnv,
		StdioCommand: e.stdioCommand,
		Writable:     hostWritable(e.workspace, &e.opts),
		ClientVars:   e.opts.ClientVars,
		OAuthURL:     e.opts.OAuthURL,
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
	t, _ := cfg.Transport()
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
	if err := e.registry.Add(name, cfg); err != nil {
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
	return pygen.Write(root, name, gen)
}

// GenerateOptions configures GenerateToolModules. A nil *GenerateOptions
// means the defaults.
type GenerateOptions struct {
	// DotEnv supplies ${VAR} values after the environment (for example a
	// workspace's .env, read with LoadDotEnv). Nil means none.
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
	if err := reg.Add(name, cfg); err != nil {
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
