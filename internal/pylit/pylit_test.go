package pylit

import (
	"testing"
)

// accepted are literals Unquote reads, with their values.
var accepted = []struct{ lit, want string }{
	{`""`, ""},
	{`''`, ""},
	{`"abc"`, "abc"},
	{`'it\'s'`, "it's"},
	{`"a\"b"`, `a"b`},
	{`"a'b"`, "a'b"},
	{`'a"b'`, `a"b`},
	{`"\\"`, `\`},
	{`"\a\b\f\n\r\t\v"`, "\a\b\f\n\r\t\v"},
	{`"\x00\x7f\xff"`, "\x00\u007f\u00ff"},
	{`"\0\7\77\101\1011"`, "\x00\x07\x3fA" + "A1"},
	{`"\u00e9\u2028\uFEFF"`, "é\u2028\ufeff"},
	{`"\U0001F600\U0010ffff"`, "😀\U0010ffff"},
	{`"naïve ✓ 😀"`, "naïve ✓ 😀"},
	{"\"a\\\nb\"", "ab"},
	{`"""a"b""c"""`, `a"b""c`},
	{"\"\"\"two\nlines\"\"\"", "two\nlines"},
	{`"""ends in a quote\""""`, `ends in a quote"`},
	{`""""starts with one"""`, `"starts with one`},
	{`'''a'b''c'''`, `a'b''c`},
}

// rejected are literals Unquote refuses; Python refuses the first group too.
var rejected = []string{
	``, `abc`, `"abc`, `"abc"x`, `"a"b"`, "\"a\nb\"", `"\x4"`, `"\u12"`, `"\U0011ffff"`,
	`"""abc""`, `"""a"""b"""`, `"\`,
	// Python accepts these, with a warning or a conversion; Unquote does not.
	`"\q"`, `"\N{BULLET}"`, `"\ud800"`, "\"a\rb\"", "\"\x00\"", `"\400"`, "\"\xff\"",
}

func TestUnquote(t *testing.T) {
	t.Parallel()
	for _, c := range accepted {
		got, err := Unquote(c.lit)
		if err != nil || got != c.want {
			t.Errorf("Unquote(%s) = %q, %v; want %q", c.lit, got, err, c.want)
		}
	}
	for _, lit := range rejected {
		if got, err := Unquote(lit); err == nil {
			t.Errorf("Unquote(%q) = %q, want an error", lit, got)
		}
	}
}

// TestUnquoteAgreesWithPython checks Unquote against Python's own reader:
// every literal Unquote accepts, Python reads (with warnings as errors) to
// the same value, and the first group of rejected ones Python refuses too.
func TestUnquoteAgreesWithPython(t *testing.T) {
	t.Parallel()
	var lits []string
	for _, c := range accepted {
		lits = append(lits, c.lit)
	}
	pyRejects := rejected[:12]
	lits = append(lits, pyRejects...)
	got := PythonEval(t, lits)
	for i, c := range accepted {
		if got[i].Err != "" || got[i].Value != c.want {
			t.Errorf("Python reads %s as %q (error %q); Unquote as %q", c.lit, got[i].Value, got[i].Err, c.want)
		}
	}
	for i, lit := range pyRejects {
		if r := got[len(accepted)+i]; r.Err == "" {
			t.Errorf("Python reads %q as %q; Unquote refuses it", lit, r.Value)
		}
	}
}
