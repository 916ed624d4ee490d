package pygen

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Python source is produced only from escaped text: every string that
// came from a server goes through pyStr or pyDoc, and comments carry such
// literals rather than raw text. Go's %q is not used, because Go and
// Python escapes differ (Go's \a is fine, but \x{...} forms, \U sizes and
// which runes count as printable do not line up).

// pyStr returns s as a double-quoted Python string literal that holds
// only printable characters: quotes, backslashes, control characters,
// line and paragraph separators, format characters (bidi overrides) and
// invalid UTF-8 are escaped.
func pyStr(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	writeEscaped(&b, s, false, true)
	b.WriteByte('"')
	return b.String()
}

// pyDoc returns s as a triple-quoted docstring whose value is exactly s.
// Newlines stay real, so the text reads naturally; continuation lines are
// not indented, because indentation would become part of the value (and
// inspect.cleandoc does not undo it exactly when a line starts with a tab).
// A double quote is escaped only where it could end the string: before
// another quote, and at the very end.
func pyDoc(s string) string {
	var b strings.Builder
	b.WriteString(`"""`)
	lines := strings.Split(s, "\n")
	for i, line := range lines {
		if i > 0 {
			b.WriteByte('\n')
		}
		writeEscaped(&b, line, true, i == len(lines)-1)
	}
	b.WriteString(`"""`)
	return b.String()
}

// writeEscaped writes s escaped for a double-quoted Python string. In a
// docstring (doc), a quote is escaped only before another quote or at the
// end of the last line (last); elsewhere every quote is.
func writeEscaped(b *strings.Builder, s string, doc, last bool) {
	for i, w := 0, 0; i < len(s); i += w {
		r, width := utf8.DecodeRuneInString(s[i:])
		w = width
		if r == utf8.RuneError && width == 1 {
			b.WriteString(`\ufffd`)
			continue
		}
		switch r {
		case '\\':
			b.WriteString(`\\`)
		case '"':
			if doc && i+1 < len(s) && s[i+1] != '"' || doc && i+1 == len(s) && !last {
				b.WriteByte('"')
			} else {
				b.WriteString(`\"`)
			}
		case '\n':
			b.WriteString(`\n`) // pyDoc splits lines before calling this
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			switch {
			case unicode.IsPrint(r): // excludes Cc, Cf, Zl, Zp, Co, Cs and unassigned runes
				b.WriteRune(r)
			case r < 0x100:
				fmt.Fprintf(b, `\x%02x`, r)
			case r < 0x10000:
				fmt.Fprintf(b, `\u%04x`, r)
			default:
				fmt.Fprintf(b, `\U%08x`, r)
			}
		}
	}
}

// pyComment returns a comment line body that cannot end the comment early:
// plain ASCII text is kept, anything else is replaced.
func pyComment(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= ' ' && r < 0x7f {
			b.WriteRune(r)
		} else {
			b.WriteByte('?')
		}
	}
	return b.String()
}
