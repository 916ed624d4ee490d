// Command ipybox runs code actions for AI agents in a stateful IPython
// kernel. See `ipybox help`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/ipybox/ipybox/sandbox"
)

// command is one subcommand. run returns the process exit code.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *cliEnv, args []string) int
}

// cliEnv is what a subcommand may touch: its standard streams and the
// process environment. Tests supply their own.
type cliEnv struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
}

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // the code failed (Python error, timeout) or a check failed
	exitUsage = 2 // bad flags or arguments
)

func commands() []*command {
	return []*command{
		execCommand(),
		apigenCommand(),
		authCommand(),
		approvalsCommand(),
		mcpCommand(),
		doctorCommand(),
		versionCommand(),
	}
}

func main() {
	if h := hiddenCommand(os.Args); h != nil {
		os.Exit(h(os.Args[2:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &cliEnv{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}, os.Args[1:])
	stop()
	os.Exit(code)
}

// hiddenCommands are internal subcommands that are not listed in help
// (the sandbox's in-namespace init re-executes this binary).
var hiddenCommands = map[string]func(args []string) int{
	sandbox.InitCommand: sandbox.InitMain,
}

func init() {
	sandboxProbe = func(ctx context.Context) error {
		sb, err := sandbox.New(nil, nil)
		if err != nil {
			return err
		}
		defer sb.Close()
		return sb.Probe(ctx)
	}
	sandboxProtections = sandbox.Protections
	sandboxInfo = func() string {
		info := "limits: " + sandbox.DefaultConfig().Limits.String() + " (resource limits; cgroup v2 is not used)"
		if os.Geteuid() == 0 {
			info += fmt.Sprintf("; as root, sandboxed processes run as host uid %d", sandbox.MappedID)
		}
		return info
	}
}

func hiddenCommand(args []string) func([]string) int {
	if len(args) < 2 {
		return nil
	}
	return hiddenCommands[args[1]]
}

func run(ctx context.Context, env *cliEnv, args []string) int {
	if len(args) == 0 {
		printHelp(env.stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			for _, c := range commands() {
				if c.name == args[1] {
					return c.run(ctx, env, []string{"-h"})
				}
			}
		}
		printHelp(env.stdout)
		return exitOK
	case "-version", "--version":
		name = "version"
	}
	for _, c := range commands() {
		if c.name == name {
			return c.run(ctx, env, args[1:])
		}
	}
	fmt.Fprintf(env.stderr, "ipybox: unknown command %q; run `ipybox help` for the list\n", name)
	return exitUsage
}

func printHelp(w io.Writer) {
	fmt.Fprint(w, `ipybox runs code actions for AI agents: Python, shell commands and MCP tool
calls in a stateful IPython kernel, optionally sandboxed.

Usage: ipybox <command> [flags]

Commands:
`)
	cs := commands()
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	for _, c := range cs {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun `ipybox help <command>` for a command's flags.\n")
}

// newFlagSet returns a flag set whose usage text starts with usage and
// lists the flags.
func newFlagSet(env *cliEnv, name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "%s\n\nFlags:\n", strings.TrimSpace(usage))
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args; -h prints the usage to stdout and ends with
// exitOK, a bad flag ends with exitUsage.
func parseFlags(fs *flag.FlagSet, env *cliEnv, args []string) (done bool, code int) {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(env.stdout)
			fs.Usage()
			return true, exitOK
		}
		if a == "--" {
			break
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, exitOK
		}
		return true, exitUsage
	}
	return false, 0
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ", ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// newLogger returns a logger that writes to stderr at level (debug, info,
// warn, error), or to file when file is set.
func newLogger(env *cliEnv, level, file string) (*slog.Logger, func(), error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	w, closer := env.stderr, func() {}
	if file != "" {
		f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("--log-file: %w", err)
		}
		w, closer = f, func() { f.Close() }
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lv})), closer, nil
}
