package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tablePolicy is the policy of TestRuleTable: one of each kind of rule.
const tablePolicy = `# a policy as people write it
allow tool github.search_*
allow tool github.get_issue repo=ipybox/*
ask   tool github.create_*
deny  tool github.delete_*
deny  tool fs.write_file path=/etc/*
allow tool fs.write_file path=/work/*
allow tool fs.read_* path="/work/*"
allow tool bank.transfer amount=0..100 currency=EUR
ask   tool bank.transfer amount=100.000000000000001..
deny  tool bank.transfer amount=..0
allow tool everything.echo args={"message":"hi","n":[1,2]}
allow tool everything.add a=1 b=[0-9]
allow tool "odd.server".tool*
allow tool *.ping
redact password *token*
allow shell git status
allow shell git log *
allow shell ls *.txt
allow shell echo '*'
allow shell make
allow shell cd build
ask   shell git push *
deny  shell rm *
deny  shell git push --force *
`

func TestRuleTable(t *testing.T) {
	rs, err := Parse("table.policy", []byte(tablePolicy))
	if err != nil {
		t.Fatal(err)
	}
	tool := func(server, tool, args string) *Call {
		return &Call{Kind: KindTool, Server: server, Tool: tool, Args: []byte(args)}
	}
	shell := func(cmd string) *Call { return &Call{Kind: KindShell, Command: cmd} }
	for _, tc := range []struct {
		call *Call
		want Action
		line int // the deciding rule's line; 0 for none
	}{
		{tool("github", "search_repositories", `{"q":"x"}`), Allow, 2},
		{tool("github", "search_code", ``), Allow, 2},
		{tool("github", "get_issue", `{"repo":"ipybox/ipybox","n":1}`), Allow, 3},
		{tool("github", "get_issue", `{"repo":"evil/ipybox"}`), None, 0},
		{tool("github", "get_issue", `{"n":1}`), None, 0},                             // missing argument
		{tool("github", "get_issue", `{"repo":"ipybox/x","repo":"evil/x"}`), None, 0}, // repeated key: not read
		{tool("github", "get_issue", `{"repo":"evil/x","repo":"ipybox/x"}`), None, 0}, // either order
		{tool("github", "get_issue", "{\"repo\":\"ipybox/\xff\"}"), None, 0},          // invalid UTF-8
		{tool("github", "create_issue", `{}`), Ask, 4},
		{tool("github", "delete_repo", `{}`), Deny, 5},                                          // deny
		{tool("fs", "write_file", `{"path":"/etc/passwd"}`), Deny, 6},                           // deny before allow
		{tool("fs", "write_file", `{"path":"/work/a/b"}`), Allow, 7},                            // * spans /
		{tool("fs", "write_file", `{"path":"/work/../etc/passwd"}`), Deny, 6},                   // .. is judged by the path it names
		{tool("fs", "write_file", `{"path":"/work/a/../../tmp/x"}`), None, 0},                   // ... and no allow rule's glob holds for it
		{tool("fs", "write_file", `{"path":"/work/a/../b"}`), None, 0},                          // ... even inside
		{tool("fs", "write_file", `{"path":"/etc/x","path":"/work/x"}`), Deny, 6},               // repeated key: the deny may match
		{tool("fs", "read_file", `{"path":"/work/*"}`), Allow, 8},                               // quoted * is literal
		{tool("fs", "read_file", `{"path":"/work/a"}`), None, 0},                                // ... so it matches nothing else
		{tool("bank", "transfer", `{"amount":100,"currency":"EUR"}`), Allow, 9},                 // range, inclusive
		{tool("bank", "transfer", `{"amount":1e2,"currency":"EUR"}`), Allow, 9},                 // exponent
		{tool("bank", "transfer", `{"amount":100.000000000000001,"currency":"EUR"}`), Ask, 10},  // exact decimals, no float rounding
		{tool("bank", "transfer", `{"amount":100.0000000000000001,"currency":"EUR"}`), None, 0}, // above 100, below the ask bound
		{tool("bank", "transfer", `{"amount":"50","currency":"EUR"}`), None, 0},                 // a string is not a number
		{tool("bank", "transfer", `{"amount":0,"currency":"EUR"}`), Deny, 11},                   // deny ..0 beats allow 0..100
		{tool("bank", "transfer", `{"amount":-0.0,"currency":"EUR"}`), Deny, 11},
		{tool("bank", "transfer", `{"amount":5,"currency":"USD"}`), None, 0},
		{tool("bank", "transfer", `{"amount":1e999999999,"currency":"EUR"}`), Ask, 10}, // huge exponent: cheap, exact
		{tool("everything", "echo", `{"n":[1,2],"message":"hi"}`), Allow, 12},          // key order aside
		{tool("everything", "echo", `{"message":"hi","n":[1,2],"x":0}`), None, 0},      // one more argument
		{tool("everything", "echo", `{"message":"hi","n":[1,2.0]}`), None, 0},          // 2.0 is not 2 as text
		{tool("everything", "echo", `{"message":"hi"}`), None, 0},
		{tool("everything", "add", `{"a":1,"b":7}`), Allow, 13}, // numbers by their JSON text
		{tool("everything", "add", `{"a":1,"b":17}`), None, 0},
		{tool("everything", "add", `{"a":"1","b":7}`), Allow, 13}, // "1" and 1 have the same text for a glob
		{tool("odd.server", "tool_x", `{}`), Allow, 14},
		{tool("odd", "server.tool_x", `{}`), None, 0},
		{tool("anything", "ping", `{}`), Allow, 15},
		{tool("github", "ping", `{}`), Allow, 15},

		{shell("git status"), Allow, 17},
		{shell("git  status  "), Allow, 17},
		{shell("'git' \"status\""), Allow, 17}, // quotes removed as the shell does
		{shell("git status --short"), None, 0},
		{shell("git log"), Allow, 18}, // a trailing * is any further words, none too
		{shell("git log --oneline -5"), Allow, 18},
		{shell("git status && git log -1"), Allow, 17}, // each command of a list is allowed
		{shell("git status; make"), Allow, 17},
		{shell("cd build && make"), Allow, 22},
		{shell("git status | head"), None, 0}, // head is not allowed
		{shell("ls *.txt"), Allow, 19},
		{shell("ls a.txt"), Allow, 19},
		{shell("ls '*.txt'"), Allow, 19}, // the literal name matches the glob
		{shell("ls *"), None, 0},         // a wider glob is not the rule's glob
		{shell("ls *.tx?"), None, 0},
		{shell("echo '*'"), Allow, 20},
		{shell("echo *"), None, 0}, // the shell would expand it
		{shell("echo x"), None, 0},
		{shell("git push origin main"), Ask, 23},
		{shell("git push --force origin main"), Deny, 25},
		{shell("git status; git push --force"), Deny, 25},
		{shell("rm -rf ~"), Deny, 24},
		{shell("echo $(rm -rf ~)"), Deny, 24}, // found inside the substitution
		{shell("$(echo rm) -rf ~"), Deny, 24}, // the program is known only when it runs
		{shell("git $SUB --force"), Deny, 25}, // $SUB may be push
		{shell("git status $X"), None, 0},     // not allowed: $X is unknown; no deny matches
		{shell("%%bash\ngit status\n"), Allow, 17},
		{shell("%%bash --bg\ngit status\n"), None, 0},   // options of the magic
		{shell("%%bash --out x\nrm -rf ~\n"), Deny, 24}, // deny rules read the script anyway
		{shell("%%python3\nimport os\n"), None, 0},      // not a shell
		{shell("%%zsh\ngit status"), Deny, 24},          // a shell this policy does not read: every deny may match
	} {
		name := tc.call.Command
		if tc.call.Kind == KindTool {
			name = tc.call.Server + "." + tc.call.Tool + string(tc.call.Args)
		}
		t.Run(name, func(t *testing.T) {
			d := Decide(tc.call, rs)
			line := 0
			if len(d.Rules) > 0 {
				line = d.Rules[0].Line
			}
			if d.Action != tc.want || line != tc.line {
				t.Errorf("Decide = %v by line %d (%s), want %v by line %d", d.Action, line, d.Why(), tc.want, tc.line)
			}
		})
	}
}

// TestMalformedPolicy: every malformed line fails the whole policy with
// the file and the line.
func TestMalformedPolicy(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"permit tool a.b", "starts with allow, ask, deny or redact"},
		{"allow", "says nothing to match"},
		{"allow tool", "names SERVER.TOOL"},
		{"allow tool github", "want SERVER.TOOL"},
		{"allow tool .x", "want SERVER.TOOL"},
		{"allow widget a.b", "matches a tool or a shell command"},
		{"allow tool a.b path", "want ARGUMENT=PATTERN"},
		{"allow tool a.b p*=x", "no globs in a name"},
		{"allow tool a.b n=1..x", "is not a number"},
		{"allow tool a.b n=5..1", "empty"},
		{"allow tool a.b p=[a-", "malformed"},
		{`allow tool a.b p="x`, "unterminated"},
		{`allow tool a.b args={"a":1,"a":2}`, "without repeated keys"},
		{`allow tool a.b args=[1]`, "want a JSON object"},
		{`allow tool a.b x=1 args={}`, "goes without"},
		{"allow shell", "names a command"},
		{"allow shell git status; rm -rf ~", "one simple command"},
		{"allow shell git $(x)", "no meaning in a pattern"},
		{"allow shell FOO=1 git", "one simple command"},
		{"allow shell git >x", "one simple command"},
		{"allow shell 'git", "shell pattern"},
		{"redact", "needs argument names"},
		{"allow tool a.b p=\u202ex", "bidirectional"},
	} {
		t.Run(tc.line, func(t *testing.T) {
			_, err := Parse("/home/u/.config/ipybox/approvals.policy", []byte("# ok\nallow tool ok.ok\n\n"+tc.line+"\n"))
			if err == nil {
				t.Fatalf("parsed")
			}
			if !strings.HasPrefix(err.Error(), "/home/u/.config/ipybox/approvals.policy:4: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q; want it at line 4, saying %q", err, tc.want)
			}
		})
	}
}

// TestNarrowRules: a remembered rule matches the call it answered, and
// neither a call with other arguments nor another command.
func TestNarrowRules(t *testing.T) {
	for _, tc := range []struct {
		call   *Call
		others []*Call // none of these may match
	}{
		{&Call{Kind: KindTool, Server: "everything", Tool: "echo", Args: []byte(`{"message":"hi \u202e \"x\"","n":1.50}`)},
			[]*Call{
				{Kind: KindTool, Server: "everything", Tool: "echo", Args: []byte(`{"message":"hi \u202e \"x\"","n":1.5}`)},
				{Kind: KindTool, Server: "everything", Tool: "echo", Args: []byte(`{"message":"hi"}`)},
				{Kind: KindTool, Server: "everything", Tool: "echo2", Args: []byte(`{"message":"hi \u202e \"x\"","n":1.50}`)},
			}},
		{&Call{Kind: KindTool, Server: "my.server", Tool: "t*", Args: nil},
			[]*Call{{Kind: KindTool, Server: "my.server", Tool: "tx"}, {Kind: KindTool, Server: "myxserver", Tool: "t*"}}},
		{&Call{Kind: KindShell, Command: "git log --format='%h %s' -- a\\ b"},
			[]*Call{{Kind: KindShell, Command: "git log --format='%h %s' -- a b"}, {Kind: KindShell, Command: "git log"}}},
		{&Call{Kind: KindShell, Command: "ls *.txt '*.md' ~/x '~/y' a=b"},
			[]*Call{{Kind: KindShell, Command: "ls *.txt *.md ~/x '~/y' a=b"}, {Kind: KindShell, Command: "ls *.txt '*.md' '~/x' '~/y' a=b"}}},
		{&Call{Kind: KindShell, Command: "cd build && make -j4"},
			[]*Call{{Kind: KindShell, Command: "cd build && make -j8"}, {Kind: KindShell, Command: "cd build && rm -rf ~"}}},
		{&Call{Kind: KindShell, Command: "'A=1' x"},
			[]*Call{{Kind: KindShell, Command: "A=1 x"}}},
	} {
		t.Run(string(tc.call.Args)+tc.call.Command, func(t *testing.T) {
			ms, err := Narrow(tc.call)
			if err != nil {
				t.Fatal(err)
			}
			rules, err := Cover(tc.call, Allow, ms)
			if err != nil {
				t.Fatalf("narrow rules %q: %v", ms, err)
			}
			var text strings.Builder
			for _, r := range rules {
				text.WriteString(r.String() + "\n")
				if !isPrintable(r.String()) {
					t.Errorf("rule %q is not printable", r)
				}
			}
			rs, err := Parse("", []byte(text.String()))
			if err != nil {
				t.Fatalf("the rules do not parse back: %v\n%s", err, text.String())
			}
			if d := Decide(tc.call, rs); d.Action != Allow {
				t.Errorf("rules %q do not allow the call: %s", ms, d.Why())
			}
			for _, o := range tc.others {
				if d := Decide(o, rs); d.Action != None {
					t.Errorf("rules %q decide %s%s too: %s", ms, o.Args, o.Command, d.Why())
				}
			}
		})
	}
	for _, c := range []*Call{
		{Kind: KindShell, Command: "echo $(id)"},
		{Kind: KindShell, Command: "printf 'a\x01b'"},
		{Kind: KindTool, Server: "a", Tool: "b", Args: []byte(`{"a":1,"a":2}`)},
		{Kind: KindTool, Server: "a", Tool: "b", Args: []byte(`{"a":"` + strings.Repeat("x", 9000) + `"}`)},
	} {
		if ms, err := Narrow(c); err == nil {
			t.Errorf("Narrow(%s%s) = %q; want an error", c.Command, c.Args, ms)
		}
	}
	// A widened answer must still cover the call.
	c := &Call{Kind: KindShell, Command: "git log -1"}
	if _, err := Cover(c, Allow, []string{"shell git log *"}); err != nil {
		t.Errorf("a wider rule: %v", err)
	}
	if _, err := Cover(c, Allow, []string{"shell git status *"}); err == nil {
		t.Errorf("a rule that does not match the call was accepted")
	}
	if _, err := Cover(c, Allow, []string{"shell git log *\nallow shell *"}); err == nil {
		t.Errorf("a rule with a newline was accepted")
	}
}

// TestFileReloadAndRevoke: a revoke by another writer (another File on
// the same path, as `ipybox approvals revoke` is another process) reaches
// a File that is in use at its next decision.
func TestFileReloadAndRevoke(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "cfg", "approvals.policy")
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	call := &Call{Kind: KindTool, Server: "s", Tool: "t", Args: []byte(`{"x":1}`)}
	decide := func() Decision {
		rs, err := f.Rules()
		if err != nil {
			t.Fatal(err)
		}
		return Decide(call, rs)
	}
	if d := decide(); d.Action != None {
		t.Fatalf("empty policy: %s", d.Why())
	}
	ms, _ := Narrow(call)
	added, err := f.Append("by test", "allow "+ms[0])
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("created policy: %v %v", fi, err)
	}
	if d := decide(); d.Action != Allow || d.Rules[0].ID != added[0].ID {
		t.Fatalf("after append: %s", d.Why())
	}
	other, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Remove(added[0].ID); err != nil {
		t.Fatal(err)
	}
	if d := decide(); d.Action != None {
		t.Errorf("after revoke: %s", d.Why())
	}
	b, _ := os.ReadFile(p)
	if strings.Contains(string(b), RememberedMark) {
		t.Errorf("the remembered comment stayed:\n%s", b)
	}
	// An edit that breaks the file stops its rules from applying.
	os.WriteFile(p, []byte("allow tool s.t\nallow nonsense\n"), 0o600)
	if _, err := f.Rules(); err == nil || !strings.Contains(err.Error(), ":2:") {
		t.Errorf("broken file: %v", err)
	}
	if _, err := f.Append("", "allow tool a.b"); err == nil {
		t.Errorf("appended to a broken file")
	}
	if _, err := other.Remove("1"); err == nil {
		t.Errorf("removed from a broken file")
	}
}

// TestConcurrentAppends: processes that remember answers at once each
// keep theirs (the lock), and the file stays well formed.
func TestConcurrentAppends(t *testing.T) {
	p := filepath.Join(t.TempDir(), "p")
	const n = 20
	errs := make(chan error, n)
	for i := range n {
		go func() {
			f, err := Open(p)
			if err == nil {
				_, err = f.Append("", fmt.Sprintf("allow tool s.t%d", i))
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := f.Rules()
	if len(rs.All()) != n {
		t.Errorf("%d rules, want %d", len(rs.All()), n)
	}
}

func TestAuditLog(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log", "approvals.jsonl")
	l, err := OpenLog(p, 2000)
	if err != nil {
		t.Fatal(err)
	}
	args, note := RedactArgs([]byte(`{"user":"ada","password":"hunter2","nested":{"api_token":"t0k"},"url":"https://x/?key=SECRETVALUE"}`),
		[]string{"password", "*token*"}, func(s string) string { return strings.ReplaceAll(s, "SECRETVALUE", Redacted) })
	if note != "" {
		t.Fatal(note)
	}
	for _, leak := range []string{"hunter2", "t0k", "SECRETVALUE"} {
		if strings.Contains(string(args), leak) {
			t.Errorf("logged args %s hold %q", args, leak)
		}
	}
	for i := range 30 {
		if err := l.Write(&Entry{Kind: KindTool, Server: "s", Tool: fmt.Sprint(i), Args: args, Decision: "allow", By: "rule"}); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	es, skipped, err := ReadLog(p)
	if err != nil || skipped != 0 {
		t.Fatal(err, skipped)
	}
	if len(es) == 0 || len(es) >= 30 || es[len(es)-1].Tool != "29" {
		t.Errorf("%d entries after rotation, last %+v", len(es), es[len(es)-1])
	}
	for _, p := range []string{p, p + ".1"} {
		if fi, err := os.Stat(p); err != nil || fi.Size() > 2000 || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", p, fi, err)
		}
	}
	if _, note := RedactArgs([]byte(`{"a":"`+strings.Repeat("x", 70<<10)+`"}`), nil, nil); !strings.Contains(note, "not logged") {
		t.Errorf("long args: note %q", note)
	}
}

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		p, s string
		want bool
	}{
		{"*", "", true}, {"*", "a/b", true}, {"a*b", "a/x/b", true}, {"a?c", "abc", true}, {"a?c", "ac", false},
		{"[a-c]x", "bx", true}, {"[!a-c]x", "bx", false}, {"[^a-c]x", "dx", true}, {`\*`, "*", true}, {`\*`, "a", false},
		{"é?", "éé", true}, {"*a*a*a*a*a*b", strings.Repeat("a", 10000), false}, {"[", "[", false}, {"a]", "a]", true},
	} {
		if got := globMatch(tc.p, tc.s); got != tc.want {
			t.Errorf("globMatch(%q, %.20q) = %v", tc.p, tc.s, got)
		}
	}
}

// BenchmarkDecide1000Rules decides calls against a policy of 1,000 rules
// (tool rules with argument conditions, shell rules), none of which
// matches before the last: the design target is under 1 ms a decision.
func BenchmarkDecide1000Rules(b *testing.B) {
	var text strings.Builder
	for i := range 1000 {
		switch i % 4 {
		case 0:
			fmt.Fprintf(&text, "allow tool server%d.tool_* path=/work/%d/* n=0..%d\n", i, i, i)
		case 1:
			fmt.Fprintf(&text, "deny tool server%d.delete_* path=/etc/*\n", i)
		case 2:
			fmt.Fprintf(&text, "allow shell git log%d *\n", i)
		case 3:
			fmt.Fprintf(&text, "deny shell rm%d -rf *\n", i)
		}
	}
	text.WriteString("allow tool github.search_* q=*\nallow shell git status\n")
	p := filepath.Join(b.TempDir(), "p")
	os.WriteFile(p, []byte(text.String()), 0o600)
	f, err := Open(p)
	if err != nil {
		b.Fatal(err)
	}
	calls := []*Call{
		{Kind: KindTool, Server: "github", Tool: "search_code", Args: []byte(`{"q":"policy engine","page":2}`)},
		{Kind: KindShell, Command: "git status && git log998 --oneline"},
	}
	for _, c := range calls {
		rs, _ := f.Rules()
		if d := Decide(c, rs); d.Action != Allow {
			b.Fatalf("%s%s: %s", c.Args, c.Command, d.Why())
		}
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		rs, err := f.Rules() // a stat, as each real decision makes
		if err != nil {
			b.Fatal(err)
		}
		Decide(calls[i%2], rs)
	}
}
