package pygen

import (
	"strings"
	"testing"
	"unicode"

	"github.com/ipybox/ipybox/internal/pylit"
)

// quoteSeeds are strings a server may send as a name, a description or a
// default: quotes and backslashes, line ends, controls, bidi and other
// format characters, separators, invalid UTF-8 and non-BMP runes.
var quoteSeeds = []string{
	"", "plain", `"`, `'`, `\`, `""`, `"""`, `'''`, `\"`, `a""b`, `say "hi"`, "ends with \\", "ends with \"",
	"\"starts", "a\nb\r\tc", "\r\n", "\n", "line\\\ncontinued", "\x00\x1b\x7f", "\u2028\u2029\u0085",
	"\u202e\ufeff\u200b", "\u00a0", "é😀ключ", "\U000e0001", "\xff", "a\xc3", "\xed\xa0\x80", "{x}", "%s",
	"\\x41", "\\u0041", "\\N{BULLET}", "tab\there", "\x0c\x0b", "q\"\nnext", "\"\"\"\"\"\"",
}

// readable is what a Python literal of s holds: s, with each byte of
// invalid UTF-8 replaced by U+FFFD.
func readable(s string) string { return string([]rune(s)) }

// printable reports the first rune of line that a reader would not see
// as itself (a control, a format character, a separator), if any.
func printable(line string) (rune, bool) {
	for _, r := range line {
		if !unicode.IsPrint(r) {
			return r, false
		}
	}
	return 0, true
}

// FuzzPyStr: pyStr's literal reads back as the string, and holds one line
// of printable characters only.
func FuzzPyStr(f *testing.F) {
	for _, s := range quoteSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lit := pyStr(s)
		got, err := pylit.Unquote(lit)
		if err != nil {
			t.Fatalf("pyStr(%q) = %s, which does not read back: %v", s, lit, err)
		}
		if got != readable(s) {
			t.Fatalf("pyStr(%q) = %s, which reads back as %q", s, lit, got)
		}
		if r, ok := printable(lit); !ok {
			t.Fatalf("pyStr(%q) = %q holds %U unescaped", s, lit, r)
		}
	})
}

// FuzzPyDoc: pyDoc's docstring reads back as the string, and each of its
// lines holds printable characters only.
func FuzzPyDoc(f *testing.F) {
	for _, s := range quoteSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lit := pyDoc(s)
		got, err := pylit.Unquote(lit)
		if err != nil {
			t.Fatalf("pyDoc(%q) = %s, which does not read back: %v", s, lit, err)
		}
		if got != readable(s) {
			t.Fatalf("pyDoc(%q) = %s, which reads back as %q", s, lit, got)
		}
		for _, line := range strings.Split(lit, "\n") {
			if r, ok := printable(line); !ok {
				t.Fatalf("pyDoc(%q) = %q holds %U unescaped", s, lit, r)
			}
		}
	})
}

// TestQuotesAgreeWithPython reads the seeds' literals with Python itself,
// which the fuzz tests stand in for with pylit.
func TestQuotesAgreeWithPython(t *testing.T) {
	t.Parallel()
	var lits []string
	for _, s := range quoteSeeds {
		lits = append(lits, pyStr(s), pyDoc(s))
	}
	got := pylit.PythonEval(t, lits)
	for i, s := range quoteSeeds {
		for j, kind := range []string{"pyStr", "pyDoc"} {
			r := got[2*i+j]
			if r.Err != "" || r.Value != readable(s) {
				t.Errorf("%s(%q) = %s: Python reads %q (error %q)", kind, s, lits[2*i+j], r.Value, r.Err)
			}
		}
	}
}
