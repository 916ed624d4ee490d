package pyruntime_test

import (
	"testing"

	"github.com/ipybox/ipybox/internal/pylit"
	"github.com/ipybox/ipybox/internal/pyruntime"
)

var quoteSeeds = []string{
	"", "plain", `"`, `'`, `\`, `"""`, "a\nb\r\tc", "\x00\x1b\x7f", "\u2028\u2029", "<&>", "é😀",
	"\xff", "a\xc3", "\\u0041", `{"files": {"a.py": "print(\"x\")\n"}}`,
}

// FuzzQuote: Quote's JSON string literal is a Python string literal that
// reads back as the string (invalid UTF-8 becomes U+FFFD, as json.Marshal
// makes it).
func FuzzQuote(f *testing.F) {
	for _, s := range quoteSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lit := pyruntime.Quote(s)
		got, err := pylit.Unquote(lit)
		if err != nil {
			t.Fatalf("Quote(%q) = %s, which Python does not read as written: %v", s, lit, err)
		}
		if want := string([]rune(s)); got != want {
			t.Fatalf("Quote(%q) = %s, which reads back as %q", s, lit, got)
		}
	})
}

func TestQuoteAgreesWithPython(t *testing.T) {
	t.Parallel()
	lits := make([]string, len(quoteSeeds))
	for i, s := range quoteSeeds {
		lits[i] = pyruntime.Quote(s)
	}
	for i, r := range pylit.PythonEval(t, lits) {
		if want := string([]rune(quoteSeeds[i])); r.Err != "" || r.Value != want {
			t.Errorf("Quote(%q) = %s: Python reads %q (error %q)", quoteSeeds[i], lits[i], r.Value, r.Err)
		}
	}
}
