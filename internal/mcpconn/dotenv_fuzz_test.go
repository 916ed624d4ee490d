package mcpconn

import (
	"maps"
	"strings"
	"testing"
)

var dotEnvSeeds = []string{
	"", "A=1\nB=two words\n", "# c\n\n  # indented\nA=1 # trailing\nB=x#not-a-comment\n", "export A=1\nexport\tB=2\nexporter=3\n",
	"  A = 1  \n", "A=\nB=''\nC=\"\"\n", `A="a # b"` + "\n" + `B="x\"y\\z\n\t$\$"` + "\n", `A='no \n escapes ${X}'` + " # c\n",
	"URL=http://h/?a=b\n", "KEY=\"line1\nline2\"\nB=2\n", "A=1\r\nB='2'\r\n", "A=1\nA=2\n", "A=${HOME}\n",
	"A=1\nJUSTAWORD\n", "1A=x\n", "A=\"open\nB=2\n", "A=\"x\" y\n", "A=\"x\\\"", "A='x\n  y  \n'", "A=\"\\", "=",
}

// FuzzParseDotEnv: any input parses or fails without a panic; what parses
// has variable names only; CRLF line ends read as LF ones; and a line
// added at the end adds its variable and changes nothing else.
func FuzzParseDotEnv(f *testing.F) {
	for _, s := range dotEnvSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		m, err := parseDotEnv(src)
		if err != nil {
			return
		}
		for k := range m {
			if !isEnvName(k) {
				t.Fatalf("parseDotEnv(%q) gave the key %q, which is not a variable name", src, k)
			}
		}
		if !strings.Contains(src, "\r") {
			crlf, err := parseDotEnv(strings.ReplaceAll(src, "\n", "\r\n"))
			if err != nil || !maps.Equal(crlf, m) {
				t.Fatalf("parseDotEnv(%q) = %q, but with CRLF line ends %q, %v", src, m, crlf, err)
			}
		}
		more, err := parseDotEnv(src + "\nIPYBOX_FUZZ_ADDED=1\n")
		want := maps.Clone(m)
		want["IPYBOX_FUZZ_ADDED"] = "1"
		if err != nil || !maps.Equal(more, want) {
			t.Fatalf("parseDotEnv(%q) = %q, but with a line added %q, %v", src, m, more, err)
		}
	})
}

// FuzzDotEnvRoundTrip writes a value the way a person (or a tool) writes a
// .env file, in double quotes with escapes, in single quotes, or bare, among
// comments and an export, and reads it back.
func FuzzDotEnvRoundTrip(f *testing.F) {
	for _, v := range []string{"", "plain", "two words", `a"b\c`, "x\ny", "$HOME ${X}", " pad ", "a # b", "it's", "tab\there", "\r", "a\n  b  \nc"} {
		for style := range uint8(3) {
			f.Add("KEY", v, style)
		}
	}
	f.Fuzz(func(t *testing.T, key, value string, style uint8) {
		if !isEnvName(key) {
			return
		}
		var line string
		switch style % 3 {
		case 0:
			r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`, "\t", `\t`, "$", `\$`)
			line = key + `="` + r.Replace(value) + `" # a comment`
		case 1:
			if strings.Contains(value, "'") || strings.Contains(value, "\r\n") || strings.HasSuffix(value, "\r") {
				return // CRLF line ends are read as LF ones, quoted or not
			}
			line = "export " + key + "='" + value + "'"
		case 2:
			if value != strings.TrimSpace(value) || strings.ContainsAny(value, "\n\r") ||
				strings.Contains(value, " #") || strings.Contains(value, "\t#") || strings.HasPrefix(value, `"`) || strings.HasPrefix(value, "'") {
				return // not a value that can be written bare
			}
			line = key + "=" + value
		}
		src := "# written by a test\n\n" + line + "\nOTHER=1\n"
		m, err := parseDotEnv(src)
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		if got := m[key]; got != value {
			t.Fatalf("%q: %s = %q, want %q", src, key, got, value)
		}
	})
}
