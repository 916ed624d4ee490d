package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/defaults"
	"github.com/ipybox/ipybox/internal/hostpaths"
	"github.com/ipybox/ipybox/internal/mcpconn"
	"github.com/ipybox/ipybox/internal/pyruntime"
)

// Limits on tool arguments.
const (
	defaultTimeout  = 120 // seconds
	maxTimeout      = 24 * 60 * 60
	defaultMaxChars = 5000
	maxMaxChars     = 10_000_000
	maxCodeBytes    = 10 << 20
	maxNameLen      = 200
	maxPackageLen   = 1000
	maxPipOutput    = 20000
)

const instructions = `ipybox gives you a stateful IPython kernel (a Jupyter-like Python session that keeps variables between calls) for code actions.
Run Python with execute_ipython_cell; use !cmd for shell commands. A session is a kernel behind a handle: create_session returns one, and every call that should use that kernel passes it as its session argument (over HTTP with MCP 2026-07-28 every call needs one; elsewhere the connection has a kernel of its own for calls without one). A handle works from any connection with your token, until close_session or a long idle time. Connect MCP servers with register_mcp_server: their tools become Python modules (mcptools.<server>.<tool>) that your code calls directly, so that one cell can make many tool calls and process their results without passing them through the conversation.
The kernel's working directory is a workspace folder; move files between it and the host with upload_file and download_file. install_package adds Python packages; reset restarts the kernel with fresh state.`

type executeArgs struct {
	Code           string  `json:"code"`
	Timeout        float64 `json:"timeout"`
	MaxOutputChars int     `json:"max_output_chars"`
	MaxWait        float64 `json:"max_wait"`
	Session        string  `json:"session"`
}

type registerArgs struct {
	ServerName   string          `json:"server_name"`
	ServerParams json.RawMessage `json:"server_params"`
	Session      string          `json:"session"`
}

type installArgs struct {
	PackageName string `json:"package_name"`
	Session     string `json:"session"`
}

type fileArgs struct {
	Relpath   string `json:"relpath"`
	LocalPath string `json:"local_path"`
	Session   string `json:"session"`
}

type sessionArgs struct {
	Session string `json:"session"`
}

type noArgs struct{}

// createOut is the structured result of create_session.
type createOut struct {
	Session string `json:"session" jsonschema:"the handle: pass it as the session argument of the other tools"`
}

// sessionInfo describes a session in list_sessions.
type sessionInfo struct {
	Session    string `json:"session" jsonschema:"the handle; empty for a session this server has kept since a restart but not yet seen a call for (it knows only the handle's digest)"`
	ID         string `json:"id" jsonschema:"a short name of the session, as the server's logs show it"`
	Created    string `json:"created" jsonschema:"when it was created (RFC 3339)"`
	LastUsed   string `json:"last_used" jsonschema:"when a call last used it (RFC 3339)"`
	Kernel     bool   `json:"kernel" jsonschema:"whether it holds a running kernel now"`
	Hibernated bool   `json:"hibernated" jsonschema:"whether it is hibernated: its state is saved, and its next call restores it into a fresh kernel"`
	Busy       bool   `json:"busy" jsonschema:"whether a call or a cell runs in it now"`
	Waiting    int    `json:"waiting,omitempty" jsonschema:"approval questions its cell waits on that no call answers: collect_cell asks them again, interrupt stops the cell"`
}

type listOut struct {
	Sessions []sessionInfo `json:"sessions" jsonschema:"the sessions of your token, oldest first"`
}

// sessionProp is the session argument of the tools that run in a session.
const sessionProp = `"session": {"type": "string", "maxLength": 200, "description": "The handle create_session returned: the call runs in that session's kernel. Omit it to use this connection's own kernel (over stdio, and for clients of MCP 2025-11-25 and older); over HTTP with MCP 2026-07-28 every call needs one."}`

// threadHandle tells an agent how to thread a handle, in the description
// of each tool that takes one.
const threadHandle = `

session: the handle from create_session. Pass the same handle in every call that should use that kernel; omit it only where the connection has a kernel of its own (stdio, MCP 2025-11-25 and older).`

// schema parses a literal input schema.
func schema(s string) json.RawMessage {
	if !json.Valid([]byte(s)) {
		panic("mcpserver: invalid schema literal: " + s)
	}
	return json.RawMessage(s)
}

func (s *Server) addTools() {
	s.addCellTools()
	s.addRegisterTool()
	s.addFileTools()
	s.addSessionTools()
	s.addClientTools()
	s.addForkTools()
	s.addExportTool()
}

// addCellTools adds the tools of a session's kernel: execute_ipython_cell,
// install_package and reset.
func (s *Server) addCellTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "execute_ipython_cell",
		Title: "Run Python code",
		Description: `Run Python code in a stateful IPython kernel, like a Jupyter notebook cell. Variables, imports and definitions persist between calls (until reset), so build on earlier cells instead of repeating them.

Returns what the cell printed (stdout and stderr) and the value of its last expression. Each image the cell shows (plt.show(), IPython.display) comes back as an image block, and is saved under images/ in the workspace; its path is in the text.

- Shell commands work: !ls, files = !ls *.csv, and %%bash cells.
- MCP tools registered with register_mcp_server are Python functions: from mcptools.<server>.<tool> import Params, run; result = run(Params(...)). Prefer one cell that calls tools in a loop and prints a summary over many separate calls.
- Output longer than max_output_chars keeps its beginning and its end, and says how much was left out: print summaries, not whole datasets.
- An exception makes an error result that contains the output printed before it and the traceback. On timeout the cell is interrupted and the variables are kept.
- The working directory is the workspace. Use upload_file and download_file to move files between it and the host, and install_package (or !pip install) for missing packages.` + threadHandle,
		InputSchema: schema(`{
  "type": "object",
  "properties": {
    "code": {"type": "string", "description": "Python code to run as one cell. IPython syntax (!shell commands, %magics) is allowed."},
    "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": 86400, "default": 120, "description": "Seconds the cell may run before it is interrupted (the kernel's state is kept). Default 120."},
    "max_output_chars": {"type": "integer", "minimum": 1, "maximum": 10000000, "default": 5000, "description": "Output beyond this many characters is cut in the middle, keeping the head and the tail. Default 5000."},
    "max_wait": {"type": "number", "exclusiveMinimum": 0, "maximum": 86400, "description": "Seconds to wait for the cell before answering that it still runs, with its cell id and output so far; collect_cell gets the rest, and the cell goes on. Default: wait until it ends. For cells longer than your client waits for a call."},
    ` + sessionProp + `
  },
  "required": ["code"],
  "additionalProperties": false
}`),
		Annotations: &mcp.ToolAnnotations{Title: "Run Python code", OpenWorldHint: boolPtr(true)},
	}, s.executeTool)

	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "install_package",
		Title: "Install a Python package",
		Description: `Install a Python package into the kernel's environment with pip, and return pip's output. ` + installWhere(s.opts.Gateway != nil) + `

package_name is one pip requirement: a name with an optional version (pandas, requests==2.32.3, numpy>=2), or a path to a local wheel or project folder, relative to the workspace. Import the package in execute_ipython_cell afterwards.` + threadHandle,
		InputSchema: schema(`{
  "type": "object",
  "properties": {
    "package_name": {"type": "string", "description": "One pip requirement: a package name with an optional version specifier, or a local path relative to the workspace."},
    ` + sessionProp + `
  },
  "required": ["package_name"],
  "additionalProperties": false
}`),
		Annotations: &mcp.ToolAnnotations{Title: "Install a Python package", OpenWorldHint: boolPtr(true)},
	}, s.installTool)

	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "reset",
		Title:       "Reset the kernel",
		Description: `Give the session a fresh kernel: variables, imports and definitions are gone (a hibernated session's saved state too). Files in the workspace, generated tool modules, installed packages and registered MCP servers persist. Use it to start over or when the kernel's state is broken. The session and its handle stay.` + threadHandle,
		InputSchema: schema(`{"type": "object", "properties": {` + sessionProp + `}, "additionalProperties": false}`),
		Annotations: &mcp.ToolAnnotations{Title: "Reset the kernel", DestructiveHint: boolPtr(true), IdempotentHint: true},
	}, s.resetTool)
}

// addRegisterTool adds register_mcp_server.
func (s *Server) addRegisterTool() {
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "register_mcp_server",
		Title: "Register an MCP server for use from Python",
		Description: `Connect to an MCP server and turn its tools into typed Python modules in the workspace (mcptools/<server_name>/), so that code in execute_ipython_cell can call them: loop over calls, pass one tool's result to another, and keep large intermediate data out of the conversation.

Returns one line per tool: the import, then the call signature, for example
from mcptools.fs.read_text_file import Params, run  # run(Params(path: str, head: int | None = None)) -> Result
run returns the typed Result when the tool declares an output schema, otherwise the text (str); run_async is the async variant. A failing tool raises ToolError.

server_params is the server's config, as in an mcpServers file:
- a local server: {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/data"]}
- a remote server: {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer <token>"}}
- a remote server that wants an OAuth sign-in: {"url": "https://example.com/mcp"} (ipybox asks the user to sign in; an "oauth" block configures a pre-registered client)
${VAR} placeholders are not filled here (ipybox's environment and .env hold the operator's secrets, which a client does not read): a placeholder is an error unless the operator runs ipybox mcp with --allow-host-servers; servers that need the operator's secrets belong in its --mcp-config. Registrations are made through the session's kernel, are shared by every session of the workspace, and persist across reset and restarts; registering a name again replaces it.` + threadHandle,
		InputSchema: schema(`{
  "type": "object",
  "properties": {
    "server_name": {"type": "string", "description": "A Python identifier naming the server, such as fs or github: the tools become the package mcptools.<server_name>."},
    "server_params": {
      "type": "object",
      "description": "The server's config: command (with args, env, cwd) for a local stdio server, or url (with headers) for a remote one.",
      "properties": {
        "command": {"type": "string", "description": "Program of a local (stdio) server."},
        "args": {"type": "array", "items": {"type": "string"}, "description": "The program's arguments."},
        "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Environment variables for the program."},
        "cwd": {"type": "string", "description": "The program's working directory."},
        "url": {"type": "string", "description": "Endpoint of a remote server (streamable HTTP, or SSE)."},
        "headers": {"type": "object", "additionalProperties": {"type": "string"}, "description": "HTTP headers sent to url."},
        "type": {"type": "string", "enum": ["stdio", "http", "streamable_http", "streamableHttp", "sse"], "description": "Transport; normally inferred."},
        "oauth": {
          "type": "object",
          "description": "OAuth for a streamable HTTP server. Not needed when the server supports discovery and dynamic registration: ipybox then signs in by itself, asking the user (through this client) to open the sign-in page.",
          "properties": {
            "clientId": {"type": "string", "description": "A pre-registered OAuth client ID."},
            "clientSecret": {"type": "string", "description": "Its secret, as a ${VAR} placeholder (never the value)."},
            "scopes": {"type": "array", "items": {"type": "string"}, "description": "Scopes to ask for; default: those the server names."},
            "redirectPort": {"type": "integer", "description": "Port of the redirect listener on 127.0.0.1; default: a free port."},
            "grant": {"type": "string", "enum": ["authorization_code", "client_credentials"], "description": "authorization_code (default; a person signs in) or client_credentials (needs clientId and clientSecret)."}
          }
        }
      }
    },
    ` + sessionProp + `
  },
  "required": ["server_name", "server_params"],
  "additionalProperties": false
}`),
		Annotations: &mcp.ToolAnnotations{Title: "Register an MCP server", OpenWorldHint: boolPtr(true)},
	}, s.registerTool)
}

// addFileTools adds upload_file and download_file.
func (s *Server) addFileTools() {
	fileSchema := func(rel, local string) json.RawMessage {
		return schema(fmt.Sprintf(`{
  "type": "object",
  "properties": {
    "relpath": {"type": "string", "description": %q},
    "local_path": {"type": "string", "description": %q},
    %s
  },
  "required": ["relpath", "local_path"],
  "additionalProperties": false
}`, rel, local, sessionProp))
	}
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "upload_file",
		Title: "Copy a file from the host into the workspace",
		Description: `Copy a file from the host (local_path) into the workspace (relpath), so that code in execute_ipython_cell can read it as open(relpath). Parent directories are created and an existing file is replaced; any file type works.

local_path must be absolute and lie inside a directory ipybox allows (by default the workspace and the system temp directory), after symbolic links are resolved. relpath is relative to the workspace and must stay inside it.` + threadHandle,
		InputSchema: fileSchema("Destination, relative to the workspace (the kernel's working directory), such as data/input.csv.", "Absolute path of the file on the host to copy."),
		Annotations: &mcp.ToolAnnotations{Title: "Upload a file", IdempotentHint: true},
	}, s.uploadTool)
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "download_file",
		Title: "Copy a file from the workspace to the host",
		Description: `Copy a file from the workspace (relpath), such as a result your code wrote, to the host (local_path). Parent directories are created and an existing file is replaced; any file type works.

local_path must be absolute and lie inside a directory ipybox allows (by default the workspace and the system temp directory), after symbolic links are resolved. relpath is relative to the workspace and must stay inside it.` + threadHandle,
		InputSchema: fileSchema("The file to copy, relative to the workspace (the kernel's working directory), such as results/summary.csv.", "Absolute destination path on the host."),
		Annotations: &mcp.ToolAnnotations{Title: "Download a file", IdempotentHint: true},
	}, s.downloadTool)
}

// addSessionTools adds create_session, close_session and list_sessions.
func (s *Server) addSessionTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  "create_session",
		Title: "Start a session: a kernel of its own",
		Description: `Start a session, a stateful IPython kernel of its own, and return its handle (also as structuredContent.session).

Pass the handle as the session argument of execute_ipython_cell, and of reset, install_package, register_mcp_server, upload_file and download_file, in every call that should use this kernel: calls with the same handle share variables, imports and definitions; calls with another handle do not. Keep the handle in your notes: it is how you come back to the kernel, from this connection or a new one with the same token. Only the token that created it can use it.

The kernel starts at the first cell. ` + s.lifetime() + ` Over HTTP with MCP 2026-07-28 every call needs a handle; over stdio, and for clients of 2025-11-25 and older, calls without one use the connection's own kernel.`,
		InputSchema: schema(`{"type": "object", "properties": {}, "additionalProperties": false}`),
		Annotations: &mcp.ToolAnnotations{Title: "Start a session", IdempotentHint: false, OpenWorldHint: boolPtr(false)},
	}, s.createSessionTool)
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "close_session",
		Title:       "End a session",
		Description: `End the session of a handle from create_session: its kernel stops (a running cell is interrupted), its variables are gone, and the handle is unknown from then on. Files in the workspace stay. Close sessions you no longer need: each holds a kernel, and their number is limited.`,
		InputSchema: schema(`{
  "type": "object",
  "properties": {
    "session": {"type": "string", "maxLength": 200, "description": "The handle create_session returned."}
  },
  "required": ["session"],
  "additionalProperties": false
}`),
		Annotations: &mcp.ToolAnnotations{Title: "End a session", DestructiveHint: boolPtr(true), IdempotentHint: true, OpenWorldHint: boolPtr(false)},
	}, s.closeSessionTool)
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "list_sessions",
		Title:       "List your sessions",
		Description: `List the sessions your token created with create_session and that have not ended: each one's handle, when it was created and last used, whether its kernel has started, and whether something runs in it now. Use it to find a handle you lost track of.`,
		InputSchema: schema(`{"type": "object", "properties": {}, "additionalProperties": false}`),
		Annotations: &mcp.ToolAnnotations{Title: "List your sessions", ReadOnlyHint: true, OpenWorldHint: boolPtr(false)},
	}, s.listSessionsTool)
}

// lifetime says when a session ends, for the model that decides to make
// one.
func (s *Server) lifetime() string {
	return fmt.Sprintf("After %v without a call it hibernates: its variables are saved and its kernel stops, and the next call brings them back (open files, sockets and threads do not come back; the result says which). It also survives a restart of ipybox. It ends with close_session, or after %v without a call; its variables are then gone, and files in the workspace stay.",
		shortDuration(s.opts.Durability.HibernateAfter), shortDuration(s.opts.Durability.SessionExpiry))
}

// shortDuration writes d without zero units: 30m rather than 30m0s, and
// whole days from two on as days.
func shortDuration(d time.Duration) string {
	if d >= 48*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	t := d.String()
	if strings.HasSuffix(t, "m0s") {
		t = strings.TrimSuffix(t, "0s")
	}
	if strings.HasSuffix(t, "h0m") {
		t = strings.TrimSuffix(t, "0m")
	}
	return t
}

// installWhere says where install_package installs.
func installWhere(gateway bool) string {
	if gateway {
		return "pip runs in the kernel (on the gateway's machine) and installs into .ipybox/prefix in the kernel's working directory, which stays importable across reset."
	}
	return "The environment is a virtualenv in the workspace (.ipybox/venv) that also sees the system's packages; !pip install in a cell installs into the same place, and installed packages persist across reset."
}

// modulesMetaKey is the key, in the _meta of a register_mcp_server result,
// of the generated modules' names (mcptools.<server>.<name>), in order.
const modulesMetaKey = "ipybox/modules"

// streamOutput sends a chunk of a cell's output to the client as an MCP log
// message (notifications/message) at level info, with the stream
// ("stdout" or "stderr") as the logger and the text as the data: every
// chunk, in order, before the result. It is sent only to a client that
// asked for log messages at level info or below (logging/setLevel); the
// progress notifications carry only a summary.
func streamOutput(ctx context.Context, ss *mcp.ServerSession, o *ipybox.Output) {
	if ss == nil {
		return
	}
	// An error means the client went away; the result will not reach it
	// either.
	//lint:ignore SA1019 log messages are MCP's one channel for a cell's chunks before its result; SEP-2577 deprecates them from protocol 2026-07-28 but keeps them working for at least twelve months, and a client that never sets a level gets none
	_ = ss.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: o.Stream, Data: o.Text})
}

// quote shows a user-given string in an error, shortened when long.
func quote(v string) string {
	if utf8.RuneCountInString(v) > 80 {
		v = string([]rune(v)[:80]) + "..."
	}
	return fmt.Sprintf("%q", v)
}

// useSession resolves the session of a call (its session argument, or
// the connection's own) and marks it busy until done. With kernel, it also
// returns the session's executor, starting it on first use, and a context
// that ends with the call or the session.
func (s *Server) useSession(ctx context.Context, req *mcp.CallToolRequest, handle string, kernel bool) (*session, *ipybox.Executor, context.Context, func(), error) {
	x, err := s.sessionOf(req, handle)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	x.begin()
	cctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(x.ctx, cancel)
	done := func() { stop(); cancel(); x.end() }
	if !kernel {
		return x, nil, cctx, done, nil
	}
	ex, err := x.executor(cctx)
	if err != nil {
		done()
		return nil, nil, nil, nil, err
	}
	if !s.local() && x.durable() {
		// Another front end on the same state folder may have attached to
		// this gateway kernel since: its tool calls would go there.
		s.claim(cctx, x, ex)
		d := done
		done = func() { s.kernelChanged(x, ex); d() }
	}
	// A sign-in question while this call runs goes on its request's
	// stream, as approvals do: a client need not open a standalone one.
	if owner := x.oauthOwner(); owner != nil {
		owner.set(req.Session)
		clear := owner.setCall(cctx)
		d := done
		done = func() { clear(); d() }
	}
	return x, ex, cctx, done, nil
}

func textResult(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

func (s *Server) executeTool(ctx context.Context, req *mcp.CallToolRequest, a executeArgs) (*mcp.CallToolResult, any, error) {
	if req.Params.RequestState != "" {
		// A retry with the answers to a suspended cell's approvals.
		res, err := s.resumeCell(ctx, req)
		return res, nil, err
	}
	switch {
	case strings.TrimSpace(a.Code) == "":
		return nil, nil, errors.New("code is empty; give the Python code to run")
	case len(a.Code) > maxCodeBytes:
		return nil, nil, fmt.Errorf("code is %d bytes; the limit is %d: write large data to a file with upload_file instead", len(a.Code), maxCodeBytes)
	case strings.IndexByte(a.Code, 0) >= 0:
		return nil, nil, errors.New("code contains a NUL byte, which Python source cannot contain")
	}
	if a.Timeout == 0 {
		a.Timeout = defaultTimeout
	}
	if a.Timeout < 0 || a.Timeout > maxTimeout {
		return nil, nil, fmt.Errorf("timeout %v: want seconds between 0 and %d", a.Timeout, maxTimeout)
	}
	if a.MaxOutputChars == 0 {
		a.MaxOutputChars = defaultMaxChars
	}
	if a.MaxOutputChars < 0 || a.MaxOutputChars > maxMaxChars {
		return nil, nil, fmt.Errorf("max_output_chars %d: want a number between 1 and %d", a.MaxOutputChars, maxMaxChars)
	}
	if a.MaxWait < 0 || a.MaxWait > maxTimeout {
		return nil, nil, fmt.Errorf("max_wait %v: want seconds between 0 and %d", a.MaxWait, maxTimeout)
	}
	x, ex, ctx, done, err := s.useSession(ctx, req, a.Session, true)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	if res := s.busyAnswer(x, a.Session); res != nil {
		return res, nil, nil
	}
	x.checkpointWait(ctx)
	warnings := x.takeWarnings()
	if slot := taskSlotOf(ctx); slot != nil {
		// The client declared the Tasks extension (tasks.go).
		c, att, err := s.startTask(slot, x, time.Duration(a.Timeout*float64(time.Second)), func() (*cellRun, *attachment) {
			return s.startCell(ctx, req, x, ex, a, warnings, x.takeRegErrors())
		})
		switch {
		case errors.Is(err, errNoTask):
			// At the principal's bounds: the cell runs as without tasks.
			warnings = append(warnings, "[ipybox: "+err.Error()+"]")
		case err != nil:
			return nil, nil, err
		case slot.t == nil:
			// It ended within the task table's quick window: the plain result.
			res, err := s.awaitFor(ctx, c, att, 0, a.Session)
			return res, nil, err
		default:
			return textResult("task %s", slot.t.id), nil, nil
		}
	}
	c, att := s.startCell(ctx, req, x, ex, a, warnings, x.takeRegErrors())
	res, err := s.awaitFor(ctx, c, att, time.Duration(a.MaxWait*float64(time.Second)), a.Session)
	return res, nil, err
}

func (s *Server) registerTool(ctx context.Context, req *mcp.CallToolRequest, a registerArgs) (*mcp.CallToolResult, any, error) {
	name := a.ServerName
	switch {
	case name == "":
		return nil, nil, errors.New("server_name is empty; give a Python identifier such as fs or github")
	case len(name) > maxNameLen || strings.ContainsAny(name, "\x00/\\. \n"):
		return nil, nil, fmt.Errorf("server_name %s is not a Python identifier; use letters, digits and _, such as fs or github", quote(name))
	}
	cfg, err := parseServerParams(a.ServerParams)
	if err != nil {
		return nil, nil, err
	}
	if cfg, err = s.gateServer(cfg); errors.Is(err, errHostServer) {
		if err = s.askHostServer(ctx, req, name, cfg); err == nil {
			s.tenant(principalOf(req)).approveHost(name, cfg)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	x, ex, ctx, done, err := s.useSession(ctx, req, a.Session, true)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	mods, err := x.register(ctx, ex, name, cfg)
	if err != nil {
		return nil, nil, err
	}
	if len(mods) == 0 {
		res := textResult("MCP server %s is registered, but it has no tools.", name)
		res.Meta = mcp.Meta{modulesMetaKey: []string{}}
		return res, nil, nil
	}
	var b strings.Builder
	names := make([]string, 0, len(mods))
	for _, m := range mods {
		fmt.Fprintf(&b, "from mcptools.%s.%s import Params, run  # %s\n", name, m.Name, m.Signature)
		names = append(names, m.Name)
	}
	res := textResult("%s", strings.TrimRight(b.String(), "\n"))
	res.Meta = mcp.Meta{modulesMetaKey: names}
	return res, nil, nil
}

// parseServerParams decodes server_params strictly: an unknown field is an
// error, so that a misspelt one is not silently ignored.
func parseServerParams(raw json.RawMessage) (ipybox.ServerConfig, error) {
	var cfg ipybox.ServerConfig
	if len(raw) == 0 || string(raw) == "null" {
		return cfg, errors.New(`server_params is missing; give {"command": ..., "args": [...]} or {"url": ...}`)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return cfg, fmt.Errorf(`server_params: %v; want {"command": "...", "args": [...], "env": {...}} or {"url": "...", "headers": {...}}`, err)
	}
	for _, v := range append([]string{cfg.Command, cfg.URL, cfg.Cwd}, cfg.Args...) {
		if strings.IndexByte(v, 0) >= 0 {
			return cfg, errors.New("server_params contains a NUL byte")
		}
	}
	// The checks are the registry's, on the config in the format both
	// types share.
	var mc mcpconn.Config
	if b, err := json.Marshal(cfg); err != nil || json.Unmarshal(b, &mc) != nil {
		return cfg, fmt.Errorf("server_params: %v", err)
	}
	if err := mc.Validate(); err != nil {
		return cfg, fmt.Errorf("server_params: %w", err)
	}
	return cfg, nil
}

func (s *Server) installTool(ctx context.Context, req *mcp.CallToolRequest, a installArgs) (*mcp.CallToolResult, any, error) {
	name := strings.TrimSpace(a.PackageName)
	switch {
	case name == "":
		return nil, nil, errors.New("package_name is empty; give a pip requirement such as pandas or requests==2.32.3")
	case len(name) > maxPackageLen:
		return nil, nil, fmt.Errorf("package_name is %d bytes; the limit is %d", len(name), maxPackageLen)
	case strings.ContainsAny(name, "\x00\r\n"):
		return nil, nil, fmt.Errorf("package_name %s contains a NUL or a line break; give one requirement", quote(name))
	case strings.HasPrefix(name, "-"):
		return nil, nil, fmt.Errorf("package_name %s starts with -: pip options are not accepted, give a package name or path", quote(name))
	}
	t := s.tenant(principalOf(req))
	if err := localRequirementInside(t.dir, name); err != nil {
		return nil, nil, err
	}
	if s.opts.Container != nil {
		return nil, nil, errors.New("install_package is not available with a kernel container: packages belong in its image " +
			"(a Dockerfile FROM ipybox:latest with RUN apt-get install python3-... or pip install ...; then --container-tag)")
	}
	// pip runs on this host; only a gateway's kernel needs starting.
	x, ex, ctx, done, err := s.useSession(ctx, req, a.Session, s.opts.Gateway != nil)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	if s.opts.Gateway != nil {
		return s.installRemote(ctx, ex, name)
	}
	out, err := t.runPip(ctx, "install", name)
	text := truncate(strings.TrimSpace(string(out)), maxPipOutput)
	if err != nil {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{
			Text: fmt.Sprintf("pip install %s failed (%v):\n%s", name, err, text)}}}, nil, nil
	}
	// Let the running kernel, if the session has one, see the new files
	// at once.
	if ex := x.current(); ex != nil {
		if _, err := ex.Execute(ctx, "__import__('importlib').invalidate_caches()", nil); err != nil {
			s.log.Warn("invalidating import caches", "err", err)
		}
	}
	return textResult("%s", text), nil, nil
}

// installRemote runs pip in a gateway kernel: its interpreter and disk
// are the gateway's, not this host's. Packages go to .ipybox/prefix in the
// kernel's working directory, which stays on its sys.path across resets.
func (s *Server) installRemote(ctx context.Context, ex *ipybox.Executor, name string) (*mcp.CallToolResult, any, error) {
	code := fmt.Sprintf("__import__('ipybox_runtime._remote', fromlist=['_']).pip_install(%s, %d)", pyruntime.Quote(name), int(pipTimeout.Seconds()))
	res, err := ex.Execute(ctx, code, &ipybox.ExecOptions{Timeout: pipTimeout + time.Minute})
	var pe *ipybox.PythonError
	switch {
	case errors.As(err, &pe):
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{
			Text: truncate(pe.Value, maxPipOutput)}}}, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("install_package %s: %w", quote(name), err)
	}
	return textResult("%s", truncate(strings.TrimSpace(res.Text), maxPipOutput)), nil, nil
}

func (s *Server) resetTool(ctx context.Context, req *mcp.CallToolRequest, a sessionArgs) (*mcp.CallToolResult, any, error) {
	x, _, ctx, done, err := s.useSession(ctx, req, a.Session, false)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	ex := x.current()
	if ex == nil {
		var had bool
		if ex, had, err = s.resetAsleep(ctx, x); err != nil {
			return nil, nil, fmt.Errorf("reset: %w", err)
		}
		switch {
		case had:
			return textResult("The session held no kernel (it hibernated), and the state it saved is deleted: its next cell runs in a fresh kernel. Workspace files, tool modules, installed packages and registered MCP servers are kept."), nil, nil
		case ex == nil:
			return textResult("The session's kernel has not started yet; its first cell runs in a fresh one. Workspace files, tool modules, installed packages and registered MCP servers are kept."), nil, nil
		}
		// Another call of the session started its kernel meanwhile.
	}
	swapped, err := s.swapReset(ctx, x, ex)
	if swapped {
		if err != nil {
			return nil, nil, fmt.Errorf("reset: %w", err)
		}
		return textResult("The kernel was replaced by a fresh one started in advance. Workspace files, tool modules, installed packages and registered MCP servers are kept."), nil, nil
	}
	if err := ex.Reset(ctx); err != nil {
		return nil, nil, err
	}
	return textResult("The kernel was restarted with a fresh state. Workspace files, tool modules, installed packages and registered MCP servers are kept."), nil, nil
}

func (s *Server) createSessionTool(ctx context.Context, req *mcp.CallToolRequest, _ noArgs) (*mcp.CallToolResult, createOut, error) {
	x, err := s.createSession(principalOf(req))
	if err != nil {
		return nil, createOut{}, err
	}
	res := textResult("Created session %s. Pass session=%q to execute_ipython_cell (and to reset, install_package, register_mcp_server, upload_file and download_file) in every call that should use its kernel. %s", x.handle, x.handle, s.lifetime())
	return res, createOut{Session: x.handle}, nil
}

func (s *Server) closeSessionTool(ctx context.Context, req *mcp.CallToolRequest, a sessionArgs) (*mcp.CallToolResult, any, error) {
	if a.Session == "" {
		return nil, nil, errors.New("session is empty; give the handle create_session returned (list_sessions lists yours)")
	}
	x, err := s.sessionOf(req, a.Session)
	if err != nil {
		return nil, nil, err
	}
	if x.conn != nil {
		// Never shown, so never passed; but it is the connection's.
		return nil, nil, errUnknownSession
	}
	had := x.hasKernel()
	if err := x.close(); err != nil {
		s.log.Warn("closing a session", "session", x.id, "err", err)
	}
	if had {
		return textResult("Session %s is closed: its kernel stopped, and the handle is no longer valid. Workspace files are kept.", a.Session), nil, nil
	}
	return textResult("Session %s is closed (its kernel had not started), and the handle is no longer valid.", a.Session), nil, nil
}

func (s *Server) listSessionsTool(ctx context.Context, req *mcp.CallToolRequest, _ noArgs) (*mcp.CallToolResult, listOut, error) {
	p := principalOf(req)
	var out listOut
	out.Sessions = []sessionInfo{}
	type entry struct {
		created time.Time
		info    sessionInfo
	}
	var all []entry
	live := map[[32]byte]bool{}
	for _, x := range s.sessions.store.all() {
		live[x.key] = true
		if x.conn != nil || x.principal != p || x.ctx.Err() != nil {
			continue
		}
		x.mu.Lock()
		info := sessionInfo{Session: x.handle, ID: x.id, Created: x.created.UTC().Format(time.RFC3339), LastUsed: x.used.UTC().Format(time.RFC3339),
			Kernel: x.ex != nil, Hibernated: x.asleep != nil, Busy: x.active > 0}
		x.mu.Unlock()
		info.Waiting = s.unansweredAsks(x)
		all = append(all, entry{x.created, info})
	}
	// The sessions the state folder keeps that no call has revived here.
	for _, k := range s.durability.state.list() {
		if live[k.key] || k.rec.Principal != p {
			continue
		}
		all = append(all, entry{k.rec.Created, sessionInfo{ID: keyName(k.key)[:8], Created: k.rec.Created.UTC().Format(time.RFC3339),
			LastUsed: k.rec.Used.UTC().Format(time.RFC3339), Hibernated: true}})
	}
	slices.SortFunc(all, func(a, b entry) int { return a.created.Compare(b.created) })
	var b strings.Builder
	for _, e := range all {
		info := e.info
		out.Sessions = append(out.Sessions, info)
		state := "no kernel yet"
		switch {
		case info.Kernel:
			state = "kernel running"
		case info.Hibernated:
			state = "hibernated (its next call restores it)"
		}
		if info.Busy {
			state += ", busy"
		}
		if info.Waiting > 0 {
			state += fmt.Sprintf(", its cell waits for %d approval(s) no call answers (collect_cell asks again; interrupt stops it)", info.Waiting)
		}
		name := info.Session
		if name == "" {
			name = "(session " + info.ID + ", kept since a restart: its handle is known only to its holder)"
		}
		fmt.Fprintf(&b, "%s  created %s, last used %s, %s\n", name, info.Created, info.LastUsed, state)
	}
	if len(out.Sessions) == 0 {
		return textResult("You have no sessions; create_session makes one."), out, nil
	}
	return textResult("%s", strings.TrimRight(b.String(), "\n")), out, nil
}

func (s *Server) uploadTool(ctx context.Context, req *mcp.CallToolRequest, a fileArgs) (*mcp.CallToolResult, any, error) {
	rel, local, err := checkFileArgs(a)
	if err != nil {
		return nil, nil, err
	}
	if s.opts.Gateway == nil {
		// The workspace is this host's: no kernel is needed, but the
		// session must be the caller's.
		_, _, _, done, err := s.useSession(ctx, req, a.Session, false)
		if err != nil {
			return nil, nil, err
		}
		defer done()
	}
	sr, src, err := s.tenant(principalOf(req)).allowedRoot(local)
	if err != nil {
		return nil, nil, err
	}
	if s.opts.Gateway != nil {
		// The kernel's disk is the gateway's: the file goes over its
		// channel. The same names are refused as on this host (with
		// Jupyter Server beside ipybox, it is this host's disk).
		if err := notHostConfig("relpath", rel, rel); err != nil {
			return nil, nil, err
		}
		in, err := openSource(sr, src, "local_path "+local)
		if err != nil {
			return nil, nil, err
		}
		defer in.Close()
		ex, ctx, done, err := s.transferExecutor(ctx, req, a.Session)
		if err != nil {
			return nil, nil, err
		}
		defer done()
		n, err := ex.UploadFile(ctx, rel, in)
		if err != nil {
			return nil, nil, transferTimeout(ctx, err)
		}
		return textResult("Copied %d bytes from %s to %s in the kernel's working directory.", n, local, rel), nil, nil
	}
	dr, dst, err := s.tenant(principalOf(req)).workspaceRoot(rel)
	if err != nil {
		return nil, nil, err
	}
	if err := notHostConfig("relpath", rel, dst); err != nil {
		return nil, nil, err
	}
	n, err := copyFile(sr, src, "local_path "+local, dr, dst, "relpath "+rel)
	if err != nil {
		return nil, nil, err
	}
	return textResult("Copied %d bytes from %s to %s in the workspace.", n, local, rel), nil, nil
}

// transferExecutor is sessionExecutor for a file transfer with a gateway
// kernel, bounded by defaults.Transfer: kernel code answers each step, and
// one that never does must not hold the session.
func (s *Server) transferExecutor(ctx context.Context, req *mcp.CallToolRequest, handle string) (*ipybox.Executor, context.Context, func(), error) {
	_, ex, ctx, done, err := s.useSession(ctx, req, handle, true)
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, defaults.Transfer)
	return ex, ctx, func() { cancel(); done() }, nil
}

// transferTimeout words a transfer that ran out of time.
func transferTimeout(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("the transfer did not end within %v, and was stopped (the kernel did not answer, or the file is too large to move this way): %w", defaults.Transfer, err)
	}
	return err
}

func (s *Server) downloadTool(ctx context.Context, req *mcp.CallToolRequest, a fileArgs) (*mcp.CallToolResult, any, error) {
	rel, local, err := checkFileArgs(a)
	if err != nil {
		return nil, nil, err
	}
	if s.opts.Gateway == nil {
		// The workspace is this host's: no kernel is needed, but the
		// session must be the caller's.
		_, _, _, done, err := s.useSession(ctx, req, a.Session, false)
		if err != nil {
			return nil, nil, err
		}
		defer done()
	}
	dr, dst, err := s.tenant(principalOf(req)).allowedRoot(local)
	if err != nil {
		return nil, nil, err
	}
	if err := notHostConfig("local_path", local, dst); err != nil {
		return nil, nil, err
	}
	if s.opts.Gateway != nil {
		ex, ctx, done, err := s.transferExecutor(ctx, req, a.Session)
		if err != nil {
			return nil, nil, err
		}
		defer done()
		n, err := downloadFrom(ctx, ex, rel, dr, dst, "local_path "+local)
		if err != nil {
			return nil, nil, transferTimeout(ctx, err)
		}
		return textResult("Copied %d bytes from %s in the kernel's working directory to %s.", n, rel, local), nil, nil
	}
	sr, src, err := s.tenant(principalOf(req)).workspaceRoot(rel)
	if err != nil {
		return nil, nil, err
	}
	n, err := copyFile(sr, src, "relpath "+rel, dr, dst, "local_path "+local)
	if err != nil {
		return nil, nil, err
	}
	return textResult("Copied %d bytes from %s in the workspace to %s.", n, rel, local), nil, nil
}

// notHostConfig refuses a destination in or at a path that host programs
// act on (internal/hostpaths: .git, .claude, .vscode, .mcp.json, .env,
// .ipybox...): the file comes from the workspace or an agent, and the
// host would run what it says. inner is the path below the destination's
// root directory.
func notHostConfig(label, path, inner string) error {
	if e, ok := hostpaths.Match(filepath.ToSlash(inner)); ok {
		return fmt.Errorf("%s %s is in %s, which host programs read and act on (%s); ipybox does not write there (copy it yourself if you mean it)",
			label, quote(path), e.Pattern, e.Who)
	}
	return nil
}

func checkFileArgs(a fileArgs) (rel, local string, err error) {
	if rel, err = checkRelpath(a.Relpath); err != nil {
		return "", "", err
	}
	if local, err = checkLocalPath(a.LocalPath); err != nil {
		return "", "", err
	}
	return rel, local, nil
}

// localRequirementInside refuses a pip requirement that names a local
// path (a directory, a wheel, file://, or "name @ file://…") outside the
// workspace: pip builds such a project by running its code, and the
// client should reach only what the kernel can. Names, version specifiers
// and remote URLs pass.
func localRequirementInside(workspace, req string) error {
	target := req
	if _, url, ok := strings.Cut(req, " @ "); ok {
		target = strings.TrimSpace(url)
	}
	if rest, ok := strings.CutPrefix(target, "file://"); ok {
		target = rest
	} else if strings.Contains(target, "://") {
		return nil // a remote URL: like a package name, it comes from elsewhere
	}
	if !strings.ContainsAny(target, `/\`) && !strings.HasPrefix(target, ".") && !strings.HasPrefix(target, "~") {
		return nil // a package name and specifiers
	}
	p := target
	if !filepath.IsAbs(p) {
		p = filepath.Join(workspace, p)
	}
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	if rel, err := filepath.Rel(workspace, p); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || strings.HasPrefix(target, "~") {
		return fmt.Errorf("package_name %s is a path outside the workspace; install a package by name, or copy the project into the workspace (upload_file) and give its path relative to it", quote(req))
	}
	return nil
}

func boolPtr(b bool) *bool { return &b }
