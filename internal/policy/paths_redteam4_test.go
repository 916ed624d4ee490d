package policy

import (
	"encoding/json"
	"testing"
)

// TestRedteam4DenySpellings: more spellings of a denied path than the
// ones issue 34.7 shows, in tool arguments and shell words. Each names
// /etc/passwd (or /root/.ssh/id_rsa) to the program that gets it on
// Linux; a deny rule refuses it, and an ask rule asks.
func TestRedteam4DenySpellings(t *testing.T) {
	rs, err := Parse("rt4.policy", []byte(`
deny  tool fs.* path=/etc/*
deny  tool fs.read_multiple_files paths=/etc/*
ask   tool fs.* path=/root/.ssh/*
allow tool fs.*
deny  shell cat /etc/*
allow shell cat *
`))
	if err != nil {
		t.Fatal(err)
	}
	tool := func(name string, args map[string]any) *Call {
		b, _ := json.Marshal(args)
		return &Call{Kind: KindTool, Server: "fs", Tool: name, Args: b}
	}
	for _, c := range []struct {
		name string
		call *Call
		want Action
	}{
		{"a .. after a link-free folder", tool("read_file", map[string]any{"path": "/usr/../etc/passwd"}), Deny},
		{"a trailing /. then ..", tool("read_file", map[string]any{"path": "/etc/x/./../passwd"}), Deny},
		{"many dots", tool("read_file", map[string]any{"path": "/etc/.../../passwd"}), Deny},
		{"an array of paths", tool("read_multiple_files", map[string]any{"paths": []string{"/work/a", "/etc/passwd"}}), Deny},
		{"an array of paths, spelt //", tool("read_multiple_files", map[string]any{"paths": []string{"/work/a", "//etc/passwd"}}), Deny},
		{"home's .ssh spelt //", tool("read_file", map[string]any{"path": "/root//.ssh/id_rsa"}), Ask},
		{"home's .ssh through ..", tool("read_file", map[string]any{"path": "/tmp/../root/.ssh/id_rsa"}), Ask},
		{"shell: a .. in a quoted word", &Call{Kind: KindShell, Command: `cat "/tmp/../etc/passwd"`}, Deny},
		{"shell: // in a double-quoted word", &Call{Kind: KindShell, Command: `cat "//etc/passwd"`}, Deny},
		{"shell: quotes inside the word", &Call{Kind: KindShell, Command: `cat /e"tc"/passwd`}, Deny},
		{"shell: a backslash inside the word", &Call{Kind: KindShell, Command: `cat /e\tc/passwd`}, Deny},
		{"shell: $'' quoting", &Call{Kind: KindShell, Command: `cat $'/etc/passwd'`}, Deny},
		{"shell: a ? glob", &Call{Kind: KindShell, Command: `cat /e?c/passwd`}, Deny},
		{"shell: a [] glob", &Call{Kind: KindShell, Command: `cat /[e]tc/passwd`}, Deny},
		{"shell: a brace expansion", &Call{Kind: KindShell, Command: `cat /{etc,x}/passwd`}, Deny},
		{"shell: a variable", &Call{Kind: KindShell, Command: `cat ${HOME}/../../etc/passwd`}, Deny},
		{"shell: a tilde", &Call{Kind: KindShell, Command: `cat ~/../../etc/passwd`}, Deny},
		{"shell: /proc/self/root", &Call{Kind: KindShell, Command: `cat /proc/self/root/etc/passwd`}, Deny},
		{"tool: /proc/self/root", tool("read_file", map[string]any{"path": "/proc/self/root/etc/passwd"}), Deny},
		{"tool: a tilde the server expands", tool("read_file", map[string]any{"path": "~/../../etc/passwd"}), Deny},
		{"tool: a file URL", tool("read_file", map[string]any{"path": "file:///etc/passwd"}), Deny},
		{"tool: a file URL, one slash", tool("read_file", map[string]any{"path": "file:/etc/passwd"}), Deny},
		{"tool: /proc/1/root twice", tool("read_file", map[string]any{"path": "/proc/1/root/proc/self/root//etc/passwd"}), Deny},
		{"tool: an array in an array", tool("read_multiple_files", map[string]any{"paths": []any{[]string{"/./etc/passwd"}}}), Deny},
		// What stays allowed: no false refusal of ordinary words.
		{"shell: a relative glob", &Call{Kind: KindShell, Command: `cat *.txt`}, Allow},
		{"shell: a glob elsewhere", &Call{Kind: KindShell, Command: `cat /work/*.txt /tmp/[ab].log`}, Allow},
		{"shell: a glob beside /etc", &Call{Kind: KindShell, Command: `cat /etcx/*`}, Allow},
		{"tool: an array elsewhere", tool("read_multiple_files", map[string]any{"paths": []string{"/work/a", "/work/b"}}), Allow},
		{"tool: /proc of itself", tool("read_file", map[string]any{"path": "/proc/self/status"}), Allow},
	} {
		d := Decide(c.call, rs)
		// Deny wanted: deny or ask (a person decides) hold; allow breaks.
		ok := d.Action == c.want || c.want == Deny && d.Action == Ask
		if !ok {
			t.Errorf("%s: %v (%s), want %v", c.name, d.Action, d.Why(), c.want)
		}
	}
}
