package policy

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
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

// TestRedteam4ExpandableWordBounded: kernel code makes the command; a
// long globbed word under a deny rule is decided at once (it asks), not
// with work that grows with its length squared.
func TestRedteam4ExpandableWordBounded(t *testing.T) {
	rs, err := Parse("rt4b.policy", []byte("deny shell cat /etc/*a*b*c*d*\nallow shell cat *\n"))
	if err != nil {
		t.Fatal(err)
	}
	word := "/" + strings.Repeat("?*", 200000)
	start := time.Now()
	d := Decide(&Call{Kind: KindShell, Command: "cat " + word}, rs)
	if d.Action == Allow {
		t.Errorf("a long glob under a deny rule: %v", d.Action)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("deciding took %v", el)
	}
}

// TestRedteam4DenyProgramSpellings: a deny rule names a program as typed
// (rm); the same program runs by path, behind a wrapper that runs the
// rest of its words, and as the script of sh -c or eval. Each must be
// refused or asked about under "deny shell rm -rf /" beside "allow shell
// *"; commands that only mention the words stay allowed.
func TestRedteam4DenyProgramSpellings(t *testing.T) {
	rs, err := Parse("rt4w.policy", []byte("deny shell rm -rf /\nallow shell *\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{
		`rm -rf /`, `/bin/rm -rf /`, `/usr/bin/rm -rf /`, `./../../bin/rm -rf /`,
		`command rm -rf /`, `builtin command rm -rf /`, `env rm -rf /`, `env -i FOO=1 rm -rf /`, `exec rm -rf /`,
		`nohup rm -rf /`, `nice -n 5 rm -rf /`, `timeout 5 rm -rf /`, `sudo -u root rm -rf /`, `xargs rm -rf / </dev/null`,
		`busybox rm -rf /`, `env /bin/rm -rf /`, `bash -c 'rm -rf /'`, `sh -c "rm -rf //"`, `bash -lc 'cd /tmp; rm -rf /'`,
		`eval 'rm -rf /'`, `eval rm -rf /`, `sh -c 'sh -c "env rm -rf /"'`, `zsh -c 'rm -rf /'`,
		`su -c 'rm -rf /'`, `flock /tmp/l -c 'rm -rf /'`, `script -qc 'rm -rf /' /dev/null`, `watch -n1 'rm -rf /'`, `sudo sh -c 'rm -rf /'`,
	} {
		if d := Decide(&Call{Kind: KindShell, Command: c}, rs); d.Action == Allow {
			t.Errorf("%q: allowed (%s), want deny or ask", c, d.Why())
		}
	}
	for _, c := range []string{`echo rm -rf /`, `ls /`, `env`, `rm -rf /tmp/x`, `bash -c 'ls /'`, `/bin/ls -la /`, `grep -r rm /etc`} {
		if d := Decide(&Call{Kind: KindShell, Command: c}, rs); d.Action != Allow {
			t.Errorf("%q: %v (%s), want allow", c, d.Action, d.Why())
		}
	}
}
