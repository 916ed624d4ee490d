package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/escape"
	"github.com/ipybox/ipybox/internal/kernel"
)

const execUsage = `
Usage: ipybox exec [flags] [FILE | -]

Runs Python code in one IPython kernel and prints the output as it streams.
The code comes from -c (repeatable: each -c is one cell, run in order in the
same kernel), from FILE, or from standard input (FILE "-" or no argument).
Images (plots) are saved to the images directory and their paths printed.
On a terminal, control characters and escape sequences in the output are
shown escaped (\x1b[2K), but for newlines, tabs, carriage returns and
colours; into a pipe or a file, and with --json, the output is unchanged.

Exit status: 0 on success, 1 when a cell raised, timed out or the kernel
died (the traceback goes to stderr), 2 for bad flags.
`

type execFlags struct {
	cells     stringList
	timeout   time.Duration
	workspace string
	imagesDir string
	python    string
	json      bool
	logLevel  string
	mcpConfig string
	approval  string
	shell     bool
	policy    policyFlags
	telemetry telemetryFlags
	sandbox   sandboxFlags
	container containerFlags
	gateway   gatewayFlags
}

func execCommand() *command {
	return &command{name: "exec", summary: "run Python code in a kernel and print its output", run: runExec}
}

func runExec(ctx context.Context, env *cliEnv, args []string) int {
	var f execFlags
	fs := f.flagSet(env)
	if done, code := parseFlags(fs, env, args); done {
		return code
	}
	env = terminalEnv(env, f.json)
	defer flushTerminal(env)
	fail := func(code int, err error) int {
		fmt.Fprintf(env.stderr, "ipybox exec: %s\n", strings.TrimPrefix(err.Error(), "ipybox: "))
		return code
	}
	plan, err := f.plan(env, fs.Args())
	if err != nil {
		return fail(exitUsage, err)
	}
	log, closeLog, err := newLogger(env, f.logLevel, "")
	if err != nil {
		return fail(exitUsage, err)
	}
	defer closeLog()
	if err := harden(); err != nil {
		log.Warn("could not make ipybox non-dumpable", "err", err)
	}
	load := f.policy.load
	if plan.sandbox == nil {
		// No sandbox to hide the files from: none is made before it is
		// written.
		load = func(log *slog.Logger) (*ipybox.ApprovalPolicy, error) { return f.policy.loadOnWrite(log, env.stderr) }
	}
	if plan.approvals, err = load(log); err != nil {
		return fail(exitUsage, err)
	}
	if plan.approvals != nil {
		defer plan.approvals.Close()
	}
	tp, flush, err := f.telemetry.tracing(ctx, env, log)
	if err != nil {
		return fail(exitUsage, err)
	}
	defer flush() // after the executor's Close: its last spans go out
	plan.tracer = tp
	if err := f.checkLocal(ctx, env, plan); err != nil {
		return fail(exitUsage, err)
	}
	if plan.container != nil {
		// The daemon and the image, now; the default image is built on
		// its first use.
		if err := containerProbe(ctx, plan.container, env.stderr); err != nil {
			return fail(exitFail, fmt.Errorf("--container-tag: %w", err))
		}
	}
	ex, err := f.start(ctx, env, plan, log)
	if err != nil {
		return fail(exitFail, err)
	}
	defer ex.Close()
	f.announceAuto(env, ex, plan)
	return f.runCells(ctx, env, ex, plan.cells)
}

// flagSet is exec's flag set, bound to f.
func (f *execFlags) flagSet(env *cliEnv) *flag.FlagSet {
	fs := newFlagSet(env, "exec", execUsage)
	fs.Var(&f.cells, "c", "`CODE` to run as one cell (repeatable)")
	fs.DurationVar(&f.timeout, "timeout", 0, "time limit per cell, e.g. 30s (0: none); on expiry the cell is interrupted")
	fs.StringVar(&f.workspace, "workspace", "", "kernel working `DIR`, created if missing; when set, cells that change directory are moved back (default: the current directory)")
	fs.StringVar(&f.imagesDir, "images-dir", "", "`DIR` for saved images (default: <workspace>/images)")
	fs.StringVar(&f.python, "python", "", "Python `interpreter` with ipykernel (default: discovered)")
	fs.BoolVar(&f.json, "json", false, "write one JSON event per line instead of plain output")
	fs.StringVar(&f.logLevel, "log-level", "warn", "log `level` on stderr: debug, info, warn or error")
	fs.StringVar(&f.mcpConfig, "mcp-config", "", "register the MCP servers of this `FILE` ({\"mcpServers\": {...}}) before running")
	fs.StringVar(&f.approval, "approval", approvalAuto, "how tool calls (and, with --approve-shell, shell commands) are approved: auto, prompt (ask on the terminal; no terminal rejects) or reject")
	f.sandbox.register(fs, false)
	f.container.register(fs)
	fs.BoolVar(&f.shell, "approve-shell", false, "ask for approval of every shell command (!cmd, %%bash, ...) too")
	f.policy.register(fs)
	f.gateway.register(fs)
	f.telemetry.register(fs, false)
	return fs
}

// execPlan is what the flags ask for, checked.
type execPlan struct {
	cells     []string
	container *ipybox.ContainerConfig // nil: no container
	sandbox   *ipybox.SandboxConfig   // nil: unsandboxed (or a container, or a gateway)
	gateway   *ipybox.GatewayConfig   // nil: a local kernel
	servers   []namedServer
	approvals *ipybox.ApprovalPolicy // loaded after the logger
	tracer    trace.TracerProvider   // started after the logger; nil: no tracing
}

// plan checks the flags and reads what they name; every error is a usage
// error.
func (f *execFlags) plan(env *cliEnv, args []string) (*execPlan, error) {
	p := &execPlan{}
	var err error
	if p.cells, err = execCells(env, f.cells, args); err != nil {
		return nil, err
	}
	if p.container, err = f.container.config(&f.sandbox); err != nil {
		return nil, err
	}
	if p.container == nil {
		if p.sandbox, _, err = f.sandbox.policy(); err != nil {
			return nil, err
		}
	}
	if p.gateway, err = f.gateway.config(env); err != nil {
		return nil, err
	}
	if p.gateway != nil && (p.sandbox != nil || p.container != nil) {
		return nil, errors.New("--sandbox and --container confine a local kernel; a gateway kernel is confined by its gateway: drop one of them or --gateway-url")
	}
	if err := checkApprovalMode(f.approval); err != nil {
		return nil, err
	}
	if f.mcpConfig != "" {
		if p.servers, err = loadMCPConfig(f.mcpConfig); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// checkLocal checks what lives on this host: the workspace, made if
// missing, and an unconfined kernel's --python, named by its flag. A
// sandboxed kernel's interpreter is never run on the host, not even to
// probe it.
func (f *execFlags) checkLocal(ctx context.Context, env *cliEnv, p *execPlan) error {
	if f.workspace != "" {
		if err := ensureWorkspace(env, "ipybox exec", f.workspace); err != nil {
			return err
		}
	}
	if f.python != "" && p.sandbox == nil && p.container == nil && p.gateway == nil {
		if _, err := kernel.CheckPython(ctx, f.python, "--python", f.workspace); err != nil {
			return err
		}
	}
	return nil
}

// start starts the executor and registers the --mcp-config servers.
func (f *execFlags) start(ctx context.Context, env *cliEnv, p *execPlan, log *slog.Logger) (*ipybox.Executor, error) {
	ex, err := ipybox.Start(ctx, &ipybox.Options{
		Python:    f.python,
		WorkDir:   f.workspace,
		ImagesDir: f.imagesDir,
		Logger:    log,

		ApproveShellCommands: f.shell,
		ApprovalPolicy:       p.approvals,
		Sandbox:              p.sandbox,
		Container:            p.container,
		OAuthURL:             printAuthURL(env.stderr, "ipybox exec"),
		Gateway:              p.gateway,
		ToolServerAddr:       f.gateway.toolAddr,
		TracerProvider:       p.tracer,
		TraceCode:            f.telemetry.includeCode,
	})
	if err != nil {
		return nil, err
	}
	for _, s := range p.servers {
		if _, err := ex.RegisterMCPServer(ctx, s.name, s.cfg); err != nil {
			ex.Close()
			return nil, err
		}
	}
	return ex, nil
}

// announceAuto says once that --approval auto (the default) lets tool
// calls run, so that nobody mistakes it for a gate.
func (f *execFlags) announceAuto(env *cliEnv, ex *ipybox.Executor, p *execPlan) {
	if f.approval != approvalAuto || len(ex.MCPServers()) == 0 {
		return
	}
	rules := ""
	if file := p.approvals.File(); file != "" {
		rules = "; the deny and ask rules of " + file + " still apply"
	}
	fmt.Fprintf(env.stderr, "ipybox exec: --approval auto: tool calls run without approval (MCP servers: %s)%s\n", strings.Join(ex.MCPServers(), ", "), rules)
}

// runCells runs the cells in order, and stops at the first that fails,
// saying how many it skips.
func (f *execFlags) runCells(ctx context.Context, env *cliEnv, ex *ipybox.Executor, cells []string) int {
	out := newPrinter(env, f.json)
	out.decider = newDecider(f.approval)
	for i, cell := range cells {
		// The output streams out as it comes: the result keeps only a
		// head and a tail of it, so that memory stays bounded.
		if !out.cell(ctx, ex, i, cell, &ipybox.ExecOptions{Timeout: f.timeout, KeepText: execKeepText}) {
			if left := len(cells) - i - 1; left > 0 {
				flushTerminal(env)
				fmt.Fprintf(env.stderr, "ipybox exec: cell %d of %d failed; %s not run\n", i+1, len(cells), plural(left, "the cell after it was", "the %d cells after it were"))
			}
			return exitFail
		}
	}
	return exitOK
}

// execCells returns the cells to run: the -c values, else the file (or
// standard input) as one cell.
func execCells(env *cliEnv, cs []string, rest []string) ([]string, error) {
	if len(cs) > 0 {
		if len(rest) > 0 {
			return nil, fmt.Errorf("give code with -c or as FILE, not both (got -c and %q)", rest[0])
		}
		return cs, nil
	}
	if len(rest) > 1 {
		return nil, fmt.Errorf("one FILE at most, got %d: %q", len(rest), rest)
	}
	var r io.Reader = env.stdin
	if len(rest) == 1 && rest[0] != "-" {
		b, err := os.ReadFile(rest[0])
		if err != nil {
			return nil, fmt.Errorf("read code: %w", err)
		}
		return []string{string(b)}, nil
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read code from standard input: %w", err)
	}
	return []string{string(b)}, nil
}

// terminalEnv returns env with its stdout and stderr escaped where they are
// terminals (stdout not with --json, which is for programs). Kernel code
// chooses what exec prints, and on a terminal a control sequence would
// write the clipboard, or move the cursor to rewrite what ipybox printed,
// an approval prompt included. Into a pipe or a file the output stays
// byte for byte.
func terminalEnv(env *cliEnv, asJSON bool) *cliEnv {
	e := *env
	if !asJSON {
		e.stdout = terminalWriter(env.stdout)
	}
	e.stderr = terminalWriter(env.stderr)
	return &e
}

// terminalWriter returns w, escaped if it is a terminal.
func terminalWriter(w io.Writer) io.Writer {
	if f, ok := w.(*os.File); ok && isTerminal(f) {
		return escape.NewWriter(f)
	}
	return w
}

// flushTerminal ends what kernel output left pending on env's terminals:
// an unfinished sequence is shown escaped and colours are reset, so that
// what ipybox writes next is shown as written.
func flushTerminal(env *cliEnv) {
	for _, w := range []io.Writer{env.stdout, env.stderr} {
		if t, ok := w.(*escape.Writer); ok {
			t.Flush()
		}
	}
}

// execKeepText is how much of a cell's text the --json result event
// repeats (its head and tail); every output event carries its own text.
const execKeepText = 64 << 10

// printer writes a cell's events as plain text or as JSON lines.
type printer struct {
	env     *cliEnv
	json    *json.Encoder
	decider *terminalDecider
}

func newPrinter(env *cliEnv, asJSON bool) *printer {
	p := &printer{env: env}
	if asJSON {
		p.json = json.NewEncoder(env.stdout)
		p.json.SetEscapeHTML(false)
	}
	return p
}

// jsonEvent is the shape of one --json line.
type jsonEvent struct {
	Type      string          `json:"type"`
	Cell      int             `json:"cell"`
	Stream    string          `json:"stream,omitempty"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Update    bool            `json:"update,omitempty"`
	Result    bool            `json:"result,omitempty"`
	Images    []string        `json:"images,omitempty"`
	Data      map[string]any  `json:"data,omitempty"`
	Wait      bool            `json:"wait,omitempty"`
	Truncated bool            `json:"truncated,omitempty"`
	Restarted string          `json:"restarted,omitempty"`
	Omitted   int64           `json:"omitted,omitempty"`
	Kind      string          `json:"kind,omitempty"`
	Message   string          `json:"message,omitempty"`
	Name      string          `json:"name,omitempty"`
	Value     string          `json:"value,omitempty"`
	Traceback []string        `json:"traceback,omitempty"`
	Server    string          `json:"server,omitempty"`
	Tool      string          `json:"tool,omitempty"`
	Args      json.RawMessage `json:"args,omitempty"`
	Command   string          `json:"command,omitempty"`
	Why       string          `json:"why,omitempty"`
}

// cell runs one cell and reports whether it succeeded.
// With --json a cell ends in one event: "result", or, for a failing cell,
// "error" alone, with the output of the partial result as its text.
func (p *printer) cell(ctx context.Context, ex *ipybox.Executor, i int, code string, opts *ipybox.ExecOptions) bool {
	var held *ipybox.Result
	defer func() {
		if held != nil {
			p.event(i, held)
		}
	}()
	for ev, err := range ex.Stream(ctx, code, opts) {
		if err != nil {
			p.failWith(i, err, held)
			held = nil
			return false
		}
		if r, ok := ev.(*ipybox.Result); ok && p.json != nil {
			held = r
			continue
		}
		p.event(i, ev)
		if r, ok := ev.(*ipybox.ApprovalRequest); ok {
			p.decider.decide(r)
		}
	}
	return true
}

func (p *printer) event(i int, ev ipybox.Event) {
	if p.json != nil {
		var j jsonEvent
		switch e := ev.(type) {
		case *ipybox.Output:
			j = jsonEvent{Type: "output", Stream: e.Stream, Text: e.Text}
		case *ipybox.Display:
			j = jsonEvent{Type: "display", ID: e.ID, Update: e.Update, Result: e.Result, Text: e.Text, Images: e.Images, Data: e.Data}
		case *ipybox.ClearOutput:
			j = jsonEvent{Type: "clear_output", Wait: e.Wait}
		case *ipybox.Result:
			j = jsonEvent{Type: "result", Text: e.Text, Images: e.Images, Truncated: e.Truncated, Omitted: e.Omitted}
			if e.Restarted != nil {
				j.Restarted = e.Restarted.Error()
			}
		case *ipybox.ApprovalRequest:
			j = jsonEvent{Type: "approval", Kind: string(e.Kind), Server: e.Server, Tool: e.Tool, Args: e.Args, Command: e.Command, Why: e.Why}
		default:
			return
		}
		j.Cell = i
		p.json.Encode(j)
		return
	}
	switch e := ev.(type) {
	case *ipybox.Output:
		w := p.env.stdout
		if e.Stream == "stderr" {
			w = p.env.stderr
		}
		io.WriteString(w, e.Text)
	case *ipybox.Display:
		if len(e.Images) == 0 && e.Text != "" {
			fmt.Fprintln(p.env.stdout, e.Text)
		}
		for _, img := range e.Images {
			fmt.Fprintf(p.env.stdout, "[image saved: %s]\n", img)
		}
	case *ipybox.Result:
		if e.Restarted != nil {
			flushTerminal(p.env)
			fmt.Fprintf(p.env.stderr, "ipybox: %v before this cell; its state was lost, and the cell ran in a fresh kernel\n", e.Restarted)
		}
		if e.Truncated {
			flushTerminal(p.env)
			fmt.Fprintln(p.env.stderr, "ipybox: the kernel did not confirm the end of the output; some output may be missing")
		}
	}
}

func (p *printer) fail(i int, err error) { p.failWith(i, err, nil) }

// failWith reports a cell's error; partial is its partial result (with
// --json), whose text the error event carries.
func (p *printer) failWith(i int, err error, partial *ipybox.Result) {
	if partial != nil && p.json == nil {
		p.event(i, partial)
	}
	var pe *ipybox.PythonError
	kind := "error"
	switch {
	case errors.As(err, &pe):
		kind = "python"
	case errors.Is(err, ipybox.ErrTimeout):
		kind = "timeout"
	case errors.Is(err, ipybox.ErrKernelDied):
		kind = "kernel_died"
	case errors.Is(err, context.Canceled):
		kind = "cancelled"
	}
	if p.json != nil {
		j := jsonEvent{Type: "error", Cell: i, Kind: kind, Message: err.Error()}
		if partial != nil {
			j.Text, j.Images, j.Truncated, j.Omitted = partial.Text, partial.Images, partial.Truncated, partial.Omitted
		}
		if pe != nil {
			j.Name, j.Value, j.Traceback = pe.Name, pe.Value, pe.Traceback
		}
		p.json.Encode(j)
		return
	}
	if pe != nil {
		fmt.Fprintln(p.env.stderr, strings.TrimRight(pe.TracebackText(), "\n"))
		return
	}
	flushTerminal(p.env)
	fmt.Fprintf(p.env.stderr, "ipybox: %v\n", err)
}

// plural returns one when n is 1, else many with n formatted in.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return fmt.Sprintf(many, n)
}
