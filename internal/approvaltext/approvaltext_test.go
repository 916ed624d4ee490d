package approvaltext_test

import (
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/approvaltext"
)

// TestCommandShowsWhatRuns attacks the approval prompt with commands whose
// first line would scroll or be drawn out of view: what is shown names
// every line that runs, or says how many are not shown, and keeps the
// first and the last; it stays small whatever the command's size.
func TestCommandShowsWhatRuns(t *testing.T) {
	huge := strings.Repeat("x", 16<<20)
	for _, tc := range []struct {
		name, cmd string
		want      []string // each must appear, in this order
		not       []string // none may appear
	}{
		{"one line", "ls -la", []string{"ls -la"}, []string{"[", ":"}},
		{"120 blank lines", "touch /tmp/pwned" + strings.Repeat("\n", 121) + "ls",
			[]string{"1: touch /tmp/pwned\n", "2-121: (120 blank lines)\n", "122: ls\n", "[122 lines, 139 bytes]"}, nil},
		{"blank lines of spaces and tabs", "rm -rf ~/x\n" + strings.Repeat("  \t \n", 200) + "echo hi",
			[]string{"1: rm -rf ~/x", "2-201: (200 blank lines)", "202: echo hi"}, nil},
		{"carriage return", "rm -rf ~/x\recho hi", []string{`rm -rf ~/x\recho hi`}, []string{"\r"}},
		{"ANSI clear line", "rm -rf ~/x\x1b[2K\x1b[1Gecho hi", []string{`rm -rf ~/x\x1b[2K\x1b[1Gecho hi`}, []string{"\x1b"}},
		{"line separators", "rm -rf ~/x\u2028echo hi\u0085ls", []string{`rm -rf ~/x\u2028echo hi\x85ls`}, []string{"\u2028", "\u0085"}},
		{"very long line", "rm -rf ~/x; " + huge + "; echo hi",
			[]string{"rm -rf ~/x; xxx", "[... 16776837 characters not shown ...]", "xxx; echo hi"}, nil},
		{"many lines", "rm -rf ~/x\n" + strings.Repeat(":\n", 100000) + "echo hi",
			[]string{"1: rm -rf ~/x\n", "[... lines 13-99990 not shown ...]", "100002: echo hi\n", "[100002 lines, 200018 bytes]"}, nil},
		{"many blank runs", "rm -rf ~/x" + strings.Repeat("\n\n\n:", 1000) + "\necho hi",
			[]string{"1: rm -rf ~/x\n", "2-3: (2 blank lines)\n", "not shown", "3002: echo hi\n"}, nil},
		{"bidi override", "echo \u202egnp.exe", []string{`echo \u202egnp.exe`}, []string{"\u202e"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := approvaltext.Command(tc.cmd)
			rest := got
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("shown:\n%s\nwant, in order, %q", got, w)
				}
				rest = rest[i+len(w):]
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("shown:\n%s\nholds %q", got, n)
				}
			}
			if len(got) > 16<<10 {
				t.Errorf("shown %d bytes; want a bounded summary", len(got))
			}
			if strings.Count(got, "\n") > 30 {
				t.Errorf("shown %d lines; want a bounded summary", strings.Count(got, "\n"))
			}
		})
	}
}

func TestArgs(t *testing.T) {
	if got, want := approvaltext.Args([]byte(`{"path":"a\u202eb","n":1}`)), "{\n  \"path\": \"a\\u202eb\",\n  \"n\": 1\n}"; got != want {
		// JSON keeps \u202e escaped as the kernel sent it; a raw one is
		// escaped for the screen.
		t.Errorf("Args = %q, want %q", got, want)
	}
	if got := approvaltext.Args([]byte("{\"p\":\"a\u202eb\"}")); !strings.Contains(got, `a\u202eb`) || strings.Contains(got, "\u202e") {
		t.Errorf("Args = %q: the override is not escaped", got)
	}
	big := []byte(`{"v":"` + strings.Repeat("x", 16<<20) + `","w":"end"}`)
	got := approvaltext.Args(big)
	for _, w := range []string{`{"v":"xxx`, "characters not shown", `","w":"end"}`, "[16777234 bytes of JSON, shown in part]"} {
		if !strings.Contains(got, w) {
			t.Errorf("Args of 16 MiB = %.300q...; want %q in it", got, w)
		}
	}
	if len(got) > 4<<10 {
		t.Errorf("Args of 16 MiB shows %d bytes", len(got))
	}
}

func TestFacts(t *testing.T) {
	if got := approvaltext.Facts("", []string{"x"}, ""); got != nil {
		t.Errorf("Facts without a reason = %q", got)
	}
	got := strings.Join(approvaltext.Facts("ask rule 1a2b (ask shell git push *) at /p:3", []string{"shell echo '\u202e'", "shell " + strings.Repeat("x", 1000)}, ""), "\n")
	for _, w := range []string{"why: ask rule 1a2b", "remember as: shell echo '\\u202e'", "characters not shown"} {
		if !strings.Contains(got, w) {
			t.Errorf("Facts = %q; want %q in it", got, w)
		}
	}
	if strings.Contains(got, "\u202e") {
		t.Errorf("Facts = %q: not escaped", got)
	}
	got = strings.Join(approvaltext.Facts("no rule matched", nil, "the command has $(...)"), "\n")
	if !strings.Contains(got, "remember: only once: the command has $(...)") {
		t.Errorf("Facts = %q", got)
	}
}
