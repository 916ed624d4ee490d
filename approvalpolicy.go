package ipybox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ipybox/ipybox/internal/approvaltext"
	"github.com/ipybox/ipybox/internal/policy"
	"github.com/ipybox/ipybox/internal/toolserver"
)

// ApprovalPolicy is an approval policy: a file of allow, ask and deny rules
// on the host, and the audit log where every decision is appended. Load it
// once with LoadApprovalPolicy and give it to any number of Executors
// (Options.ApprovalPolicy); Close it after them.
//
// Before the application is asked about a tool call or a shell command,
// the policy decides it: a deny rule refuses it and an allow rule lets it
// run, without asking; an ask rule asks even where the application would
// not ask; nothing matched leaves it to Options.NoToolApproval and
// Options.ApproveShellCommands. Deny comes first, then ask, then allow.
// An answer can be remembered for the session or, in the file, always
// (ApprovalRequest.Answer). The file is read again when it changes, so
// that a rule removed from it (`ipybox approvals revoke`) stops applying
// to running Executors at their next call. docs/approvals.md describes
// the file.
//
// Kernel code must not be able to write the file or the log: Start
// refuses a policy or log inside the workspace, or inside a folder the
// sandbox lets kernels write, and the sandbox hides them. Without a
// sandbox or a container, kernel code has the user's rights and can
// change both: the policy is then advice, as approvals are.
type ApprovalPolicy struct {
	file *policy.File // nil: no rules
	log  *policy.Log  // nil: no audit log
	lg   *slog.Logger

	closeOnce sync.Once
	closeErr  error
}

// ApprovalPolicyOptions configures LoadApprovalPolicy. A nil
// *ApprovalPolicyOptions means the defaults.
type ApprovalPolicyOptions struct {
	// Log is the audit log's file (JSON lines, mode 0600), created when
	// missing. Empty means no audit log.
	Log string
	// LogMaxBytes is the size at which the log becomes Log + ".1" and a
	// new one is begun; the rows of the Log + ".1" it replaces are kept
	// up to a quarter of LogMaxBytes for each principal, less that
	// principal's rows in the rotated file, so that one principal's rows
	// never rotate another's away. Zero means 64 MiB.
	LogMaxBytes int64
	// Logger receives warnings (an audit line that could not be written,
	// a policy file that broke while in use). Nil discards them.
	Logger *slog.Logger
	// CreateOnWrite creates neither file, nor their folder, before
	// something is written to it: the log at its first decision, the
	// policy at its first remembered rule. Only for kernels that no
	// sandbox confines (a sandbox hides these files, and it can hide
	// only files that exist when it starts). Created, when set, is told
	// the log's path when its first decision creates it.
	CreateOnWrite bool
	Created       func(path string)
}

// LoadApprovalPolicy reads the policy file at path (a missing one is
// created, with a comment that shows the format) and opens the audit
// log. A malformed policy is an error that names the file
// and the line. An empty path means no rules, with the audit log alone.
func LoadApprovalPolicy(path string, opts *ApprovalPolicyOptions) (*ApprovalPolicy, error) {
	var o ApprovalPolicyOptions
	if opts != nil {
		o = *opts
	}
	p := &ApprovalPolicy{lg: o.Logger}
	if p.lg == nil {
		p.lg = slog.New(slog.DiscardHandler)
	}
	if path != "" {
		f, err := policy.Open(path)
		if err != nil {
			return nil, fmt.Errorf("ipybox: %w", err)
		}
		p.file = f
	}
	if o.Log != "" {
		open := policy.OpenLog
		if o.CreateOnWrite {
			open = func(path string, max int64) (*policy.Log, error) { return policy.OpenLogOnWrite(path, max, o.Created) }
		}
		l, err := open(o.Log, o.LogMaxBytes)
		if err != nil {
			return nil, fmt.Errorf("ipybox: %w", err)
		}
		p.log = l
	}
	// Every file exists before a sandbox starts, so that it can be hidden
	// there (a sandbox masks only what exists).
	for i, f := range p.paths() {
		if o.CreateOnWrite {
			break
		}
		text := ""
		if i == 0 && p.file != nil {
			text = policyHeader
		}
		if err := createIfMissing(f, text); err != nil {
			p.Close()
			return nil, fmt.Errorf("ipybox: approval policy: %w", err)
		}
	}
	hostOnly.add(p.paths()...)
	return p, nil
}

// policyHeader starts a policy file that ipybox creates.
const policyHeader = `# ipybox approval policy: allow, ask and deny rules, one per line
# (docs/approvals.md). Deny comes first, then ask, then allow; what no rule
# matches gets the mode's default. For example:
#   allow tool github.search_*
#   deny  tool fs.write_file path=/etc/*
#   allow shell git status
#   ask   shell git push *
`

// createIfMissing creates f (mode 0600, its folder 0700) with text, when
// it does not exist.
func createIfMissing(f, text string) error {
	if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
		return err
	}
	fd, err := os.OpenFile(f, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = fd.WriteString(text)
	return errors.Join(err, fd.Close())
}

// DefaultApprovalPolicyFile is where the CLI keeps its policy:
// <config dir>/ipybox/approvals.policy (os.UserConfigDir).
func DefaultApprovalPolicyFile() (string, error) { return configFile("approvals.policy") }

// DefaultApprovalLogFile is where the CLI keeps its audit log:
// <config dir>/ipybox/approvals.jsonl.
func DefaultApprovalLogFile() (string, error) { return configFile("approvals.jsonl") }

func configFile(name string) (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("ipybox: no folder for the approval policy: %w (set $XDG_CONFIG_HOME or $HOME)", err)
	}
	return filepath.Join(dir, "ipybox", name), nil
}

// File returns the policy file's path ("" for none).
func (p *ApprovalPolicy) File() string {
	if p == nil || p.file == nil {
		return ""
	}
	return p.file.Path()
}

// logFile returns the audit log's path ("" for none).
func (p *ApprovalPolicy) logFile() string {
	if p == nil || p.log == nil {
		return ""
	}
	return p.log.Path()
}

// Close closes the audit log. It is idempotent.
func (p *ApprovalPolicy) Close() error {
	p.closeOnce.Do(func() {
		hostOnly.remove(p.paths()...)
		if p.log != nil {
			p.closeErr = p.log.Close()
		}
	})
	return p.closeErr
}

// paths are the files kernel code must never write (nor read): the
// policy, its lock, and the log with its rotated copy.
func (p *ApprovalPolicy) paths() []string {
	var out []string
	if f := p.File(); f != "" {
		out = append(out, f, filepath.Join(filepath.Dir(f), "."+filepath.Base(f)+".lock"))
	}
	if l := p.logFile(); l != "" {
		out = append(out, l, l+".1")
	}
	return out
}

// rules returns the file's rules now. A file that broke since it was
// loaded gives an error: every call is then asked about.
func (p *ApprovalPolicy) rules() (*policy.Rules, error) {
	if p == nil || p.file == nil {
		return nil, nil
	}
	return p.file.Rules()
}

func (p *ApprovalPolicy) hasShellRules() bool {
	rs, err := p.rules()
	return err == nil && rs.HasShell()
}

// hostOnly is every approval policy and log that this process has open:
// every sandbox hides them (newWorkspaceSandbox).
var hostOnly hostOnlySet

type hostOnlySet struct {
	mu    sync.Mutex
	count map[string]int // path -> how many open policies name it
}

func (s *hostOnlySet) add(ps ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.count == nil {
		s.count = map[string]int{}
	}
	for _, p := range ps {
		s.count[p]++
	}
}

func (s *hostOnlySet) remove(ps ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range ps {
		if s.count[p]--; s.count[p] <= 0 {
			delete(s.count, p)
		}
	}
}

func (s *hostOnlySet) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.count))
}

// checkPolicyOutside refuses an approval policy or log that lies at or
// below a place kernel code can write (the workspace, a sandbox's
// allowWrite paths, a container's binds): code could rewrite its rules,
// or move the folder away and plant its own.
//
// exempt, when set, is a folder whose files pass: without a sandbox,
// kernel code can write wherever the user can, so the check only catches
// a policy put in the workspace by mistake, and the user's config folder,
// where ipybox keeps the policy by default, passes also when the
// workspace holds it (the home folder as the workspace).
func checkPolicyOutside(p *ApprovalPolicy, writable []string, exempt string) error {
	if p == nil {
		return nil
	}
	for _, f := range p.paths() {
		if exempt != "" && insideAny(f, []string{exempt}) != "" {
			continue
		}
		if w := insideAny(filepath.Dir(f), writable); w != "" {
			return fmt.Errorf("ipybox: the approval policy or log %s is inside %s, which kernel code can write: it could rewrite the rules or the log; "+
				"keep them outside the workspace and the sandbox's writable folders (the default is %s)", f, w, defaultPolicyDir())
		}
	}
	return nil
}

func defaultPolicyDir() string {
	if f, err := DefaultApprovalPolicyFile(); err == nil {
		return filepath.Dir(f)
	}
	return "the user's config folder"
}

// insideAny returns the first of places that dir is at or below, after
// links are resolved as far as the paths exist, or "".
func insideAny(dir string, places []string) string {
	d := policy.RealPath(dir)
	for _, w := range places {
		if w == "" {
			continue
		}
		if strings.HasPrefix(w, "~") {
			if home, err := os.UserHomeDir(); err == nil {
				w = filepath.Join(home, strings.TrimPrefix(w, "~"))
			}
		}
		if !filepath.IsAbs(w) {
			continue // relative allowWrite paths are the workspace's, checked as such
		}
		rw := policy.RealPath(w)
		if d == rw || strings.HasPrefix(d, rw+string(filepath.Separator)) {
			return w
		}
	}
	return ""
}

// Remember says how long an answer to an ApprovalRequest counts.
type Remember string

// The spans of Answer.Remember.
const (
	// RememberOnce answers this call alone.
	RememberOnce Remember = "once"
	// RememberSession answers every call that the remembered rules match,
	// until the Executor is closed.
	RememberSession Remember = "session"
	// RememberAlways writes the rules into the policy file, for every
	// session that uses it, until they are removed.
	RememberAlways Remember = "always"
)

// Deciders of Answer.By, as the audit log records them.
const (
	byPerson      = "person"      // someone was asked and answered
	byApplication = "application" // the program embedding ipybox decided
	byDefault     = "default"     // a mode's default, nobody was asked
)

// Answer is a decision on an ApprovalRequest, with how long it counts.
type Answer struct {
	// Accept lets the call run; false refuses it.
	Accept bool
	// Reason is a refusal's reason, which kernel code sees. Empty means
	// "rejected by the application".
	Reason string
	// Remember says how long the answer counts: "" or RememberOnce, for
	// this call; RememberSession; RememberAlways.
	Remember Remember
	// Rules are the remembered rules' match parts ("tool github.search_*",
	// "shell git log *"), to widen the answer beyond this call; they must
	// match it. Nil means NarrowRules(): the same server, tool and
	// arguments, or the same command.
	Rules []string
	// By, Channel and Person say who decided, for the audit log: By is
	// "person" (someone was asked and answered), "application" (the
	// program embedding ipybox decided; the value when empty) or "default"
	// (a mode's default: nobody was asked); Channel how they
	// were reached ("terminal prompt", "MCP elicitation"); Person who
	// they are, when known (a user name, an MCP client's name).
	By, Channel, Person string
}

// ErrCannotRemember is returned (wrapped, with the reason) by Answer and
// CanRemember for an answer that cannot be remembered as asked.
var ErrCannotRemember = errors.New("ipybox: this answer cannot be remembered")

// NarrowRules returns the match parts of the rules that remembering this
// request writes by default: as narrow as the call (its server, tool and
// exact arguments; or each command of a shell list, word for word). It
// fails for a call that no rule can name exactly, such as a command with
// $(...).
func (r *ApprovalRequest) NarrowRules() ([]string, error) {
	ms, err := policy.Narrow(r.call())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCannotRemember, err)
	}
	return ms, nil
}

// CanRemember reports whether an answer (accept or refuse) can be
// remembered for how long: nil, or an error wrapping ErrCannotRemember
// that says why not.
func (r *ApprovalRequest) CanRemember(accept bool, how Remember) error {
	switch how {
	case "", RememberOnce:
		return nil
	case RememberSession, RememberAlways:
	default:
		return fmt.Errorf("%w: Remember %q: want once, session or always", ErrCannotRemember, how)
	}
	if r.exec == nil {
		return fmt.Errorf("%w: the request was not made by an Executor", ErrCannotRemember)
	}
	if how == RememberAlways && r.exec.opts.ApprovalPolicy.File() == "" {
		return fmt.Errorf("%w: there is no approval policy file to write it in (Options.ApprovalPolicy)", ErrCannotRemember)
	}
	if accept && r.askRule {
		return fmt.Errorf("%w: an ask rule asks about this call (%s), and ask comes before allow; remove that rule to stop being asked", ErrCannotRemember, r.Why)
	}
	_, err := r.NarrowRules()
	return err
}

// Answer decides the request: accept or refuse, once or remembered. A
// remembered answer adds rules (Rules, or as narrow as the call) for the
// session or, always, to the policy file; they must match this call. If
// they cannot be remembered, Answer returns the error and decides
// nothing, so that the caller can answer again, once. Only the first
// decision counts; a later one returns ErrNotPending.
func (r *ApprovalRequest) Answer(a Answer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.decision == nil || r.decided {
		return ErrNotPending
	}
	var remembered []string
	if a.Remember != "" && a.Remember != RememberOnce {
		if err := r.CanRemember(a.Accept, a.Remember); err != nil {
			return err
		}
		ms := a.Rules
		if ms == nil {
			var err error
			if ms, err = r.NarrowRules(); err != nil {
				return err
			}
		}
		action := policy.Deny
		if a.Accept {
			action = policy.Allow
		}
		c := r.call()
		if !r.exec.opts.Tenant {
			c.Principal = "" // rules for every caller
		}
		rules, err := policy.Cover(c, action, ms)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrCannotRemember, err)
		}
		if err := r.exec.remember(a, rules); err != nil {
			return err
		}
		for _, rl := range rules {
			remembered = append(remembered, rl.String())
		}
	}
	if a.By == "" {
		a.By = byApplication
	}
	r.answer, r.remembered, r.decided = a, remembered, true
	var err error
	if !a.Accept {
		reason := a.Reason
		if reason == "" {
			reason = "rejected by the application"
		}
		err = &toolserver.RejectedError{Reason: reason}
	}
	r.decision <- err // bound: buffered, and sent once (decided)
	return nil
}

// call is the request as the policy sees it.
func (r *ApprovalRequest) call() *policy.Call {
	principal := ""
	if r.exec != nil {
		principal = r.exec.opts.Principal
	}
	if r.Kind == kindShell {
		return &policy.Call{Kind: policy.KindShell, Command: r.Command, Principal: principal}
	}
	return &policy.Call{Kind: policy.KindTool, Server: r.Server, Tool: r.Tool, Args: r.Args, Principal: principal}
}

// remember keeps rules as a answered them: for the session, or in the
// policy file.
func (e *Executor) remember(a Answer, rules []*policy.Rule) error {
	switch a.Remember {
	case RememberSession:
		e.sessMu.Lock()
		e.sessRules = e.sessRules.With(rules...)
		e.sessMu.Unlock()
		return nil
	case RememberAlways:
		lines := make([]string, len(rules))
		for i, rl := range rules {
			lines[i] = rl.String()
		}
		who := a.By
		if who == "" {
			who = byApplication
		}
		if a.Channel != "" {
			who += " through " + a.Channel
		}
		if a.Person != "" {
			who += " (" + a.Person + ")"
		}
		comment := fmt.Sprintf("%s by %s, session %s", time.Now().UTC().Format(time.RFC3339), who, e.session)
		if e.opts.Principal != "" {
			comment += ", principal " + e.opts.Principal
		}
		if _, err := e.opts.ApprovalPolicy.file.Append(comment, lines...); err != nil {
			return fmt.Errorf("ipybox: remember the answer: %w", err)
		}
	}
	return nil
}

// newSessionID returns a random session name for the audit log.
func newSessionID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// approve decides a request of kernel code, in the approval's span.
func (e *Executor) approve(ctx context.Context, r *ApprovalRequest) error {
	return e.traceApproval(ctx, r, e.decide)
}

// decide decides a request of kernel code: the policy first, then, when
// it leaves the call to them, the application.
func (e *Executor) decide(ctx context.Context, r *ApprovalRequest) error {
	r.exec = e
	p := e.opts.ApprovalPolicy
	e.sessMu.Lock()
	sess := e.sessRules
	e.sessMu.Unlock()
	if p == nil && sess == nil {
		err, _ := e.ask(ctx, r)
		return err
	}
	start := time.Now()
	rules, ferr := p.rules()
	var d policy.Decision
	if ferr != nil {
		// The file broke while in use: none of its rules can be trusted,
		// so every call is asked about, saying why.
		p.lg.Warn("the approval policy is malformed; asking about every call until it is fixed", "err", ferr)
		d = policy.Decide(r.call(), sess)
		if d.Action != policy.Deny {
			d = policy.Decision{Action: policy.Ask, Note: ferr.Error()}
		}
	} else {
		d = policy.Decide(r.call(), rules, sess)
	}
	entry := &policy.Entry{}
	if len(d.Rules) > 0 {
		entry.Rule = policy.Ref(d.Rules[0])
		entry.By = "rule"
		if d.Rules[0].File == "" {
			entry.By = "session"
		}
	}
	switch d.Action {
	case policy.Deny:
		e.audit(entry, r, "deny", start)
		return &toolserver.RejectedError{Reason: "approval policy: " + d.Why()}
	case policy.Allow:
		e.audit(entry, r, "allow", start)
		return nil
	case policy.Ask:
		r.askRule = true
		r.Why = d.Why()
		if len(d.Rules) == 0 {
			r.Why = "the approval policy is malformed, so every call is asked about: " + d.Note
		}
	default:
		if !e.approvalOn(r.Kind) {
			entry.By, entry.Channel = byDefault, e.offSwitch(r.Kind)
			e.audit(entry, r, "allow", start)
			return nil
		}
		if p != nil {
			r.Why = d.Why()
		}
	}
	entry.Rule, entry.By = nil, ""
	entry.Asked = r.Why
	err, answered := e.ask(ctx, r)
	switch {
	case answered:
		r.mu.Lock()
		a := r.answer
		entry.Remembered = r.remembered
		r.mu.Unlock()
		entry.By, entry.Channel, entry.Person = a.By, a.Channel, a.Person
		if len(entry.Remembered) > 0 {
			entry.Remember = string(a.Remember)
		}
		if !a.Accept {
			entry.Reason = a.Reason
		}
	default:
		entry.By = "nobody"
	}
	decision := "allow"
	var rej *toolserver.RejectedError
	switch {
	case err == nil:
	case errors.Is(err, toolserver.ErrApprovalTimeout):
		decision = "timeout"
	case answered && errors.As(err, &rej):
		decision = "deny"
	default:
		decision = "abandoned"
		if errors.As(err, &rej) {
			entry.Reason = rej.Reason
		}
	}
	e.audit(entry, r, decision, start)
	return err
}

// approvalOn reports whether calls of kind that no rule decides are
// asked about (Options.NoToolApproval, Options.ApproveShellCommands).
func (e *Executor) approvalOn(kind string) bool {
	if kind == kindShell {
		return e.opts.ApproveShellCommands
	}
	return !e.opts.NoToolApproval
}

func (e *Executor) offSwitch(kind string) string {
	if kind == kindShell {
		return "shell approval off (shell commands run unless a rule says otherwise)"
	}
	return "tool approval off (tool calls run unless a rule says otherwise)"
}

// audit appends the decision on r to the audit log, if there is one.
func (e *Executor) audit(entry *policy.Entry, r *ApprovalRequest, decision string, start time.Time) {
	r.verdict = verdict{decision: decision, by: entry.By}
	if entry.Rule != nil {
		r.verdict.rule = entry.Rule.ID
	}
	p := e.opts.ApprovalPolicy
	if p == nil || p.log == nil {
		return
	}
	entry.Time = start.UTC()
	entry.Session = e.session
	entry.Principal = e.opts.Principal
	entry.Kind = string(r.Kind)
	entry.Decision = decision
	entry.WaitedMS = float64(time.Since(start).Microseconds()) / 1000
	var fields []string
	if rs, err := p.rules(); err == nil {
		fields = rs.Redact()
	}
	scrub := e.mcp.Redact
	if r.Kind == kindShell {
		entry.Command = policy.RedactCommand(r.Command, scrub)
	} else {
		entry.Server, entry.Tool = r.Server, r.Tool
		entry.Args, entry.ArgsNote = policy.RedactArgs(r.Args, fields, scrub)
	}
	entry.Reason = scrub(entry.Reason)
	if err := p.log.Write(entry); err != nil {
		p.lg.Warn("could not write the approval audit log", "path", p.log.Path(), "err", err)
	}
}

// RuleAsks reports whether an ask rule of the policy asked about the
// call: a mode that lets calls run by default (`--approval auto`) must
// still ask a person then, or refuse.
func (r *ApprovalRequest) RuleAsks() bool { return r.askRule }

// Facts returns what a person deciding on r is shown after the call
// itself, one line each: why it is asked, and the rules that remembering
// the answer would write (or why it can be answered only once). Kernel
// code chose parts of them: they are escaped. Nil without an approval
// policy. The terminal prompt and the MCP elicitation show these lines.
func (r *ApprovalRequest) Facts() []string {
	if r.Why == "" {
		return nil
	}
	rules, err := policy.Narrow(r.call())
	cannot := ""
	switch {
	case err != nil:
		cannot = err.Error()
	case r.exec == nil:
		cannot = "the request was not made by an Executor"
	}
	return approvaltext.Facts(r.Why, rules, cannot)
}
