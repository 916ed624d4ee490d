package policy

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestDenyEverySpellingOfAPath is the attack of issue 34.7: a deny or ask
// rule on a path glob is met by another spelling of the same path. Each
// spelling is tried against tool-argument rules and shell rules; allow
// rules must not let through what a deny rule refuses once cleaned.
func TestDenyEverySpellingOfAPath(t *testing.T) {
	rs, err := Parse("spell.policy", []byte(`
deny  tool fs.write_file path=/etc/*
deny  tool fs.remove path=/
ask   tool fs.read_file path=/root/.ssh/*
allow tool fs.* path=/work/*
deny  shell cat /etc/*
deny  shell rm -rf /
ask   shell cp /root/.ssh/* *
allow shell cat /work/*
allow shell cp *
`))
	if err != nil {
		t.Fatal(err)
	}
	tool := func(name, p string) *Call {
		args, _ := json.Marshal(map[string]string{"path": p})
		return &Call{Kind: KindTool, Server: "fs", Tool: name, Args: args}
	}
	shell := func(cmd string) *Call { return &Call{Kind: KindShell, Command: cmd} }
	etc := []string{
		"/etc/passwd",
		"//etc/passwd",
		"///etc//passwd",
		"/./etc/passwd",
		"/etc/./passwd",
		"/etc/passwd/",
		"/etc/passwd/.",
		"/x/../etc/passwd",
		"/work/../etc/passwd",
		"/work/./../etc/passwd",
		"/../etc/passwd",
		"//./x/..//etc/./passwd/",
		`\etc\passwd`,
		`/work\..\etc\passwd`,
		"../../../../../etc/passwd",
		"./../etc/passwd",
		"..",
		"file:///etc/passwd",
		"FILE:///etc/%70asswd",
		"file://localhost/etc/passwd",
		"file:/etc/passwd",
		"file:////etc/./passwd",
	}
	for _, p := range etc {
		d := Decide(tool("write_file", p), rs)
		if d.Action != Deny {
			t.Errorf("write_file path=%q: %v (%s), want deny", p, d.Action, d.Why())
		}
		d = Decide(shell("cat '"+p+"'"), rs)
		if d.Action != Deny && !climbs(p) && p != "./../etc/passwd" && !strings.HasPrefix(p, "file:") && !strings.HasPrefix(p, "FILE:") {
			t.Errorf("cat %q: %v (%s), want deny", p, d.Action, d.Why())
		}
	}
	for _, p := range []string{"/", "//", "/.", "/./", "/..", "/work/..", "/work/../", "///."} {
		if d := Decide(tool("remove", p), rs); d.Action != Deny {
			t.Errorf("remove path=%q: %v (%s), want deny", p, d.Action, d.Why())
		}
		if d := Decide(shell("rm -rf "+p), rs); d.Action != Deny {
			t.Errorf("rm -rf %s: %v (%s), want deny", p, d.Action, d.Why())
		}
	}
	for _, p := range []string{"/root/.ssh/id_rsa", "//root/.ssh/id_rsa", "/root/./.ssh/id_rsa", "/root//.ssh//id_rsa", "/work/../root/.ssh/id_rsa"} {
		if d := Decide(tool("read_file", p), rs); d.Action != Ask {
			t.Errorf("read_file path=%q: %v (%s), want ask", p, d.Action, d.Why())
		}
		if d := Decide(shell("cp "+p+" /work/k"), rs); d.Action != Ask {
			t.Errorf("cp %s: %v (%s), want ask", p, d.Action, d.Why())
		}
	}
	// What stays: an allow rule allows its text, but never by a .. that
	// leaves it; a clean deny rule does not refuse unrelated paths.
	for _, tc := range []struct {
		call *Call
		want Action
	}{
		{tool("read_file", "/work/a"), Allow},
		{tool("read_file", "/work//a/"), Allow},
		{tool("read_file", "/work/./a"), Allow},
		{tool("read_file", "/work/a/../b"), None},
		{tool("read_file", "/work/../tmp/x"), None},
		{tool("write_file", "/etcetera/x"), None},
		{tool("write_file", "/work/etc/passwd"), Allow},
		{tool("write_file", "work/etc/passwd"), None},
		{tool("write_file", "file://evil.example/etc/passwd"), None}, // another host's file
		{tool("read_file", "file:///work/a"), None},                  // allow rules see text
		{tool("read_file", "file:///root/.ssh/x"), Ask},
		{tool("remove", "/work/x"), Allow},
		{shell("cat /work/a"), Allow},
		{shell("cat /work//a"), Allow},
		{shell("cat /work/../etc/shadow"), Deny},
		{shell("cat /work/../tmp/x"), None},
		{shell("cat /work/a/../../tmp/x"), None},
		{shell("cat /etcetera"), None},
		{shell("rm -rf /work"), None},
		{shell("cp /work/a /work/b"), Allow},
	} {
		if d := Decide(tc.call, rs); d.Action != tc.want {
			t.Errorf("%+v: %v (%s), want %v", tc.call, d.Action, d.Why(), tc.want)
		}
	}
}

func TestPathForms(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"plain", nil},
		{"/etc/passwd", nil},
		{"//etc/passwd", []string{"/etc/passwd"}},
		{`a\..\b`, []string{"b"}},
		{`/a\b`, []string{"/a/b"}},
		{"https://x/y", []string{"https:/x/y"}},
		{"file:///a/../b", []string{"file:/b", "/a/../b", "/b"}},
	} {
		got := pathForms(tc.in)
		if len(got) != len(tc.want) {
			t.Errorf("pathForms(%q) = %q, want %q", tc.in, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("pathForms(%q) = %q, want %q", tc.in, got, tc.want)
			}
		}
	}
}
