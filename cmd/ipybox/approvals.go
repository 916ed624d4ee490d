package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ipybox/ipybox/internal/escape"
	"github.com/ipybox/ipybox/internal/policy"
)

const approvalsUsage = `
Usage: ipybox approvals rules  [--approval-policy FILE]
       ipybox approvals revoke [--approval-policy FILE] ID|LINE...
       ipybox approvals log    [--approval-log FILE] [-n N] [--session ID] [--json]

Reviews what the approval policy allows, asks about and denies, and what was
decided. The policy is a file of allow, ask and deny rules that exec and mcp
read (--approval-policy; docs/approvals.md); answers remembered "always" are
written into it. The audit log holds every decision: the call, who decided
(a rule, a remembered answer, a person through a channel, a mode's default),
the rule or the reason, and how long it waited.

rules   lists the rules with their IDs and lines.
revoke  removes rules, named by ID or by line number (with the "# remembered"
        comment above each). Running sessions stop applying them at their next
        call: each re-reads the file when it changes.
log     prints the last decisions (-n), oldest first.
`

func approvalsCommand() *command {
	return &command{name: "approvals", summary: "review approval rules and decisions (rules, revoke, log)", run: runApprovals}
}

func runApprovals(ctx context.Context, env *cliEnv, args []string) int {
	fs := newFlagSet(env, "approvals", approvalsUsage)
	var pf policyFlags
	pf.register(fs)
	n := fs.Int("n", 50, "log: print the last `N` decisions (0: all)")
	session := fs.String("session", "", "log: print only the decisions of the session `ID`")
	asJSON := fs.Bool("json", false, "log: print the entries as JSON lines, as stored")
	sub, done, code := parseSubcommand(fs, env, args)
	if done {
		return code
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(env.stderr, "ipybox approvals %s: %s\n", sub, fmt.Sprintf(format, a...))
		return code
	}
	file, logFile, err := pf.paths()
	if err != nil {
		return fail(exitFail, "%v", err)
	}
	switch sub {
	case "rules":
		return approvalsRules(env, fs, file, fail)
	case "revoke":
		return approvalsRevoke(env, fs, file, fail)
	case "log":
		return approvalsLog(env, fs, logFile, logOptions{n: *n, session: *session, json: *asJSON}, fail)
	}
	return fail(exitUsage, "unknown subcommand; use rules, revoke or log (see `ipybox help approvals`)")
}

// failFunc prints a subcommand's error and returns its exit status.
type failFunc func(code int, format string, a ...any) int

// approvalsRules lists the rules of the policy file.
func approvalsRules(env *cliEnv, fs *flag.FlagSet, file string, fail failFunc) int {
	if fs.NArg() > 0 {
		return fail(exitUsage, "takes no arguments")
	}
	if file == "" {
		return fail(exitUsage, "--approval-policy none: there is no file to read")
	}
	f, err := policy.Open(file)
	if err != nil {
		return fail(exitFail, "%v", err)
	}
	rs, err := f.Rules()
	if err != nil {
		return fail(exitFail, "%v", err)
	}
	printRules(env.stdout, f.Path(), rs)
	return exitOK
}

// approvalsRevoke removes the rules named by ID or line number.
func approvalsRevoke(env *cliEnv, fs *flag.FlagSet, file string, fail failFunc) int {
	if fs.NArg() == 0 {
		return fail(exitUsage, "name the rules to remove, by ID or line number, after the flags (`ipybox approvals rules` lists them)")
	}
	if file == "" {
		return fail(exitUsage, "--approval-policy none: there is no file to change")
	}
	f, err := policy.Open(file)
	if err != nil {
		return fail(exitFail, "%v", err)
	}
	for _, id := range fs.Args() {
		removed, err := f.Remove(id)
		if err != nil {
			return fail(exitFail, "%v", err)
		}
		for _, r := range removed {
			fmt.Fprintf(env.stdout, "revoked %s (line %d): %s\n", r.ID, r.Line, escape.Text(r.String()))
		}
	}
	return exitOK
}

// logOptions are the log subcommand's flags.
type logOptions struct {
	n       int    // the last n entries (0: all)
	session string // only this session's ("": all)
	json    bool   // as stored
}

// approvalsLog prints the audit log's last entries.
func approvalsLog(env *cliEnv, fs *flag.FlagSet, logFile string, o logOptions, fail failFunc) int {
	if fs.NArg() > 0 {
		return fail(exitUsage, "takes no arguments")
	}
	if logFile == "" {
		return fail(exitUsage, "--approval-log none: there is no log to read")
	}
	entries, skipped, err := policy.ReadLog(logFile)
	if err != nil {
		return fail(exitFail, "%v", err)
	}
	if o.session != "" {
		var mine []policy.Entry
		for _, e := range entries {
			if e.Session == o.session {
				mine = append(mine, e)
			}
		}
		entries = mine
	}
	if o.n > 0 && len(entries) > o.n {
		entries = entries[len(entries)-o.n:]
	}
	if o.json {
		enc := json.NewEncoder(env.stdout)
		enc.SetEscapeHTML(false)
		for _, e := range entries {
			enc.Encode(e)
		}
	} else {
		printLog(env.stdout, entries)
	}
	if skipped > 0 {
		fmt.Fprintf(env.stderr, "ipybox approvals log: %d lines of %s are not entries (cut short?) and were skipped\n", skipped, logFile)
	}
	return exitOK
}

func printRules(w io.Writer, file string, rs *policy.Rules) {
	all := rs.All()
	fmt.Fprintf(w, "%s: %d rules\n", escape.Text(file), len(all))
	if len(all) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLINE\tRULE")
	for _, r := range all {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", r.ID, r.Line, escape.Text(r.String()))
	}
	tw.Flush()
	if red := rs.Redact(); len(red) > 0 {
		fmt.Fprintf(w, "redacted in the log: %s\n", escape.Text(strings.Join(red, " ")))
	}
}

// printLog writes one line per decision. Kernel code chose the commands
// and arguments: they are escaped, and long ones cut.
func printLog(w io.Writer, entries []policy.Entry) {
	for _, e := range entries {
		what := "shell " + e.Command
		if e.Kind != "shell" {
			what = fmt.Sprintf("tool %s.%s %s", e.Server, e.Tool, e.Args)
			if e.ArgsNote != "" {
				what += " (" + e.ArgsNote + ")"
			}
		}
		by := e.By
		switch {
		case e.Rule != nil:
			by += fmt.Sprintf(" %s (%s)", e.Rule.ID, e.Rule.Text)
		case e.Channel != "":
			by += " through " + e.Channel
		}
		if e.Person != "" {
			by += " (" + e.Person + ")"
		}
		sess := e.Session
		if e.Principal != "" {
			sess += " principal=" + e.Principal
		}
		line := fmt.Sprintf("%s  %s  %-9s %s  by %s", e.Time.Local().Format(time.DateTime), sess, e.Decision, cut(what, 200), by)
		if e.Remember != "" {
			line += ", remembered for " + e.Remember
		}
		if e.Reason != "" {
			line += ": " + cut(e.Reason, 200)
		}
		if e.WaitedMS >= 1 {
			line += fmt.Sprintf(" (waited %.0f ms)", e.WaitedMS)
		}
		fmt.Fprintln(w, escape.Text(line))
	}
}

// cut keeps the head of s, saying how much is left out.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return fmt.Sprintf("%s[... %d more]", string(r[:n]), len(r)-n)
}
