// Package escape makes text that kernel code chose safe to show a person.
//
// A terminal or a client's dialog renders control characters and Unicode
// format characters: a carriage return, "\x1b[2K" (erase the line),
// "\x1b[8m" (invisible text) or a right-to-left override (U+202E) can hide
// or reorder the real shell command or tool arguments that a person is
// asked to approve. Text replaces each such character with a visible
// escape, so that what is shown is what would run.
package escape

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Text returns s with every character that could hide or reorder what is
// shown replaced by a visible escape: C0 controls but newline and tab
// ("\r", "\x1b"), DEL, C1 controls, Unicode format characters (bidi
// embeddings, overrides and isolates U+202A–U+202E and U+2066–U+2069, the
// marks U+200E/U+200F and U+061C, zero-width characters, U+FEFF, the soft
// hyphen), the line and paragraph separators U+2028 and U+2029, and bytes
// that are not UTF-8 ("\xff"). Newlines stay, so that a multi-line command
// shows every line; tabs stay. Ordinary text, including non-ASCII letters,
// is unchanged.
func Text(s string) string {
	if !needs(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case hidden(r):
			b.WriteString(visible(r))
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// needs reports whether Text would change s.
func needs(s string) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || hidden(r) {
			return true
		}
		i += n
	}
	return false
}

// hidden reports whether r must be shown as an escape.
func hidden(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0:
		return true
	case r == 0x2028 || r == 0x2029:
		return true
	}
	return unicode.Is(unicode.Cf, r)
}

// visible spells r as an escape a person reads.
func visible(r rune) string {
	switch r {
	case '\r':
		return `\r`
	case 0x1b:
		return `\x1b`
	}
	if r < 0x100 {
		return fmt.Sprintf(`\x%02x`, r)
	}
	return fmt.Sprintf(`\u%04x`, r)
}
