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
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ipybox/ipybox/internal/hostproc"
	"github.com/ipybox/ipybox/internal/sandbox"
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
	// exit ends the process; set by main only, so that a stop by signal
	// may end it within a bound (mcp's stopBudget). nil in tests that run
	// a command in-process.
	exit func(code int)
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
	// In the image, as root: no capabilities from here on (it re-executes
	// this binary once).
	if err := dropRoot(os.Getenv); err != nil {
		fmt.Fprintf(os.Stderr, "ipybox: %v\n", err)
		os.Exit(exitFail)
	}
	imageConfigHome(os.Getenv)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &cliEnv{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, exit: os.Exit}, os.Args[1:])
	stop()
	os.Exit(code)
}

// hiddenCommands are internal subcommands that are not listed in help
// (the sandbox's in-namespace init re-executes this binary).
var hiddenCommands = map[string]func(args []string) int{
	sandbox.InitCommand:     sandbox.InitMain,
	hostproc.ConfineCommand: hostproc.ConfineMain,
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
	if upstreamServerFlags[strings.SplitN(name, "=", 2)[0]] {
		// Upstream ipybox 0.9's console script was its MCP server, with
		// its flags and no command (`uvx ipybox --workspace DIR`, as its
		// plugin ran it): such a configuration now reaches this binary,
		// and runs on.
		fmt.Fprintf(env.stderr, "ipybox: flags with no command are upstream ipybox 0.9's MCP server; running `ipybox mcp %s` (write `ipybox mcp` in the configuration to skip this line)\n", strings.Join(args, " "))
		for _, c := range commands() {
			if c.name == "mcp" {
				return c.run(ctx, env, args)
			}
		}
	}
	if strings.HasPrefix(name, "-") {
		fmt.Fprintf(env.stderr, "ipybox: %s is not a command; flags come after one: the MCP server is `ipybox mcp` (upstream ipybox 0.9's `ipybox --workspace DIR` is `ipybox mcp --workspace DIR`); run `ipybox help` for the list\n", name)
		return exitUsage
	}
	fmt.Fprintf(env.stderr, "ipybox: unknown command %q; run `ipybox help` for the list\n", name)
	return exitUsage
}

// upstreamServerFlags are the flags upstream ipybox 0.9's console script,
// its MCP server, took first (its plugin ran `ipybox --workspace DIR`,
// and `--sandbox --sandbox-config FILE`); `ipybox mcp` has each.
var upstreamServerFlags = map[string]bool{
	"--workspace": true, "--sandbox": true, "--sandbox-config": true, "--log-level": true,
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
		printDefaults(fs, out)
	}
	return fs
}

// printDefaults is fs.PrintDefaults with each flag written with two
// dashes, as the docs and the usage lines write them (the flag package
// takes either).
func printDefaults(fs *flag.FlagSet, out io.Writer) {
	var b strings.Builder
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(out)
	io.WriteString(out, longFlag.ReplaceAllString(b.String(), "  --$1"))
}

// longFlag is a flag of more than one letter at the start of a line of
// PrintDefaults (-c stays -c).
var longFlag = regexp.MustCompile(`(?m)^  -([A-Za-z0-9][-A-Za-z0-9_.]+)`)

// parseFlags parses args; -h prints the usage to stdout and ends with
// exitOK, a bad flag ends with exitUsage after one line on stderr that
// names the flag and the fix (never the whole usage: a typo should not
// scroll the screen).
// parseSubcommand parses a command whose first argument is a subcommand
// (auth login, approvals log): the subcommand, then the flags of rest.
// With no arguments it prints the usage as an error; with -h the usage.
func parseSubcommand(fs *flag.FlagSet, env *cliEnv, args []string) (sub string, done bool, code int) {
	if len(args) == 0 {
		fs.SetOutput(env.stderr)
		fs.Usage()
		return "", true, exitUsage
	}
	sub = args[0]
	if sub == "-h" || sub == "-help" || sub == "--help" {
		fs.SetOutput(env.stdout)
		fs.Usage()
		return sub, true, exitOK
	}
	done, code = parseFlags(fs, env, args[1:])
	return sub, done, code
}

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
	// The flag package prints its error and the usage on failure; this
	// prints one line instead. Each value is wrapped meanwhile, so that a
	// bad value is known by its flag, not by parsing the message.
	out := fs.Output()
	fs.SetOutput(io.Discard)
	var bad *badValue
	restore := map[*flag.Flag]flag.Value{}
	fs.VisitAll(func(f *flag.Flag) {
		restore[f] = f.Value
		w := &checkedValue{Value: f.Value, name: f.Name, bad: &bad}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			f.Value = &checkedBool{w}
		} else {
			f.Value = w
		}
	})
	err := fs.Parse(args)
	for f, v := range restore {
		f.Value = v
	}
	fs.SetOutput(out)
	if err == nil {
		return false, 0
	}
	if errors.Is(err, flag.ErrHelp) {
		return true, exitOK
	}
	fmt.Fprintf(out, "ipybox %s: %s\n", fs.Name(), flagError(fs, err, bad))
	return true, exitUsage
}

// badValue is a value a flag refused.
type badValue struct {
	name, value string
	err         error
}

// checkedValue records the first value its flag refuses.
type checkedValue struct {
	flag.Value
	name string
	bad  **badValue
}

func (v *checkedValue) Set(s string) error {
	err := v.Value.Set(s)
	if err != nil && *v.bad == nil {
		*v.bad = &badValue{name: v.name, value: s, err: err}
	}
	return err
}

// checkedBool is a checkedValue of a boolean flag.
type checkedBool struct{ *checkedValue }

func (checkedBool) IsBoolFlag() bool { return true }

// flagError turns an error of fs.Parse into one line: the flag as it is
// written (--name), what is wrong, and the fix.
func flagError(fs *flag.FlagSet, err error, bad *badValue) string {
	help := fmt.Sprintf("`ipybox help %s` lists the flags", fs.Name())
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		if s := suggestFlag(fs, name); s != "" {
			return fmt.Sprintf("unknown flag --%s; did you mean --%s?", name, s)
		}
		return fmt.Sprintf("unknown flag --%s; %s", name, help)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		f := fs.Lookup(name)
		if f == nil {
			return fmt.Sprintf("--%s needs a value", name)
		}
		arg, _ := flag.UnquoteUsage(f)
		return fmt.Sprintf("--%s needs a value (--%s %s)", name, name, arg)
	}
	if bad != nil {
		f := fs.Lookup(bad.name)
		if g, ok := f.Value.(flag.Getter); ok {
			switch g.Get().(type) {
			case time.Duration:
				if _, err := strconv.ParseFloat(bad.value, 64); err == nil {
					return fmt.Sprintf("--%s %s: add a unit, as in --%s %ss (ms, s, m or h)", bad.name, bad.value, bad.name, bad.value)
				}
				return fmt.Sprintf("--%s %q: want a duration, as in --%s 30s (ms, s, m or h)", bad.name, bad.value, bad.name)
			case int, int64, uint, uint64:
				return fmt.Sprintf("--%s %q: want a whole number", bad.name, bad.value)
			case bool:
				return fmt.Sprintf("--%s=%s: want --%s, --%s=true or --%s=false", bad.name, bad.value, bad.name, bad.name, bad.name)
			}
		}
		return fmt.Sprintf("--%s %q: %v", bad.name, bad.value, bad.err)
	}
	return fmt.Sprintf("%s; %s", msg, help)
}

// suggestFlag returns the flag of fs that name most likely misspells, or
// "" when none is close.
func suggestFlag(fs *flag.FlagSet, name string) string {
	best, bestD := "", 0
	fs.VisitAll(func(f *flag.Flag) {
		d := editDistance(strings.ToLower(name), f.Name)
		if strings.HasPrefix(f.Name, name) && len(name) >= 3 {
			d = 1 // an abbreviation
		}
		if best == "" || d < bestD || d == bestD && f.Name < best {
			best, bestD = f.Name, d
		}
	})
	if best == "" || bestD > max(1, min(len(name), len(best))/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ", ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// newLogger returns a logger that writes to stderr at level (debug, info,
// warn, error), or to file when file is set.
// checkLogLevel checks --log-level's value.
func checkLogLevel(level string) error {
	if err := new(slog.Level).UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return nil
}

func newLogger(env *cliEnv, level, file string) (*slog.Logger, func(), error) {
	var lv slog.Level
	if err := checkLogLevel(level); err != nil {
		return nil, nil, err
	}
	lv.UnmarshalText([]byte(level))
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
