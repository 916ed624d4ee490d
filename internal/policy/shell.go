package policy

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"mvdan.cc/sh/v3/syntax"
)

// Shell rules match the command that ipybox shows for approval, which is
// the text that runs (IPython's $var and {var} expansion has already
// happened). That text is parsed as the shell parses it, with
// mvdan.cc/sh, twice: as bash and as POSIX sh, because `!cmd` runs under
// $SHELL or /bin/sh (dash on Debian). An allow rule applies only when both
// readings agree that the command is a list of plain simple commands:
//
//   - commands joined by ;, newlines, &&, || or | (each command must be
//     allowed by some allow rule; a pipe's reader runs too);
//   - every word known before the command runs: plain text, 'single' or
//     "double" quotes without $, `, or \ escapes that matter; no $VAR,
//     $(...), `...`, $'...', $"...", <(...), arithmetic or {a,b} brace
//     expansion (which would change the words);
//   - no NAME=value before the command (LD_PRELOAD=x.so git status, or
//     GIT_SSH_COMMAND, changes what runs);
//   - no background job (&), negation (!), subshell, block, if, for,
//     while, case or function definition;
//   - redirections only to /dev/null, or duplications such as 2>&1;
//     no here-documents (their bodies expand $(...)).
//
// A deny or ask rule applies to every simple command found anywhere in the
// command, inside substitutions and compound commands too. A word whose
// value is not known (it holds $VAR or $(...)) may be anything, so a deny
// or ask rule whose words match up to it counts as matching; a command
// that cannot be parsed at all may match every deny and ask rule.

// shellWord is one word of a command, or of a rule's pattern.
type shellWord struct {
	// text is the word's value. For an expandable word it is a glob, with
	// the characters that were quoted escaped, so that "*".txt and *.txt
	// differ.
	text string
	// expandable: an unquoted *, ? or [...] (the shell replaces the word
	// with the names of matching files), or a leading unquoted ~.
	expandable bool
	// glob: an unquoted *, ? or [...].
	glob bool
	// opaque: the value is known only when the command runs.
	opaque bool
	// star: the word is a lone unquoted * (in a rule: any further words).
	star bool
}

// simpleCmd is one simple command: its words, the program first.
type simpleCmd struct {
	words []shellWord
}

// reading is the command as one shell dialect reads it.
type reading struct {
	parsed bool
	plain  bool
	why    string // why it is not plain
	shape  string // the plain program, to compare the dialects' readings
	plains []simpleCmd
	all    []simpleCmd // every simple command, anywhere
}

// shellCall is a shell command prepared for matching.
type shellCall struct {
	// notShell is set for a script magic that runs a program other than
	// a shell (%%python3, %%script perl): shell rules do not apply.
	notShell bool
	readable bool // at least one dialect parsed it
	plain    bool // both dialects parsed it, as the same plain program
	why      string
	plains   []simpleCmd
	all      []simpleCmd
}

// shells whose scripts are read as POSIX sh and bash.
var shells = []string{"sh", "bash", "dash"}

// otherShells are shells whose syntax differs: their scripts are never
// allowed by a rule, and every deny and ask rule may match them.
var otherShells = []string{"zsh", "ksh", "mksh", "fish", "csh", "tcsh", "ash", "busybox"}

func prepareShell(command string) *shellCall {
	body := command
	magicOpts := false
	if strings.HasPrefix(command, "%%") {
		// A script magic: "%%bash --out x\n<script>", or "%%script prog\n...".
		header, rest, _ := strings.Cut(command, "\n")
		f := strings.Fields(header[2:])
		if len(f) > 0 && f[0] == "script" {
			f = f[1:]
		}
		if len(f) == 0 {
			return &shellCall{notShell: true}
		}
		prog := path.Base(f[0])
		switch {
		case slices.Contains(shells, prog):
		case slices.Contains(otherShells, prog):
			return &shellCall{why: "the script runs under " + prog + ", which this policy does not read"}
		default:
			return &shellCall{notShell: true}
		}
		body, magicOpts = rest, len(f) > 1
	}
	sc := &shellCall{}
	var rs [2]reading
	for i, lang := range []syntax.LangVariant{syntax.LangBash, syntax.LangPOSIX} {
		rs[i] = read(body, lang)
		if rs[i].parsed {
			sc.readable = true
			sc.all = append(sc.all, rs[i].all...)
		}
	}
	switch {
	case !sc.readable:
		sc.why = "the command could not be parsed"
	case !rs[0].parsed || !rs[1].parsed:
		sc.why = "bash and POSIX sh read the command differently"
	case !rs[0].plain:
		sc.why = rs[0].why
	case !rs[1].plain:
		sc.why = rs[1].why
	case rs[0].shape != rs[1].shape:
		sc.why = "bash and POSIX sh read the command differently"
	case magicOpts:
		sc.why = "the script magic has options"
	case !utf8.ValidString(command):
		sc.why = "the command is not valid UTF-8"
	case len(rs[0].plains) == 0:
		sc.why = "the command runs nothing"
	default:
		sc.plain = true
		sc.plains = rs[0].plains
	}
	return sc
}

// read parses src in one dialect.
func read(src string, lang syntax.LangVariant) reading {
	f, err := syntax.NewParser(syntax.Variant(lang)).Parse(strings.NewReader(src), "")
	if err != nil {
		return reading{}
	}
	r := reading{parsed: true, plain: true}
	var shape strings.Builder
	for _, st := range f.Stmts {
		if !r.plainStmt(st, &shape) {
			r.plain = false
			break
		}
		shape.WriteString(";")
	}
	r.shape = shape.String()
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.CallExpr:
			if len(n.Args) > 0 {
				r.all = append(r.all, simpleCmd{words: convWords(n.Args)})
			}
		case *syntax.DeclClause:
			// export, declare, local, readonly, typeset: the variant is
			// the program; what it assigns is not read here.
			c := simpleCmd{words: []shellWord{{text: n.Variant.Value}}}
			for range n.Args {
				c.words = append(c.words, shellWord{opaque: true})
			}
			r.all = append(r.all, c)
		}
		return true
	})
	return r
}

func convWords(ws []*syntax.Word) []shellWord {
	out := make([]shellWord, len(ws))
	for i, w := range ws {
		out[i] = convWord(w)
	}
	return out
}

func (r *reading) notPlain(why string) bool {
	r.why = why
	return false
}

// plainStmt checks that st is a plain simple command, or plain commands
// joined by &&, || or |, and writes its shape.
func (r *reading) plainStmt(st *syntax.Stmt, shape *strings.Builder) bool {
	switch {
	case st.Negated:
		return r.notPlain("the command has a negation (!)")
	case st.Background:
		return r.notPlain("the command starts a background job (&)")
	case st.Coprocess:
		return r.notPlain("the command starts a coprocess")
	}
	for _, rd := range st.Redirs {
		if why := unsafeRedirect(rd); why != "" {
			return r.notPlain(why)
		}
		n := ""
		if rd.N != nil {
			n = rd.N.Value
		}
		fmt.Fprintf(shape, "<%s%s%q>", n, rd.Op, wordText(rd.Word))
	}
	switch c := st.Cmd.(type) {
	case nil:
		return r.notPlain("a redirection without a command")
	case *syntax.CallExpr:
		if len(c.Assigns) > 0 {
			return r.notPlain("the command sets variables (NAME=value) for the program, which can change what it runs")
		}
		ws := convWords(c.Args)
		for _, w := range ws {
			if w.opaque {
				return r.notPlain("a word is known only when the command runs ($VAR, $(...), `...`, $'...' or {a,b})")
			}
			fmt.Fprintf(shape, "%q%v ", w.text, w.expandable)
		}
		r.plains = append(r.plains, simpleCmd{words: ws})
		return true
	case *syntax.BinaryCmd:
		switch c.Op {
		case syntax.AndStmt, syntax.OrStmt, syntax.Pipe:
		default:
			return r.notPlain("the command joins commands with " + c.Op.String())
		}
		shape.WriteString("(")
		if !r.plainStmt(c.X, shape) {
			return false
		}
		shape.WriteString(" " + c.Op.String() + " ")
		if !r.plainStmt(c.Y, shape) {
			return false
		}
		shape.WriteString(")")
		return true
	}
	return r.notPlain("the command is a compound command (a subshell, a block, if, for, while, case, a test or a function)")
}

func wordText(w *syntax.Word) string {
	if w == nil {
		return ""
	}
	sw := convWord(w)
	if sw.opaque {
		return "\x00"
	}
	return sw.text
}

// unsafeRedirect says why a redirection could write or read a file, or ""
// for one that cannot: to or from /dev/null, or duplicating a descriptor.
func unsafeRedirect(rd *syntax.Redirect) string {
	if rd.N != nil && !isDigits(rd.N.Value) {
		return "the command redirects a named descriptor"
	}
	target := wordText(rd.Word)
	switch rd.Op {
	case syntax.RdrOut, syntax.AppOut, syntax.RdrIn, syntax.RdrAll, syntax.AppAll, syntax.RdrClob:
		if target == "/dev/null" {
			return ""
		}
		return "the command redirects to or from a file (only /dev/null is safe)"
	case syntax.DplOut, syntax.DplIn:
		if isDigits(target) || target == "-" {
			return ""
		}
		return "the command redirects to a file"
	case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
		return "the command has a here-document"
	}
	return "the command has a redirection other than to /dev/null or 2>&1"
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// convWord reads a word as the shell would before running it.
func convWord(w *syntax.Word) shellWord {
	var sw shellWord
	var b strings.Builder
	lit := func(c byte) {
		if c == '*' || c == '?' || c == '[' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	for i, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			s := p.Value
			for j := 0; j < len(s); j++ {
				c := s[j]
				switch {
				case c == '\\' && j+1 < len(s):
					j++
					lit(s[j])
				case c == '*' || c == '?':
					sw.glob, sw.expandable = true, true
					b.WriteByte(c)
				case c == '[' && closes(s[j+1:]):
					sw.glob, sw.expandable = true, true
					b.WriteByte(c)
				case c == '~' && i == 0 && j == 0:
					sw.expandable = true
					b.WriteByte(c)
				default:
					lit(c)
				}
			}
		case *syntax.SglQuoted:
			if p.Dollar {
				sw.opaque = true // $'...': bash unescapes it, dash does not
				continue
			}
			for j := 0; j < len(p.Value); j++ {
				lit(p.Value[j])
			}
		case *syntax.DblQuoted:
			if p.Dollar {
				sw.opaque = true // $"...": translated by locale
				continue
			}
			for _, in := range p.Parts {
				l, ok := in.(*syntax.Lit)
				if !ok {
					sw.opaque = true
					continue
				}
				s := l.Value
				for j := 0; j < len(s); j++ {
					c := s[j]
					if c == '\\' && j+1 < len(s) && strings.IndexByte("$`\"\\\n", s[j+1]) >= 0 {
						j++
						c = s[j]
					}
					lit(c)
				}
			}
		default:
			sw.opaque = true
		}
	}
	if !sw.opaque && braces(w) {
		sw.opaque = true // {a,b} makes several words in bash
	}
	if sw.opaque {
		return shellWord{opaque: true}
	}
	sw.text = b.String()
	if !sw.expandable {
		sw.text = unescapeGlob(sw.text)
	}
	sw.star = len(w.Parts) == 1 && sw.text == "*" && sw.glob
	return sw
}

// closes reports whether an unquoted [ is closed by a ] later in s: an
// unclosed one is a literal character ("[" the test command).
func closes(s string) bool {
	for j := 0; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case ']':
			return true
		}
	}
	return false
}

// braces reports whether bash would brace-expand w.
func braces(w *syntax.Word) bool {
	has := false
	for _, p := range w.Parts {
		if l, ok := p.(*syntax.Lit); ok && strings.Contains(l.Value, "{") {
			has = true
		}
	}
	if !has {
		return false
	}
	cp := &syntax.Word{Parts: slices.Clone(w.Parts)}
	return syntax.SplitBraces(cp)
}

// parseShell reads a shell rule's pattern: one simple command of literal
// words and globs, the last of which may be a lone * for any further
// words.
func (r *Rule) parseShell(pattern string) error {
	if pattern == "" {
		return errors.New("a shell rule names a command: allow shell git status, or shell git log * for any arguments")
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(pattern), "")
	if err != nil {
		return fmt.Errorf("shell pattern: %v", err)
	}
	bad := errors.New("a shell pattern is one simple command of words and globs (git log *), without ;, &&, |, redirections, $, ` or NAME=value")
	if len(f.Stmts) != 1 {
		return bad
	}
	st := f.Stmts[0]
	c, ok := st.Cmd.(*syntax.CallExpr)
	if !ok || st.Negated || st.Background || st.Coprocess || len(st.Redirs) > 0 || len(c.Assigns) > 0 || len(c.Args) == 0 {
		return bad
	}
	ws := convWords(c.Args)
	for i, w := range ws {
		if w.opaque {
			return fmt.Errorf("shell pattern word %d: $, `, $'...' and {a,b} have no meaning in a pattern: the rule matches the command as it will run", i+1)
		}
		if w.glob && !checkGlob(w.text) {
			return fmt.Errorf("shell pattern word %d: malformed [...] class", i+1)
		}
	}
	if last := ws[len(ws)-1]; last.star {
		r.rest = true
		ws = ws[:len(ws)-1]
	}
	r.words = ws
	return nil
}

// match is the outcome of matching a rule against a call.
type match int

const (
	no    match = iota
	yes         // it matches
	maybe       // it may match: part of the call is not known
)

// matchWord matches a rule's word against a command's. For a deny or ask
// rule, a word that is a path matches by any of its cleaned spellings too
// (paths.go); for an allow rule, a glob never matches a word with a ..
// segment that the glob does not have: cat /work/../etc/shadow is not in
// cat /work/*.
func matchWord(p, w shellWord, deny bool) bool {
	if p.glob {
		if w.expandable {
			return p.text == w.text
		}
		if globMatch(p.text, w.text) {
			return deny || !dotDot(w.text) || strings.Contains(p.text, "..")
		}
		if deny {
			for _, c := range pathForms(w.text) {
				if globMatch(p.text, c) {
					return true
				}
			}
		}
		return false
	}
	if p.expandable != w.expandable {
		return false
	}
	if p.text == w.text {
		return true
	}
	if deny && !w.expandable {
		pf := append(pathForms(p.text), p.text)
		for _, c := range append(pathForms(w.text), w.text) {
			for _, d := range pf {
				if c == d {
					return true
				}
			}
		}
	}
	return false
}

// matchCmd matches a shell rule against one simple command. A word known
// only at run time (maybe several words, or none) makes it a maybe when
// the words before it match.
func (r *Rule) matchCmd(c simpleCmd) match {
	for i, w := range c.words {
		if w.opaque {
			for j := 0; j < i && j < len(r.words); j++ {
				if !matchWord(r.words[j], c.words[j], r.Action != Allow) {
					return no
				}
			}
			if i > len(r.words) && !r.rest {
				return no // the words the rule names are all there, and more
			}
			return maybe
		}
	}
	if len(c.words) < len(r.words) || len(c.words) > len(r.words) && !r.rest {
		return no
	}
	res := yes
	for i, p := range r.words {
		if matchWord(p, c.words[i], r.Action != Allow) {
			continue
		}
		// A word the shell expands (a glob, a leading ~) names paths
		// that only the files decide: a deny or ask rule that some of
		// them would meet asks (globx.go).
		if r.Action != Allow && c.words[i].expandable && denyExpandable(p, c.words[i]) {
			res = maybe
			continue
		}
		return no
	}
	return res
}

// renderWord writes w as a pattern word that matches it alone (but for
// the files an expandable word names), or reports that it cannot be
// written on one line.
func renderWord(w shellWord) (string, bool) {
	t := w.text
	if !w.expandable {
		if t == "" {
			return "''", true
		}
		if strings.IndexFunc(t, func(r rune) bool { return !safeShellRune(r) }) < 0 {
			return t, true
		}
		if !strings.ContainsAny(t, "'\n\r") {
			return "'" + t + "'", true
		}
	}
	var b strings.Builder
	for i := 0; i < len(t); i++ {
		c := t[i]
		if w.expandable {
			switch {
			case c == '\\' && i+1 < len(t):
				i++
				c = t[i]
			case c == '*' || c == '?' || c == '[' || c == '~' && i == 0:
				b.WriteByte(c)
				continue
			}
		}
		switch {
		case c < 0x20 || c == 0x7f:
			return "", false
		case c >= 0x80 || safeShellRune(rune(c)):
			b.WriteByte(c)
		default:
			b.WriteByte('\\')
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

func safeShellRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-./:,+@%", r) || r >= 0x80
}
