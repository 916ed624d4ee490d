package policy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"reflect"
	"strings"
	"unicode/utf8"
)

// Call is one tool call or shell command to decide on.
type Call struct {
	Kind    string // KindTool or KindShell
	Server  string
	Tool    string
	Args    []byte // the JSON object kernel code sent
	Command string // the shell command as it will run
	// Principal is who made the call (a principal of ipybox mcp); rules
	// with a principal apply only to its calls. Empty means none: only
	// rules without a principal apply.
	Principal string
}

// Rules is a parsed policy: its rules in file order and its redact
// globs. It is immutable.
type Rules struct {
	rules  []*Rule
	redact []string
	shell  bool
}

// Parse reads a policy. file names it in errors (and in the rules'
// Where); a malformed line fails the whole policy with its line number.
func Parse(file string, data []byte) (*Rules, error) {
	rs := &Rules{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		n++
		text := sc.Text()
		if n == 1 {
			text = strings.TrimPrefix(text, "\ufeff")
		}
		r, redact, err := parseLine(text)
		if err != nil {
			return nil, &ParseError{File: file, Line: n, Msg: err.Error()}
		}
		rs.redact = append(rs.redact, redact...)
		if r != nil {
			r.File, r.Line = file, n
			rs.add(r)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, &ParseError{File: file, Line: n + 1, Msg: err.Error()}
	}
	return rs, nil
}

func (rs *Rules) add(r *Rule) {
	rs.rules = append(rs.rules, r)
	rs.shell = rs.shell || r.Kind == KindShell
}

// All returns the rules in order.
func (rs *Rules) All() []*Rule {
	if rs == nil {
		return nil
	}
	return rs.rules
}

// Redact returns the globs of argument names whose values the audit log
// leaves out.
func (rs *Rules) Redact() []string {
	if rs == nil {
		return nil
	}
	return rs.redact
}

// HasShell reports whether a rule is about shell commands.
func (rs *Rules) HasShell() bool { return rs != nil && rs.shell }

// With returns rs and the rules more, in a new set.
func (rs *Rules) With(more ...*Rule) *Rules {
	out := &Rules{}
	if rs != nil {
		out.rules = append(out.rules, rs.rules...)
		out.redact = rs.redact
		out.shell = rs.shell
	}
	for _, r := range more {
		out.add(r)
	}
	return out
}

// Decision is what a policy says about a call.
type Decision struct {
	Action Action
	// Rules are the rules that decided: one deny or ask rule, or the
	// allow rules of each command of a shell list. Nil for None.
	Rules []*Rule
	// Maybe is set when a deny or ask rule only may match: part of the
	// call is not known before it runs, or could not be read; Note says
	// which.
	Maybe bool
	Note  string
	// NoAllow says why no allow rule could apply to the call (a shell
	// command with $(...), arguments with repeated keys); empty when
	// allow rules were tried.
	NoAllow string
}

// Why says in one line why the decision is what it is.
func (d Decision) Why() string {
	var b strings.Builder
	switch d.Action {
	case None:
		b.WriteString("no rule matched")
		if d.NoAllow != "" {
			b.WriteString(" (allow rules cannot apply: " + d.NoAllow + ")")
		}
		return b.String()
	case Allow:
		b.WriteString("allowed by ")
	case Ask:
		b.WriteString("asked by ")
	case Deny:
		b.WriteString("denied by ")
	}
	for i, r := range d.Rules {
		if i > 0 {
			b.WriteString(" and ")
		}
		fmt.Fprintf(&b, "rule %s (%s) at %s", r.ID, r, r.Where())
	}
	if d.Maybe {
		b.WriteString(", which may match: " + d.Note)
	}
	return b.String()
}

// prepared is a call with what matching needs, computed at most once.
type prepared struct {
	c        *Call
	argsDone bool
	args     map[string]any
	argsOK   bool
	sh       *shellCall
}

func (p *prepared) arguments() (map[string]any, bool) {
	if !p.argsDone {
		p.argsDone = true
		raw := p.c.Args
		if len(bytes.TrimSpace(raw)) == 0 {
			raw = []byte("{}")
		}
		if utf8.Valid(raw) {
			if v, ok := decodeArgs(raw); ok {
				p.args, p.argsOK = v.(map[string]any)
			}
		}
	}
	return p.args, p.argsOK
}

const argsUnreadable = "the arguments are not one JSON object of valid UTF-8 without repeated keys"

// Decide decides c against the rule sets: the strongest action of any
// matching rule wins (deny, then ask, then allow); None when no rule
// matches. Within an action, the first matching rule, in set order, is
// named.
func Decide(c *Call, sets ...*Rules) Decision {
	p := &prepared{c: c}
	if c.Kind == KindShell {
		p.sh = prepareShell(c.Command)
	}
	var ask Decision
	var allowTool *Rule
	var noAllow string // why an allow rule that might have matched did not
	for _, rs := range sets {
		if rs == nil {
			continue
		}
		for _, r := range rs.rules {
			if r.Kind != c.Kind || r.Action == Allow || r.Action == Ask && ask.Action == Ask || !r.appliesTo(c) {
				continue
			}
			m, note := r.match(p)
			if m == no {
				continue
			}
			d := Decision{Action: r.Action, Rules: []*Rule{r}, Maybe: m == maybe, Note: note}
			if r.Action == Deny {
				return d
			}
			ask = d
		}
	}
	if ask.Action == Ask {
		return ask
	}
	if c.Kind == KindShell {
		return decideShellAllow(p, sets)
	}
	for _, rs := range sets {
		if rs == nil {
			continue
		}
		for _, r := range rs.rules {
			if r.Kind == KindTool && r.Action == Allow && r.appliesTo(c) {
				m, why := r.match(p)
				if m == yes {
					allowTool = r
					break
				}
				if m == maybe && noAllow == "" {
					noAllow = why
				}
			}
		}
		if allowTool != nil {
			break
		}
	}
	if allowTool != nil {
		return Decision{Action: Allow, Rules: []*Rule{allowTool}}
	}
	d := Decision{NoAllow: noAllow}
	if _, ok := p.arguments(); !ok {
		d.NoAllow = argsUnreadable
	}
	return d
}

// decideShellAllow allows a plain shell program when every one of its
// simple commands is allowed by some allow rule.
func decideShellAllow(p *prepared, sets []*Rules) Decision {
	sh := p.sh
	if sh.notShell {
		return Decision{NoAllow: "shell rules do not apply to scripts of other programs"}
	}
	if !sh.plain {
		return Decision{NoAllow: sh.why}
	}
	var rules []*Rule
	for _, cmd := range sh.plains {
		var found *Rule
		for _, rs := range sets {
			if rs == nil {
				continue
			}
			for _, r := range rs.rules {
				if r.Kind == KindShell && r.Action == Allow && r.appliesTo(p.c) && r.matchCmd(cmd) == yes {
					found = r
					break
				}
			}
			if found != nil {
				break
			}
		}
		if found == nil {
			if len(sh.plains) == 1 {
				return Decision{}
			}
			// Say which command of the list no rule allows.
			words := make([]string, len(cmd.words))
			for i, w := range cmd.words {
				words[i] = w.text
			}
			text := strings.Join(words, " ")
			if r := []rune(text); len(r) > 80 {
				text = string(r[:80]) + "..."
			}
			return Decision{NoAllow: fmt.Sprintf("no allow rule matches %q, one of the commands of the list", text)}
		}
		if !containsRule(rules, found) {
			rules = append(rules, found)
		}
	}
	return Decision{Action: Allow, Rules: rules}
}

func containsRule(rs []*Rule, r *Rule) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

// match matches a tool or shell rule: yes, maybe (with why), or no. An
// allow rule applies only on yes.
func (r *Rule) match(p *prepared) (match, string) {
	if r.Kind == KindShell {
		sh := p.sh
		if sh.notShell {
			return no, ""
		}
		if !sh.readable {
			return maybe, sh.why
		}
		res := no
		for _, cmd := range sh.all {
			switch r.matchCmd(cmd) {
			case yes:
				return yes, ""
			case maybe:
				res = maybe
			}
		}
		if res == maybe {
			return maybe, "part of the command is known only when it runs"
		}
		return no, ""
	}
	c := p.c
	if !globMatch(r.server, c.Server) || !globMatch(r.tool, c.Tool) {
		return no, ""
	}
	if !r.hasExact && len(r.conds) == 0 {
		return yes, ""
	}
	args, ok := p.arguments()
	if !ok {
		return maybe, argsUnreadable
	}
	if r.hasExact {
		if reflect.DeepEqual(r.exact, any(args)) {
			return yes, ""
		}
		return no, ""
	}
	res, why := yes, ""
	for _, cd := range r.conds {
		v, ok := args[cd.key]
		if !ok {
			return no, ""
		}
		if arr, isArr := v.([]any); isArr && !cd.isRange && r.Action != Allow {
			// A list of paths (read_multiple_files' paths): a deny or
			// ask rule matches it when it matches one of its strings,
			// as well as by the list's JSON text.
			switch denyListMatch(&cd, arr) {
			case no:
				return no, ""
			case maybe:
				res, why = maybe, climbNote
			}
			continue
		}
		s, isStr := v.(string)
		if isStr && !cd.isRange && r.Action != Allow {
			// A deny or ask rule matches every spelling of a path
			// (paths.go).
			switch denyGlobMatch(cd.glob, s) {
			case no:
				return no, ""
			case maybe:
				res, why = maybe, climbNote
			}
			continue
		}
		if isStr && !cd.isRange && dotDot(s) && !strings.Contains(cd.glob, "..") {
			// A glob sees text, and /work/../etc is not in /work/*: such a
			// value is no allow rule's.
			if !cd.matches(v) && !globMatch(cd.glob, path.Clean(s)) {
				return no, ""
			}
			res, why = maybe, dotDotNote
			continue
		}
		if !cd.matches(v) {
			return no, ""
		}
	}
	return res, why
}

// denyListMatch matches a deny or ask rule's condition against a list:
// yes when its JSON text or one of its strings (in nested lists too)
// matches, maybe when one may.
func denyListMatch(cd *cond, arr []any) match {
	if cd.matches(arr) {
		return yes
	}
	res := no
	for _, e := range arr {
		var m match
		switch x := e.(type) {
		case string:
			m = denyGlobMatch(cd.glob, x)
		case []any:
			m = denyListMatch(cd, x)
		}
		if m == yes {
			return yes
		}
		if m == maybe {
			res = maybe
		}
	}
	return res
}

const dotDotNote = "an argument has a .. path segment, so no allow rule's glob holds for the path it names"

// dotDot reports whether s has a ".." path segment.
func dotDot(s string) bool {
	for _, seg := range strings.FieldsFunc(s, func(r rune) bool { return r == '/' || r == '\\' }) {
		if seg == ".." {
			return true
		}
	}
	return false
}

func (cd *cond) matches(v any) bool {
	if cd.isRange {
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		d, ok := parseDecimal(string(n))
		if !ok {
			return false
		}
		return (cd.lo == nil || cmpDecimal(d, *cd.lo) >= 0) && (cd.hi == nil || cmpDecimal(d, *cd.hi) <= 0)
	}
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case json.Number:
		s = string(x)
	case bool:
		s = fmt.Sprint(x)
	case nil:
		s = "null"
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return false
		}
		s = string(b)
	}
	return globMatch(cd.glob, s)
}
