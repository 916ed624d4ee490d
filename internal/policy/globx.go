package policy

import "strings"

// A deny or ask rule must refuse a shell word that the shell expands to a
// path it names: `cat /e?c/passwd` and `cat /[e]tc/passwd` run
// `cat /etc/passwd`, and `cat ~/../../etc/passwd` climbs from the home
// folder. Such a word is a glob itself, so the question is whether some
// path is matched both by the rule's glob and by the word's: mayOverlap
// answers it, erring towards yes (it is used only to refuse or ask).

// gtok is one token of a glob: a star (a run of any length) or one
// byte of a set (nil: any byte).
type gtok struct {
	star    bool
	noSlash bool // a shell wildcard: it never matches '/'
	set     *[256]bool
}

// globTokens reads a glob: a policy glob (shell false: * and ? match
// '/'), or an expandable shell word's text (shell true: wildcards do not
// match '/', and a leading ~ is a home folder, any absolute path).
// Multi-byte characters and classes that are not plain ASCII sets are
// read as stars, which can only widen what overlaps.
func globTokens(g string, shell bool) []gtok {
	var out []gtok
	lit := func(c byte) {
		var s [256]bool
		s[c] = true
		out = append(out, gtok{set: &s})
	}
	if shell && strings.HasPrefix(g, "~") {
		rest := g[1:]
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			rest = rest[i:]
		} else {
			rest = ""
		}
		out = append(out, gtok{set: slashSet()}, gtok{star: true})
		g = rest
	}
	for i := 0; i < len(g); i++ {
		c := g[i]
		switch {
		case c == '\\' && i+1 < len(g):
			i++
			lit(g[i])
		case c == '*' || c == '?':
			out = append(out, gtok{star: true, noSlash: shell})
		case c == '[':
			set, end, ok := classSet(g[i:])
			if !ok {
				lit(c)
				continue
			}
			if set == nil {
				out = append(out, gtok{star: true, noSlash: shell})
			} else {
				if shell {
					set['/'] = false
				}
				out = append(out, gtok{set: set})
			}
			i += end - 1
		case c >= 0x80:
			out = append(out, gtok{star: true})
		default:
			lit(c)
		}
	}
	return out
}

func slashSet() *[256]bool {
	var s [256]bool
	s['/'] = true
	return &s
}

// classSet reads the class at the start of g ("[a-z]", "[!x]"): its set
// of bytes (nil when it is negated or not plain ASCII: any byte, taken
// as a star), its length, and whether it is a class at all.
func classSet(g string) (*[256]bool, int, bool) {
	j := 1
	neg := j < len(g) && (g[j] == '!' || g[j] == '^')
	if neg {
		j++
	}
	start := j
	for ; j < len(g); j++ {
		if g[j] == ']' && j > start {
			break
		}
	}
	if j >= len(g) {
		return nil, 0, false
	}
	body := g[start:j]
	if neg {
		return nil, j + 1, true
	}
	var s [256]bool
	for k := 0; k < len(body); k++ {
		c := body[k]
		if c >= 0x80 {
			return nil, j + 1, true
		}
		if k+2 < len(body) && body[k+1] == '-' {
			for x := int(c); x <= int(body[k+2]); x++ {
				s[x] = true
			}
			k += 2
			continue
		}
		s[c] = true
	}
	return &s, j + 1, true
}

// mayOverlap reports whether some string is matched by both token lists.
func mayOverlap(a, b []gtok) bool {
	memo := make(map[[2]int]bool)
	var f func(i, j int) bool
	f = func(i, j int) bool {
		if i == len(a) && j == len(b) {
			return true
		}
		k := [2]int{i, j}
		if v, ok := memo[k]; ok {
			return v
		}
		memo[k] = false // a cycle is no way through
		var r bool
		switch {
		case i < len(a) && a[i].star && j < len(b) && b[j].star:
			r = f(i+1, j) || f(i, j+1)
		case i < len(a) && a[i].star:
			r = f(i+1, j) || j < len(b) && starTakes(a[i], b[j]) && f(i, j+1)
		case j < len(b) && b[j].star:
			r = f(i, j+1) || i < len(a) && starTakes(b[j], a[i]) && f(i+1, j)
		case i < len(a) && j < len(b):
			r = setsMeet(a[i].set, b[j].set) && f(i+1, j+1)
		}
		memo[k] = r
		return r
	}
	return f(0, 0)
}

// starTakes reports whether the star s can match a byte of the single
// token t.
func starTakes(s, t gtok) bool {
	if !s.noSlash || t.set == nil {
		return true
	}
	for c, ok := range t.set {
		if ok && c != '/' {
			return true
		}
	}
	return false
}

func setsMeet(a, b *[256]bool) bool {
	if a == nil || b == nil {
		return true
	}
	for c := range a {
		if a[c] && b[c] {
			return true
		}
	}
	return false
}

// denyExpandable reports whether a deny or ask rule's word p may match
// the expandable shell word w: whether some path is named by both, w
// read as the shell expands it, cleaned or not.
func denyExpandable(p, w shellWord) bool {
	var pt []gtok
	if p.glob {
		pt = globTokens(p.text, false)
	} else {
		pt = globTokens(escapeGlob(p.text), false)
	}
	for _, t := range append([]string{w.text}, pathForms(w.text)...) {
		if mayOverlap(pt, globTokens(t, true)) {
			return true
		}
	}
	return false
}

// escapeGlob makes s a glob that matches s alone.
func escapeGlob(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[\`, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
