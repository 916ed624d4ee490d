package policy

import (
	"fmt"
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

// TestAuditLogRotationKeepsOthersRows: one principal's flood of entries
// rotates the log many times; another principal's row stays (in
// <log>.1), the flooder's older rows go, and <log>.1 stays within its
// bound (acc3, attack 12).
func TestAuditLogRotationKeepsOthersRows(t *testing.T) {
	p := filepath.Join(t.TempDir(), "approvals.jsonl")
	const max = 4000
	l, err := OpenLog(p, max)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Write(&Entry{Principal: "bob", Kind: KindShell, Command: "rm -rf /bob-evidence", Decision: "deny", By: "rule"}); err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		if err := l.Write(&Entry{Principal: "alice", Kind: KindShell, Command: fmt.Sprintf("rm -rf /alice-%d", i), Decision: "deny", By: "rule"}); err != nil {
			t.Fatal(err)
		}
	}
	es, _, err := ReadLog(p)
	if err != nil {
		t.Fatal(err)
	}
	bob, alice := 0, 0
	for _, e := range es {
		switch e.Principal {
		case "bob":
			bob++
		case "alice":
			alice++
		}
	}
	if bob != 1 {
		t.Errorf("bob's row is gone after alice's flood (%d rows left, %d alice's)", len(es), alice)
	}
	if alice == 0 || alice >= 500 || es[len(es)-1].Command != "rm -rf /alice-499" {
		t.Errorf("alice's rows: %d, last %+v", alice, es[len(es)-1])
	}
	if fi, err := os.Stat(p + ".1"); err != nil || fi.Size() > max+2*max/4 || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s.1: %v %v", p, fi, err)
	}
	// Past its own share, bob's older rows go (a principal's rows are
	// dropped by its own volume).
	for i := range 200 {
		l.Write(&Entry{Principal: "bob", Kind: KindShell, Command: fmt.Sprintf("rm -rf /bob-%d", i), Decision: "deny", By: "rule"})
	}
	for i := range 200 {
		l.Write(&Entry{Principal: "alice", Kind: KindShell, Command: fmt.Sprintf("rm -rf /alice-x%d", i), Decision: "deny", By: "rule"})
	}
	es, _, _ = ReadLog(p)
	for _, e := range es {
		if e.Command == "rm -rf /bob-evidence" {
			t.Errorf("bob's first row outlived %d bytes of his own rows", 200*100)
		}
	}
	if matches, _ := filepath.Glob(p + ".rotating-*"); len(matches) != 0 {
		t.Errorf("left behind: %v", matches)
	}
}
