package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPrincipalRules: a rule that names a principal applies to that
// principal's calls alone; one without applies to every caller; a
// remembered rule (Cover) takes the call's principal; a malformed name
// is refused, and a rule's match cannot smuggle one in.
func TestPrincipalRules(t *testing.T) {
	rs, err := Parse("p", []byte("allow principal=bob shell echo *\ndeny principal=alice tool s.t\nallow tool s.*\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		call *Call
		want Action
	}{
		{&Call{Kind: KindShell, Command: "echo hi", Principal: "bob"}, Allow},
		{&Call{Kind: KindShell, Command: "echo hi", Principal: "alice"}, None},
		{&Call{Kind: KindShell, Command: "echo hi"}, None},
		{&Call{Kind: KindTool, Server: "s", Tool: "t", Args: []byte("{}"), Principal: "alice"}, Deny},
		{&Call{Kind: KindTool, Server: "s", Tool: "t", Args: []byte("{}"), Principal: "bob"}, Allow},
	} {
		if d := Decide(c.call, rs); d.Action != c.want {
			t.Errorf("%+v: %v, want %v", c.call, d.Action, c.want)
		}
	}
	if got := rs.All()[0].String(); got != "allow principal=bob shell echo *" {
		t.Errorf("String: %q", got)
	}
	rules, err := Cover(&Call{Kind: KindShell, Command: "echo hi", Principal: "bob"}, Allow, []string{"shell echo *"})
	if err != nil || len(rules) != 1 || rules[0].String() != "allow principal=bob shell echo *" {
		t.Fatalf("Cover: %v %v", rules, err)
	}
	if rules[0].ID == ruleID("allow shell echo *") {
		t.Error("a principal's rule has the ID of the rule for everyone")
	}
	for _, bad := range []string{"allow principal= shell x", "allow principal=a/b shell x", "allow principal=" + strings.Repeat("a", 65) + " shell x"} {
		if _, err := Parse("p", []byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	// Another principal's name in the remembered match part.
	if _, err := Cover(&Call{Kind: KindShell, Command: "echo hi", Principal: "alice"}, Allow, []string{"principal=bob shell echo *"}); err == nil {
		t.Error("Cover took a principal from the match part")
	}
	// Written to a file and read back, it keeps its principal.
	f, err := Open(filepath.Join(t.TempDir(), "p.policy"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Append("by bob", rules[0].String()); err != nil {
		t.Fatal(err)
	}
	back, _ := f.Rules()
	if all := back.All(); len(all) != 1 || all[0].Principal != "bob" {
		t.Errorf("read back: %v", all)
	}
	data, _ := os.ReadFile(f.Path())
	if !strings.Contains(string(data), "allow principal=bob shell echo *") {
		t.Errorf("file: %s", data)
	}
}
