package escape

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"ls -l", "ls -l"},
		{"echo 'ünïcödé' 日本", "echo 'ünïcödé' 日本"},
		{"a\nb\tc", "a\nb\tc"},
		{"rm -rf ~\rls", `rm -rf ~\rls`},
		{"curl evil\x1b[2K\x1b[1Gls", `curl evil\x1b[2K\x1b[1Gls`},
		{"rm -rf /\x1b[8m hidden", `rm -rf /\x1b[8m hidden`},
		{"\x1b]0;title\x07", `\x1b]0;title\x07`},
		{"safe\u202e txt.exe", `safe\u202e txt.exe`},
		{"\u2066a\u2069\u202a\u202b\u202c\u202d", `\u2066a\u2069\u202a\u202b\u202c\u202d`},
		{"x\u200by\u200e\u200f\u061c\ufeff\u00ad", `x\u200by\u200e\u200f\u061c\ufeff\xad`},
		{"line\u2028sep\u2029", `line\u2028sep\u2029`},
		{"nul\x00del\x7fc1\u0085\u009b", `nul\x00del\x7fc1\x85\x9b`},
		{"bad\xffutf8\xc3", `bad\xffutf8\xc3`},
		{"cut\xe6\x97a\xed\xa0\x80", `cut\xe6\x97a\xed\xa0\x80`},
		{"\ufffd", "\ufffd"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := Text(tt.in); got != tt.want {
			t.Errorf("Text(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// writerTests are what a Writer makes of one stream, Flush included.
var writerTests = []struct{ in, want string }{
	{"plain text\n", "plain text\n"},
	{"ünïcödé 日本 👨\u200d👩\u200d👧 \u202e\u2028\ufffd", "ünïcödé 日本 👨\u200d👩\u200d👧 \u202e\u2028\ufffd"},
	{"tab\tnl\ncr\r\n", "tab\tnl\ncr\r\n"},
	{"50%\r100%\n", "50%\r100%\n"},
	// Colours pass, and are reset at the end unless the stream did.
	{"\x1b[31mred\x1b[0m", "\x1b[31mred\x1b[0m"},
	{"\x1b[1;38;5;196mbold", "\x1b[1;38;5;196mbold" + resetSGR},
	{"\x1b[mreset\x1b[0;0m", "\x1b[mreset\x1b[0;0m"},
	{"\x1b[0;31mx", "\x1b[0;31mx" + resetSGR},
	// The red team's payload: clipboard, cursor up, erase line.
	{"clip\x1b]52;c;Y3VybA==\x07board", `clip\x1b]52;c;Y3VybA==\x07board`},
	{"up\x1b[3A\x1b[2Kerased", `up\x1b[3A\x1b[2Kerased`},
	// Other sequences, and SGR-like ones that are not SGR.
	{"\x1b]0;title\x1b\\", `\x1b]0;title\x1b\`},
	{"\x1bP+q\x1b\\\x1b_apc\x1b\\\x1b^pm\x1b\\\x1bXsos\x1b\\", `\x1bP+q\x1b\\x1b_apc\x1b\\x1b^pm\x1b\\x1bXsos\x1b\`},
	{"\x1b[?1049h\x1b[>4;2m\x1b[4:3m\x1b[38:2::1:2:3m", `\x1b[?1049h\x1b[>4;2m\x1b[4:3m\x1b[38:2::1:2:3m`},
	{"\x1b[1;2H\x1b[6n\x1b[31", `\x1b[1;2H\x1b[6n\x1b[31`},
	{"\x1bc\x1b7\x1b8\x1b", `\x1bc\x1b7\x1b8\x1b`},
	{"\x1b\x1b[32mg", `\x1b` + "\x1b[32mg" + resetSGR},
	{"\x1b[\x1b[m", `\x1b[` + "\x1b[m"},
	// C0 but \n \t \r, DEL, C1 as code points, bytes that are not UTF-8.
	{"bel\x07bs\x08vt\x0bff\x0cnul\x00so\x0edel\x7f", `bel\x07bs\x08vt\x0bff\x0cnul\x00so\x0edel\x7f`},
	{"csi\u009b31m\u009d52;c;x\u009c\u0085", `csi\x9b31m\x9d52;c;x\x9c\x85`},
	{"raw\x9b31m\xff\xc3", `raw\x9b31m\xff\xc3`},
	{"cut\xe6\x97a\xed\xa0\x80", `cut\xe6\x97a\xed\xa0\x80`},
	{"", ""},
}

func TestWriter(t *testing.T) {
	for _, tt := range writerTests {
		if got := writeAll(t, tt.in); got != tt.want {
			t.Errorf("Writer(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestWriterSplit: a sequence or character split across writes, at any
// byte, is recognised as in one write.
func TestWriterSplit(t *testing.T) {
	for _, tt := range writerTests {
		for i := 0; i <= len(tt.in); i++ {
			if got := writeAll(t, tt.in[:i], tt.in[i:]); got != tt.want {
				t.Errorf("Writer(%q + %q) = %q, want %q", tt.in[:i], tt.in[i:], got, tt.want)
			}
		}
		if got := writeAll(t, strings.Split(tt.in, "")...); got != tt.want {
			t.Errorf("Writer(%q, a character a write) = %q, want %q", tt.in, got, tt.want)
		}
		bs := make([]string, len(tt.in))
		for i := range bs {
			bs[i] = tt.in[i : i+1]
		}
		if got := writeAll(t, bs...); got != tt.want {
			t.Errorf("Writer(%q, a byte a write) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestWriterStreams: nothing but an unfinished sequence or character waits
// for the next write.
func TestWriterStreams(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out)
	for _, step := range []struct{ in, out string }{
		{"50%", "50%"},
		{"\r", "50%\r"},
		{"\x1b[3", "50%\r"},
		{"2m", "50%\r\x1b[32m"},
		{"\xe6\x97", "50%\r\x1b[32m"},
		{"\xa5\x1b", "50%\r\x1b[32m日"},
		{"]52;c;", `50%` + "\r\x1b[32m日" + `\x1b]52;c;`},
	} {
		if _, err := w.Write([]byte(step.in)); err != nil {
			t.Fatal(err)
		}
		if out.String() != step.out {
			t.Fatalf("after writing %q: %q, want %q", step.in, out.String(), step.out)
		}
	}
}

// TestWriterBounded: a sequence that never ends is not held: an OSC flows
// out as text at once, and an SGR that grows past maxSGR is escaped.
func TestWriterBounded(t *testing.T) {
	for _, start := range []string{"\x1b]52;c;", "\x1b[", "\x1bP"} {
		var out bytes.Buffer
		w := NewWriter(&out)
		w.Write([]byte(start))
		body := strings.Repeat("1", 1<<20)
		for range 4 {
			w.Write([]byte(body))
		}
		if len(w.m.pend) > maxSGR {
			t.Errorf("%q: holds %d bytes", start, len(w.m.pend))
		}
		if n := out.Len(); n < 4<<20 {
			t.Errorf("%q: %d bytes out of %d written", start, n, 4<<20+len(start))
		}
		if bytes.IndexByte(out.Bytes(), 0x1b) >= 0 {
			t.Errorf("%q: a raw ESC passed", start)
		}
	}
}

func TestWriterError(t *testing.T) {
	boom := errors.New("boom")
	w := NewWriter(failWriter{boom})
	if n, err := w.Write([]byte("x")); n != 0 || err != boom {
		t.Errorf("Write = %d, %v, want 0, boom", n, err)
	}
	if n, err := w.Write([]byte("\x1b[")); n != 2 || err != nil {
		t.Errorf("Write of a held sequence = %d, %v, want 2, nil", n, err)
	}
	if err := w.Flush(); err != boom {
		t.Errorf("Flush = %v, want boom", err)
	}
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

// writeAll writes the parts to a Writer, flushes it and returns what came
// out.
func writeAll(t testing.TB, parts ...string) string {
	var out bytes.Buffer
	w := NewWriter(&out)
	for _, p := range parts {
		if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", p, n, err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func FuzzText(f *testing.F) {
	f.Add("rm -rf /\x1b[8m\u202e")
	f.Fuzz(func(t *testing.T, s string) {
		out := Text(s)
		for _, r := range out {
			if r != '\n' && r != '\t' && hidden(r) {
				t.Fatalf("Text(%q) = %q still holds %U", s, out, r)
			}
		}
		if Text(out) != out {
			t.Fatalf("Text is not idempotent on %q", out)
		}
	})
}

// sgr is the only form in which a Writer lets ESC through.
var sgr = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// FuzzWriter: whatever the stream and wherever it is split, what comes out
// is UTF-8 with no ESC but in SGR form, no C0 control but \n, \t and \r,
// no DEL and no C1 control; it does not depend on the split, and text
// without controls passes unchanged.
func FuzzWriter(f *testing.F) {
	for _, tt := range writerTests {
		f.Add(tt.in, uint(len(tt.in)/2))
	}
	f.Fuzz(func(t *testing.T, s string, split uint) {
		i := int(split % uint(len(s)+1))
		out := writeAll(t, s[:i], s[i:])
		if whole := writeAll(t, s); out != whole {
			t.Fatalf("%q split at %d gives %q, whole %q", s, i, out, whole)
		}
		if !utf8.ValidString(out) {
			t.Fatalf("Writer(%q) = %q is not UTF-8", s, out)
		}
		for _, r := range sgr.ReplaceAllString(out, "") {
			if r != '\r' && control(r) {
				t.Fatalf("Writer(%q) = %q holds %U", s, out, r)
			}
		}
		if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return r != '\r' && control(r) }) && out != s {
			t.Fatalf("Writer(%q) = %q changed text without controls", s, out)
		}
	})
}
