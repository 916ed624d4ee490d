package mcpconn

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseDotEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, src string
		want      map[string]string
		err       string
	}{
		{name: "empty", src: "", want: map[string]string{}},
		{name: "simple", src: "A=1\nB=two words\n", want: map[string]string{"A": "1", "B": "two words"}},
		{name: "comments and blanks", src: "# c\n\n  # indented\nA=1 # trailing\nB=x#not-a-comment\n", want: map[string]string{"A": "1", "B": "x#not-a-comment"}},
		{name: "export", src: "export A=1\nexport\tB=2\nexporter=3\n", want: map[string]string{"A": "1", "B": "2", "exporter": "3"}},
		{name: "spaces", src: "  A = 1  \n", want: map[string]string{"A": "1"}},
		{name: "empty value", src: "A=\nB=''\nC=\"\"\n", want: map[string]string{"A": "", "B": "", "C": ""}},
		{name: "double quotes", src: `A="a # b"` + "\n" + `B="x\"y\\z\n\t$\$"` + "\n", want: map[string]string{"A": "a # b", "B": "x\"y\\z\n\t$$"}},
		{name: "single quotes", src: `A='no \n escapes ${X}'` + " # c\n", want: map[string]string{"A": `no \n escapes ${X}`}},
		{name: "equals in value", src: "URL=http://h/?a=b\n", want: map[string]string{"URL": "http://h/?a=b"}},
		{name: "multiline", src: "KEY=\"line1\nline2\"\nB=2\n", want: map[string]string{"KEY": "line1\nline2", "B": "2"}},
		{name: "crlf", src: "A=1\r\nB='2'\r\n", want: map[string]string{"A": "1", "B": "2"}},
		{name: "later wins", src: "A=1\nA=2\n", want: map[string]string{"A": "2"}},
		{name: "no interpolation", src: "A=${HOME}\n", want: map[string]string{"A": "${HOME}"}},

		{name: "no equals", src: "A=1\nJUSTAWORD\n", err: "line 2"},
		{name: "bad key", src: "1A=x\n", err: "not a variable name"},
		{name: "unclosed", src: "A=\"open\nB=2\n", err: "no closing"},
		{name: "junk after quote", src: "A=\"x\" y\n", err: "after the closing quote"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseDotEnv(tc.src)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("parseDotEnv(%q) = %v, %v; want an error containing %q", tc.src, got, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("parseDotEnv(%q) = %q, want %q", tc.src, got, tc.want)
			}
		})
	}
}

func TestLoadDotEnv(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, ".env")
	if err := os.WriteFile(p, []byte("export TOKEN='abc'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := LoadDotEnv(p)
	if err != nil || m["TOKEN"] != "abc" {
		t.Errorf("LoadDotEnv = %v, %v", m, err)
	}
	if _, err := LoadDotEnv(filepath.Join(dir, "nope")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	os.WriteFile(p, []byte("oops\n"), 0o600)
	if _, err := LoadDotEnv(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("bad file: %v, want an error naming the file", err)
	}
}
