package escape

import "testing"

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
		{"", ""},
	}
	for _, tt := range tests {
		if got := Text(tt.in); got != tt.want {
			t.Errorf("Text(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
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
