package sandbox

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite testdata/seatbelt from the profile generator's output")

// seatbeltCases are the golden cases of the macOS profile generator.
// "hostile" holds paths that try to end their string literal and add a
// rule: quotes, parentheses, backslashes, a comment, regex and glob
// characters, spaces and non-ASCII.
var seatbeltCases = []struct {
	name    string
	policy  seatbeltPolicy
	wantErr string // a part of the error, for a refused policy
}{
	{name: "default", policy: seatbeltPolicy{
		Workspace: "/Users/ada/project",
		Writable:  []string{"/private/var/folders/xy/abc/T/ipybox-1/kernel", "/private/var/folders/xy/abc/T/ipybox-sandbox-1/tmp"},
		HideHome:  []string{"/Users"},
		ReadOnly:  []string{"/opt/homebrew/Cellar/python@3.12/3.12.4/Frameworks/Python.framework/Versions/3.12", "/Users/ada/.ipybox-venv"},
		DenyRead: []string{"/Users/ada/project/**/.env", "/Users/ada/project/**/.env.*", "/Users/ada/project/.ipybox/servers.json",
			"/Users/ada/.ssh"},
		DenyWrite: []string{"/Users/ada/project/**/.git/**", "/Users/ada/project/**/.claude/**", "/Users/ada/project/.mcp.json", "/Users/ada/project/.ipybox"},
		Sockets:   []string{"/private/var/folders/xy/abc/T/ipybox-1/kernel", "/private/var/folders/xy/abc/T/ipybox-1/tool.sock"},
	}},
	{name: "network", policy: seatbeltPolicy{
		Workspace: "/Users/ada/project",
		Sockets:   []string{"/private/tmp/ipybox-1/kernel"},
		ProxyPort: 53127,
	}},
	{name: "hostile", policy: seatbeltPolicy{
		Workspace: `/Users/ada/my "project"`,
		Writable:  []string{`/tmp/a")) (allow default) ; (("`},
		ReadOnly:  []string{`/opt/back\slash\")(allow file-write* (subpath "/"))`},
		DenyRead: []string{
			`/Users/ada/(parens) and [brackets]/*.key`,
			`/Users/ada/re.ga$x^+{1}|y\z/**`,
			`/Users/ada/unclosed[class/x`,
			`/Users/ada/ünïcödé and spaces/a?b`,
			`/Users/ada/;comment"#|block|#`,
		},
		DenyWrite: []string{`/Users/ada/my "project"/[!abc]*.cfg`},
		Sockets:   []string{`/tmp/s") (allow network*`},
		ProxyPort: 3128,
	}},
	{name: "newline", policy: seatbeltPolicy{Workspace: "/Users/ada/ws", DenyRead: []string{"/Users/ada/a\n(allow default)"}},
		wantErr: "control character"},
	{name: "nul", policy: seatbeltPolicy{Workspace: "/Users/ada/ws", Writable: []string{"/tmp/a\x00b"}},
		wantErr: "control character"},
	{name: "bad utf-8", policy: seatbeltPolicy{Workspace: "/Users/ada/ws\xff"}, wantErr: "not valid UTF-8"},
	{name: "relative", policy: seatbeltPolicy{Workspace: "project"}, wantErr: "not absolute"},
	{name: "unclean", policy: seatbeltPolicy{Workspace: "/Users/ada/../eve"}, wantErr: "not absolute and clean"},
	{name: "bad port", policy: seatbeltPolicy{Workspace: "/w", ProxyPort: 70000}, wantErr: "out of range"},
}

// TestSeatbeltGolden compares each generated profile with
// testdata/seatbelt/<case>.sb. Run "go test ./sandbox -run Seatbelt
// -update" to accept changes; in CI a missing or stale file fails.
func TestSeatbeltGolden(t *testing.T) {
	t.Parallel()
	if *update && testenv.InCI() {
		t.Fatal("-update is refused in CI: golden files change only by a reviewed commit")
	}
	for _, c := range seatbeltCases {
		t.Run(c.name, func(t *testing.T) {
			got, err := seatbeltProfile(&c.policy)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want one that says %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "seatbelt", c.name+".sb")
			want, rerr := os.ReadFile(path)
			switch {
			case *update || (os.IsNotExist(rerr) && !testenv.InCI()):
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			case rerr != nil:
				t.Fatalf("%v (run go test ./sandbox -run Seatbelt -update and commit the file)", rerr)
			}
			if !bytes.Equal([]byte(got), want) {
				t.Errorf("%s is stale (run go test ./sandbox -run Seatbelt -update after checking the change); got:\n%s", path, got)
			}
		})
	}
}

// TestSeatbeltNoInjection reads each profile back with an SBPL reader and
// checks that hostile paths changed nothing but the strings: the profile
// has the same forms, with the same heads, as the profile of a policy
// whose paths are plain, and every string decodes to the path (or the
// regex of the glob) it came from.
func TestSeatbeltNoInjection(t *testing.T) {
	t.Parallel()
	for _, c := range seatbeltCases {
		if c.wantErr != "" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			got, err := seatbeltProfile(&c.policy)
			if err != nil {
				t.Fatal(err)
			}
			forms, strs, err := readSBPL(got)
			if err != nil {
				t.Fatalf("the profile does not read back: %v\n%s", err, got)
			}
			n := 0
			plain := c.policy
			// rename gives each path a plain name; a glob of a deny list
			// stays a glob.
			rename := func(list []string, globs bool) []string {
				out := make([]string, len(list))
				for i, p := range list {
					n++
					out[i] = fmt.Sprintf("/plain/%d", n)
					if globs && hasMeta(p) {
						out[i] += "/*"
					}
				}
				return out
			}
			plain.Workspace = rename([]string{plain.Workspace}, false)[0]
			plain.Writable, plain.HideHome = rename(plain.Writable, false), rename(plain.HideHome, false)
			plain.ReadOnly, plain.Sockets = rename(plain.ReadOnly, false), rename(plain.Sockets, false)
			plain.DenyRead, plain.DenyWrite = rename(plain.DenyRead, true), rename(plain.DenyWrite, true)
			want, err := seatbeltProfile(&plain)
			if err != nil {
				t.Fatal(err)
			}
			wantForms, _, err := readSBPL(want)
			if err != nil {
				t.Fatal(err)
			}
			// Ancestor rules depend on how deep the paths are: compare the
			// rules before them, and that the rest are all the same kind.
			cut := func(fs []string) ([]string, []string) {
				i := slices.Index(fs, "deny file-write-unlink literal")
				if i < 0 {
					return fs, nil
				}
				return fs[:i], fs[i:]
			}
			head, tail := cut(forms)
			wantHead, _ := cut(wantForms)
			if !slices.Equal(head, wantHead) {
				t.Errorf("the forms differ from those of plain paths:\n got %q\nwant %q", head, wantHead)
			}
			for _, f := range tail {
				if f != "deny file-write-unlink literal" {
					t.Errorf("unexpected form after the ancestor rules: %q", f)
				}
			}
			for _, p := range slices.Concat([]string{c.policy.Workspace}, c.policy.Writable, c.policy.ReadOnly,
				c.policy.HideHome, c.policy.Sockets) {
				if !slices.Contains(strs, p) {
					t.Errorf("no string in the profile reads back as the path %q", p)
				}
			}
			for _, p := range slices.Concat(c.policy.DenyRead, c.policy.DenyWrite) {
				s := p
				if hasMeta(p) {
					s, _ = globRegex(p)
				}
				if !slices.Contains(strs, s) {
					t.Errorf("no string in the profile reads back as the pattern %q", s)
				}
			}
		})
	}
}

// readSBPL reads a profile the way SBPL's reader does, as far as the
// generator writes it: comments from ';' to the end of the line, strings
// in which a backslash escapes the next character, symbols and lists. It
// returns each top-level form as "head arg1-head arg2-head..." (the head
// symbol of the form, then of each list argument, then of each list in
// those) and every string it read.
func readSBPL(src string) (forms, strs []string, err error) {
	i := 0
	var read func(depth int) (string, error)
	read = func(depth int) (string, error) {
		// at '('; returns a summary of the heads
		i++
		var parts []string
		for {
			for i < len(src) && strings.ContainsRune(" \t\n", rune(src[i])) {
				i++
			}
			if i >= len(src) {
				return "", fmt.Errorf("unterminated list")
			}
			switch src[i] {
			case ')':
				i++
				return strings.Join(parts, " "), nil
			case ';':
				return "", fmt.Errorf("comment inside a form at %d", i)
			case '(':
				sub, err := read(depth + 1)
				if err != nil {
					return "", err
				}
				if depth < 2 {
					h, _, _ := strings.Cut(sub, " ")
					parts = append(parts, h)
				}
			case '"':
				i++
				var b strings.Builder
				for {
					if i >= len(src) {
						return "", fmt.Errorf("unterminated string")
					}
					c := src[i]
					i++
					if c == '"' {
						break
					}
					if c == '\\' {
						if i >= len(src) {
							return "", fmt.Errorf("unterminated escape")
						}
						c = src[i]
						i++
					}
					b.WriteByte(c)
				}
				strs = append(strs, b.String())
			default:
				start := i
				for i < len(src) && !strings.ContainsRune(" \t\n()\";", rune(src[i])) {
					i++
				}
				if depth == 0 || len(parts) == 0 {
					parts = append(parts, src[start:i]) // below the top, only heads count
				}
			}
		}
	}
	for i < len(src) {
		switch c := src[i]; {
		case c == ';':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case strings.ContainsRune(" \t\n", rune(c)):
			i++
		case c == '(':
			f, err := read(0)
			if err != nil {
				return nil, nil, err
			}
			forms = append(forms, f)
		default:
			return nil, nil, fmt.Errorf("stray %q at top level, offset %d", c, i)
		}
	}
	return forms, strs, nil
}
