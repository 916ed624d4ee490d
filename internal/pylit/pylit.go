// Package pylit reads Python string literals the way Python's tokenizer
// does, for tests that check the Python source Go code writes: a quoter is
// right when what it writes reads back, here and in Python itself, as the
// string it was given.
//
// It reads one plain str literal in single, double or tripled quotes,
// with no prefix. It is strict where Python is lenient, so that a quoter
// that leans on leniency fails its test: an unknown escape (which Python
// keeps with a SyntaxWarning), \N{...}, a surrogate, a raw carriage return
// (which Python's universal newlines turn into \n) and a NUL (which Python
// refuses in source) are errors.
package pylit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Unquote returns the value of the Python string literal lit, which must
// be the whole of lit.
func Unquote(lit string) (string, error) {
	var quote string
	switch {
	case strings.HasPrefix(lit, `"""`), strings.HasPrefix(lit, `'''`):
		quote = lit[:3]
	case strings.HasPrefix(lit, `"`), strings.HasPrefix(lit, `'`):
		quote = lit[:1]
	default:
		return "", errors.New("not a string literal")
	}
	triple := len(quote) == 3
	var b strings.Builder
	s := lit[len(quote):]
	for {
		if s == "" {
			return "", errors.New("unterminated string")
		}
		if strings.HasPrefix(s, quote) {
			if rest := s[len(quote):]; rest != "" {
				return "", fmt.Errorf("%q after the closing quote", rest)
			}
			return b.String(), nil
		}
		r, w := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && w == 1:
			return "", errors.New("invalid UTF-8 in source")
		case r == 0:
			return "", errors.New("NUL in source")
		case r == '\r':
			return "", errors.New("raw carriage return (Python reads it as a newline)")
		case r == '\n' && !triple:
			return "", errors.New("raw newline in a single-quoted string")
		case r != '\\':
			b.WriteRune(r)
			s = s[w:]
			continue
		}
		n, err := escape(&b, s)
		if err != nil {
			return "", err
		}
		s = s[n:]
	}
}

// escape writes the value of the escape sequence at the start of s and
// returns its length.
func escape(b *strings.Builder, s string) (int, error) {
	if len(s) < 2 {
		return 0, errors.New("backslash at the end")
	}
	c := s[1]
	switch c {
	case '\n':
		return 2, nil // a line continuation
	case '\\', '\'', '"':
		b.WriteByte(c)
		return 2, nil
	case 'a', 'b', 'f', 'n', 'r', 't', 'v':
		b.WriteByte(map[byte]byte{'a': 7, 'b': 8, 'f': 12, 'n': 10, 'r': 13, 't': 9, 'v': 11}[c])
		return 2, nil
	case 'x', 'u', 'U':
		digits := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
		if len(s) < 2+digits {
			return 0, fmt.Errorf(`truncated \%c escape`, c)
		}
		hex := s[2 : 2+digits]
		v, err := strconv.ParseUint(hex, 16, 32)
		if err != nil {
			return 0, fmt.Errorf(`bad \%c escape %q`, c, hex)
		}
		if err := writeCode(b, v); err != nil {
			return 0, err
		}
		return 2 + digits, nil
	case '0', '1', '2', '3', '4', '5', '6', '7':
		n := 1
		for n < 3 && 1+n < len(s) && s[1+n] >= '0' && s[1+n] <= '7' {
			n++
		}
		v, _ := strconv.ParseUint(s[1:1+n], 8, 32)
		if v > 0o377 {
			return 0, fmt.Errorf(`octal escape \%s above \377 (a SyntaxWarning in Python)`, s[1:1+n])
		}
		if err := writeCode(b, v); err != nil {
			return 0, err
		}
		return 1 + n, nil
	case 'N':
		return 0, errors.New(`\N{...} escapes are not read`)
	}
	return 0, fmt.Errorf(`unknown escape \%c (Python keeps the backslash, with a SyntaxWarning)`, c)
}

func writeCode(b *strings.Builder, v uint64) error {
	switch {
	case v > utf8.MaxRune:
		return fmt.Errorf("code point %#x out of range", v)
	case v >= 0xd800 && v <= 0xdfff:
		return fmt.Errorf("lone surrogate %#x", v)
	}
	b.WriteRune(rune(v))
	return nil
}
