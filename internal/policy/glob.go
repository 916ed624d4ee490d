package policy

import (
	"strings"
	"unicode/utf8"
)

// globMatch reports whether s matches pattern: * is any run of characters
// (slashes included: an argument is not a path to be walked), ? is one
// character, [abc], [a-z] and [!a-z] (or [^a-z]) are classes, and \ makes
// the next character literal. A malformed class matches nothing.
//
// It runs in O(len(pattern) × len(s)) at worst: one saved position for the
// last *, as in the classic wildcard algorithm, instead of recursion, so
// that kernel-chosen text cannot make a decision slow.
func globMatch(pattern, s string) bool {
	px, sx := 0, 0
	starPx, starSx := -1, -1
	for sx < len(s) {
		if px < len(pattern) {
			switch c := pattern[px]; c {
			case '*':
				starPx, starSx = px, sx
				px++
				continue
			case '?':
				_, n := utf8.DecodeRuneInString(s[sx:])
				px++
				sx += n
				continue
			case '[':
				r, n := utf8.DecodeRuneInString(s[sx:])
				if ok, end, valid := matchClass(pattern[px:], r); valid && ok {
					px += end
					sx += n
					continue
				} else if !valid {
					return false
				}
			case '\\':
				if px+1 < len(pattern) {
					pr, pn := utf8.DecodeRuneInString(pattern[px+1:])
					sr, sn := utf8.DecodeRuneInString(s[sx:])
					if pr == sr {
						px += 1 + pn
						sx += sn
						continue
					}
				}
			default:
				pr, pn := utf8.DecodeRuneInString(pattern[px:])
				sr, sn := utf8.DecodeRuneInString(s[sx:])
				if pr == sr {
					px += pn
					sx += sn
					continue
				}
			}
		}
		if starPx < 0 {
			return false
		}
		// Let the last * take one more character and try again.
		_, n := utf8.DecodeRuneInString(s[starSx:])
		starSx += n
		px, sx = starPx+1, starSx
	}
	for px < len(pattern) && pattern[px] == '*' {
		px++
	}
	return px == len(pattern)
}

// matchClass matches r against the class at the start of p ("[...]"). It
// returns whether r is in it, the class's length in p, and whether the
// class is well formed.
func matchClass(p string, r rune) (match bool, end int, valid bool) {
	i := 1
	neg := false
	if i < len(p) && (p[i] == '!' || p[i] == '^') {
		neg = true
		i++
	}
	first := true
	for i < len(p) {
		if p[i] == ']' && !first {
			return match != neg, i + 1, true
		}
		first = false
		lo, n, ok := classChar(p[i:])
		if !ok {
			return false, 0, false
		}
		i += n
		hi := lo
		if i+1 < len(p) && p[i] == '-' && p[i+1] != ']' {
			if hi, n, ok = classChar(p[i+1:]); !ok {
				return false, 0, false
			}
			i += 1 + n
		}
		if lo <= r && r <= hi {
			match = true
		}
	}
	return false, 0, false // no closing ]
}

func classChar(p string) (rune, int, bool) {
	if p == "" {
		return 0, 0, false
	}
	if p[0] == '\\' {
		if len(p) < 2 {
			return 0, 0, false
		}
		r, n := utf8.DecodeRuneInString(p[1:])
		return r, 1 + n, true
	}
	r, n := utf8.DecodeRuneInString(p)
	return r, n, true
}

// hasGlob reports whether pattern has an unescaped metacharacter.
func hasGlob(pattern string) bool {
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '\\':
			i++
		case '*', '?', '[':
			return true
		}
	}
	return false
}

// checkGlob reports a malformed class in pattern.
func checkGlob(pattern string) bool {
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '\\':
			i++
		case '[':
			_, n, ok := matchClass(pattern[i:], 0)
			if !ok {
				return false
			}
			i += n - 1
		}
	}
	return true
}

// globQuote returns s with every metacharacter escaped: a pattern that
// matches s alone.
func globQuote(s string) string {
	if !strings.ContainsAny(s, `*?[\`) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// decimal is a JSON number as sign, digits and exponent: the value is
// 0.digits × 10^exp, digits without leading or trailing zeros ("" for 0).
// Numbers are compared exactly, as the text the MCP server receives, not
// as 64-bit floats that round 100.000000000000001 down to 100.
type decimal struct {
	neg    bool
	digits string
	exp    int64
}

// parseDecimal reads a JSON number (or a rule's bound, which has the same
// syntax).
func parseDecimal(s string) (decimal, bool) {
	var d decimal
	i := 0
	if i < len(s) && s[i] == '-' {
		d.neg = true
		i++
	}
	start := i
	var mant []byte
	point := -1
	for ; i < len(s); i++ {
		c := s[i]
		if c == '.' && point < 0 {
			point = len(mant)
			continue
		}
		if c < '0' || c > '9' {
			break
		}
		mant = append(mant, c)
	}
	if len(mant) == 0 || i-start == 0 {
		return d, false
	}
	if point < 0 {
		point = len(mant)
	}
	var e int64
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		eneg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			eneg = s[i] == '-'
			i++
		}
		if i == len(s) {
			return d, false
		}
		for ; i < len(s); i++ {
			c := s[i]
			if c < '0' || c > '9' {
				return d, false
			}
			if e < 1<<40 { // beyond this every comparison is decided already
				e = e*10 + int64(c-'0')
			}
		}
		if eneg {
			e = -e
		}
	}
	if i != len(s) {
		return d, false
	}
	// Strip leading zeros (moving the point) and trailing zeros.
	lead := 0
	for lead < len(mant) && mant[lead] == '0' {
		lead++
	}
	digits := strings.TrimRight(string(mant[lead:]), "0")
	if digits == "" {
		return decimal{}, true // zero, whatever its sign
	}
	d.digits = digits
	d.exp = int64(point-lead) + e
	return d, true
}

// cmpDecimal returns -1, 0 or 1 as a is less than, equal to or greater
// than b.
func cmpDecimal(a, b decimal) int {
	sign := func(d decimal) int {
		switch {
		case d.digits == "":
			return 0
		case d.neg:
			return -1
		}
		return 1
	}
	sa, sb := sign(a), sign(b)
	if sa != sb {
		if sa < sb {
			return -1
		}
		return 1
	}
	if sa == 0 {
		return 0
	}
	c := 0
	switch {
	case a.exp != b.exp:
		c = -1
		if a.exp > b.exp {
			c = 1
		}
	default:
		c = strings.Compare(a.digits, b.digits) // equal length after padding is implied: trailing zeros are stripped
	}
	if sa < 0 {
		c = -c
	}
	return c
}
