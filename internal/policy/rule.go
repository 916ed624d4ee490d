package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// Action is what a rule, or a decision, says about a call.
type Action int

// The actions, weakest first. A decision takes the strongest action of the
// rules that match: deny, then ask, then allow.
const (
	None  Action = iota // no rule matched: the mode's default applies
	Allow               // run it without asking
	Ask                 // ask a person, whatever the mode's default
	Deny                // refuse it without asking
)

func (a Action) String() string {
	switch a {
	case Allow:
		return "allow"
	case Ask:
		return "ask"
	case Deny:
		return "deny"
	}
	return "none"
}

// The kinds of call a rule matches.
const (
	KindTool  = "tool"
	KindShell = "shell"
)

// Rule is one allow, ask or deny line of a policy.
type Rule struct {
	Action Action
	Kind   string // KindTool or KindShell
	// Match is what the rule matches, as written after the action:
	// "tool github.search_* repo=ipybox/*" or "shell git status".
	Match string
	// File and Line say where the rule is written; File is empty for an
	// answer remembered for a session.
	File string
	Line int
	// ID names the rule for `ipybox approvals revoke`: the first 8 hex
	// digits of the SHA-256 of String(), so that it does not change when
	// other lines are added or removed.
	ID string
	// Principal, when set, limits the rule to the calls of that
	// principal (Call.Principal): an answer that one principal of
	// `ipybox mcp` remembered is written "allow principal=NAME tool ...",
	// and applies to that principal's sessions alone. Empty means every
	// caller.
	Principal string

	// A tool rule: globs on the server and the tool, conditions on
	// arguments, or the exact arguments.
	server, tool string
	conds        []cond
	exact        any // decoded arguments (UseNumber), when hasExact
	hasExact     bool

	// A shell rule: one simple command's words; rest is set when the last
	// pattern word is a lone unquoted *, which matches any further words.
	words []shellWord
	rest  bool
}

// String is the rule as written: "allow tool github.search_*", or
// "allow principal=alice tool github.search_*".
func (r *Rule) String() string {
	if r.Principal != "" {
		return r.Action.String() + " principal=" + r.Principal + " " + r.Match
	}
	return r.Action.String() + " " + r.Match
}

// appliesTo reports whether r applies to c's caller.
func (r *Rule) appliesTo(c *Call) bool { return r.Principal == "" || r.Principal == c.Principal }

// principalPrefix starts a rule's principal qualifier.
const principalPrefix = "principal="

// cutPrincipal reads an optional principal=NAME before a rule's match.
func cutPrincipal(rest string) (principal, match string, err error) {
	if !strings.HasPrefix(rest, principalPrefix) {
		return "", rest, nil
	}
	word, match := cutSpace(rest)
	name := strings.TrimPrefix(word, principalPrefix)
	if !ValidPrincipal(name) {
		return "", "", fmt.Errorf("%q: a principal's name is 1 to 64 letters, digits, '.', '_' or '-'", word)
	}
	return name, match, nil
}

// ValidPrincipal reports whether name can name a principal in a rule.
func ValidPrincipal(name string) bool {
	return name != "" && len(name) <= 64 && strings.TrimLeft(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == ""
}

// Where is "FILE:LINE" for a rule of a file, "this session" for an answer
// remembered for the session.
func (r *Rule) Where() string {
	if r.File == "" {
		return "this session"
	}
	return fmt.Sprintf("%s:%d", r.File, r.Line)
}

// cond is one condition on an argument: KEY=GLOB or KEY=LO..HI.
type cond struct {
	key     string
	glob    string // when !isRange
	isRange bool
	lo, hi  *decimal // nil: unbounded
}

// ruleID is the ID of a rule, from its String().
func ruleID(rule string) string {
	sum := sha256.Sum256([]byte(rule))
	return hex.EncodeToString(sum[:4])
}

// ParseError is a malformed policy: the file, the line and what is wrong.
type ParseError struct {
	File string
	Line int
	Msg  string
}

func (e *ParseError) Error() string {
	if e.File == "" {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
}

// parseLine parses one line: a rule, a redact directive, or nothing (a
// blank line or a comment).
func parseLine(text string) (r *Rule, redact []string, err error) {
	line := strings.TrimSpace(text)
	if line == "" || line[0] == '#' {
		return nil, nil, nil
	}
	if !isPrintable(line) {
		return nil, nil, errors.New("the line holds a control or bidirectional formatting character; write it with a JSON escape inside double quotes")
	}
	word, rest := cutSpace(line)
	switch word {
	case "redact":
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, nil, errors.New(`"redact" needs argument names (globs) whose values the audit log leaves out, e.g. redact password *token*`)
		}
		for _, f := range fields {
			if !checkGlob(f) {
				return nil, nil, fmt.Errorf("redact %q: malformed [...] class", f)
			}
		}
		return nil, fields, nil
	case "allow", "ask", "deny":
	default:
		return nil, nil, fmt.Errorf("%q: a line starts with allow, ask, deny or redact (or # for a comment)", word)
	}
	principal, rest, err := cutPrincipal(rest)
	if err != nil {
		return nil, nil, err
	}
	r, err = ParseMatch(rest)
	if err != nil {
		return nil, nil, err
	}
	r.Principal = principal
	r.Action = map[string]Action{"allow": Allow, "ask": Ask, "deny": Deny}[word]
	r.ID = ruleID(r.String())
	return r, nil, nil
}

// ParseMatch parses the match part of a rule (what follows its action):
// "tool SERVER.TOOL [KEY=PATTERN ...]", "tool SERVER.TOOL args=JSON" or
// "shell WORDS". The rule's Action is unset.
func ParseMatch(match string) (*Rule, error) {
	match = strings.TrimSpace(match)
	kind, rest := cutSpace(match)
	r := &Rule{Kind: kind, Match: match}
	switch kind {
	case KindTool:
		if err := r.parseTool(rest); err != nil {
			return nil, err
		}
	case KindShell:
		if err := r.parseShell(rest); err != nil {
			return nil, err
		}
	case "":
		return nil, errors.New("the rule says nothing to match: want tool SERVER.TOOL [ARGS] or shell COMMAND [ARGS]")
	default:
		return nil, fmt.Errorf("%q: a rule matches a tool or a shell command (allow tool ..., allow shell ...)", kind)
	}
	return r, nil
}

func cutSpace(s string) (string, string) {
	i := strings.IndexFunc(s, unicode.IsSpace)
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimSpace(s[i:])
}

// isPrintable reports whether s has no control characters and no
// bidirectional formatting characters, which would make the file read
// differently from what it says.
func isPrintable(s string) bool {
	for _, r := range s {
		if r == '\t' {
			continue
		}
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == '\u2028' || r == '\u2029' || r == '\ufeff' {
			return false
		}
	}
	return true
}

// seg is part of a token: text as written, or the value of a
// double-quoted JSON string (quoted: its metacharacters are literal).
type seg struct {
	text   string
	quoted bool
}

type token []seg

// glob is the token as a pattern: quoted parts escaped.
func (t token) glob() string {
	var b strings.Builder
	for _, s := range t {
		if s.quoted {
			b.WriteString(globQuote(s.text))
		} else {
			b.WriteString(s.text)
		}
	}
	return b.String()
}

// cut splits t at the first unquoted sep.
func (t token) cut(sep byte) (before, after token, ok bool) {
	for i, s := range t {
		if s.quoted {
			continue
		}
		if j := strings.IndexByte(s.text, sep); j >= 0 {
			before = append(append(token{}, t[:i]...), seg{text: s.text[:j]})
			after = append(token{{text: s.text[j+1:]}}, t[i+1:]...)
			return before.trim(), after.trim(), true
		}
	}
	return t, nil, false
}

func (t token) trim() token {
	out := t[:0:0]
	for _, s := range t {
		if s.text != "" || s.quoted {
			out = append(out, s)
		}
	}
	return out
}

func (t token) empty() bool { return len(t) == 0 }

// literal is the token's text, if no unquoted part has a metacharacter.
func (t token) literal() (string, bool) {
	var b strings.Builder
	for _, s := range t {
		if !s.quoted && hasGlob(s.text) {
			return "", false
		}
		text := s.text
		if !s.quoted {
			text = unescapeGlob(text)
		}
		b.WriteString(text)
	}
	return b.String(), true
}

func unescapeGlob(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// tokens splits s at white space outside double quotes. A token that
// starts with "args=" takes the rest of the line, returned as exact.
func tokens(s string) (toks []token, exact string, err error) {
	i := 0
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i == len(s) {
			return toks, exact, nil
		}
		if strings.HasPrefix(s[i:], "args=") {
			return toks, strings.TrimSpace(s[i+len("args="):]), nil
		}
		var t token
		for i < len(s) && s[i] != ' ' && s[i] != '\t' {
			if s[i] == '"' {
				end, ok := jsonStringEnd(s[i:])
				if !ok {
					return nil, "", fmt.Errorf("unterminated quoted string %s", s[i:])
				}
				var v string
				if err := json.Unmarshal([]byte(s[i:i+end]), &v); err != nil {
					return nil, "", fmt.Errorf("quoted string %s: %v", s[i:i+end], err)
				}
				t = append(t, seg{text: v, quoted: true})
				i += end
				continue
			}
			j := i
			for j < len(s) && s[j] != ' ' && s[j] != '\t' && s[j] != '"' {
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				j++
			}
			t = append(t, seg{text: s[i:j]})
			i = j
		}
		toks = append(toks, t)
	}
}

// jsonStringEnd returns the length of the JSON string at the start of s.
func jsonStringEnd(s string) (int, bool) {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i + 1, true
		}
	}
	return 0, false
}

func (r *Rule) parseTool(s string) error {
	toks, exact, err := tokens(s)
	if err != nil {
		return err
	}
	if len(toks) == 0 {
		return errors.New(`a tool rule names SERVER.TOOL (globs allowed: github.*, *.read_*)`)
	}
	srv, tool, ok := toks[0].cut('.')
	if !ok || srv.empty() || tool.empty() {
		return fmt.Errorf("%q: want SERVER.TOOL (globs allowed: github.*, *.read_*)", toks[0].glob())
	}
	r.server, r.tool = srv.glob(), tool.glob()
	for _, g := range []string{r.server, r.tool} {
		if !checkGlob(g) {
			return fmt.Errorf("%q: malformed [...] class", g)
		}
	}
	for _, t := range toks[1:] {
		k, v, ok := t.cut('=')
		if !ok || k.empty() {
			return fmt.Errorf("%q: want ARGUMENT=PATTERN (a glob, or a range such as 0..100), or args={...} for the exact arguments", t.glob())
		}
		key, ok := k.literal()
		if !ok {
			return fmt.Errorf("argument name %q: no globs in a name", k.glob())
		}
		c := cond{key: key}
		if lo, hi, isRange, err := parseRange(v); err != nil {
			return fmt.Errorf("%s=%s: %v", key, v.glob(), err)
		} else if isRange {
			c.isRange, c.lo, c.hi = true, lo, hi
		} else {
			c.glob = v.glob()
			if !checkGlob(c.glob) {
				return fmt.Errorf("%s=%s: malformed [...] class", key, c.glob)
			}
		}
		r.conds = append(r.conds, c)
	}
	if exact != "" {
		if len(r.conds) > 0 {
			return errors.New("args={...} names the exact arguments: it goes without KEY=PATTERN conditions")
		}
		v, ok := decodeArgs([]byte(exact))
		if !ok {
			return fmt.Errorf("args=%s: want one JSON object, without repeated keys", exact)
		}
		if _, isObj := v.(map[string]any); !isObj {
			return fmt.Errorf("args=%s: want a JSON object", exact)
		}
		r.exact, r.hasExact = v, true
	}
	return nil
}

// parseRange reads LO..HI (either may be missing, not both) from an
// unquoted token.
func parseRange(t token) (lo, hi *decimal, ok bool, err error) {
	if len(t) != 1 || t[0].quoted {
		return nil, nil, false, nil
	}
	a, b, found := strings.Cut(t[0].text, "..")
	if !found || a == "" && b == "" {
		return nil, nil, false, nil
	}
	num := func(s string) (*decimal, error) {
		if s == "" {
			return nil, nil
		}
		d, ok := parseDecimal(s)
		if !ok {
			return nil, fmt.Errorf("%q is not a number (write a range as 0..100, ..100 or 10..; quote a string that holds \"..\")", s)
		}
		return &d, nil
	}
	if lo, err = num(a); err != nil {
		return nil, nil, false, err
	}
	if hi, err = num(b); err != nil {
		return nil, nil, false, err
	}
	if lo != nil && hi != nil && cmpDecimal(*lo, *hi) > 0 {
		return nil, nil, false, fmt.Errorf("the range %s is empty", t[0].text)
	}
	return lo, hi, true, nil
}

// decodeArgs decodes JSON with numbers kept as text, and refuses repeated
// keys at any depth: Go keeps the last of them and other decoders the
// first, so a call whose arguments say two things is not the call a rule
// was written for.
func decodeArgs(raw []byte) (any, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, ok := decodeValue(dec, 0)
	if !ok {
		return nil, false
	}
	if _, err := dec.Token(); err == nil {
		return nil, false // trailing data
	}
	return v, true
}

func decodeValue(dec *json.Decoder, depth int) (any, bool) {
	if depth > 1000 {
		return nil, false
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, false
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			m := map[string]any{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, false
				}
				k, _ := kt.(string)
				if _, dup := m[k]; dup {
					return nil, false
				}
				v, ok := decodeValue(dec, depth+1)
				if !ok {
					return nil, false
				}
				m[k] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, false
			}
			return m, true
		case '[':
			a := []any{}
			for dec.More() {
				v, ok := decodeValue(dec, depth+1)
				if !ok {
					return nil, false
				}
				a = append(a, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, false
			}
			return a, true
		}
		return nil, false
	default:
		return t, true
	}
}
