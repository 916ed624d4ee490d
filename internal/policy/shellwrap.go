package policy

import (
	"path"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// A deny or ask rule names a program as the user types it ("rm"), but the
// same program runs under other spellings: by path (/bin/rm,
// ./../../bin/rm), behind a wrapper that runs the rest of its words as a
// command (env, command, exec, nohup, nice -n 5, timeout 5, sudo -u x,
// xargs), and as the script of a shell's -c or of eval. derived lists
// those commands as well, for deny and ask rules only (shellCall.all):
// allow rules still see the command as written, so deriving can only
// refuse or ask more, never allow more. A wrapper's options are not read:
// every one of its first words is tried as the program.

// wrappers run the words after their own options as a command.
var wrappers = []string{"env", "command", "builtin", "exec", "nohup", "nice", "ionice", "chrt", "taskset", "timeout",
	"sudo", "doas", "su", "stdbuf", "setsid", "xargs", "strace", "ltrace", "time", "busybox", "unbuffer", "flock",
	"watch", "script", "chroot", "unshare", "nsenter", "firejail", "torsocks", "proxychains", "proxychains4", "caffeinate", "systemd-run", "runuser"}

// scriptShells take a script with -c.
var scriptShells = append(append([]string{}, shells...), otherShells...)

const (
	maxWrapSkip = 8       // a wrapper's words tried as the program
	maxDerived  = 256     // commands derived from one command line
	maxDepth    = 4       // wrappers and scripts within each other
	maxScript   = 1 << 16 // bytes of a -c or eval script that are read
)

// derived returns the commands that all's commands run under other
// spellings (see above), up to maxDerived.
func derived(all []simpleCmd) []simpleCmd {
	var out []simpleCmd
	var walk func(c simpleCmd, depth int)
	walk = func(c simpleCmd, depth int) {
		if depth > maxDepth || len(out) >= maxDerived || len(c.words) == 0 {
			return
		}
		add := func(d simpleCmd) {
			if len(out) < maxDerived {
				out = append(out, d)
				walk(d, depth+1)
			}
		}
		w0 := c.words[0]
		if w0.opaque || w0.expandable {
			return
		}
		prog := path.Base(w0.text)
		if prog != w0.text && strings.Contains(w0.text, "/") {
			d := simpleCmd{words: slices.Clone(c.words)}
			d.words[0] = shellWord{text: prog}
			add(d)
		}
		switch {
		case slices.Contains(wrappers, prog):
			for k := 1; k < len(c.words) && k <= maxWrapSkip; k++ {
				add(simpleCmd{words: c.words[k:]})
				// su -c 'CMD', flock F -c 'CMD', script -c 'CMD',
				// watch 'CMD': a word with a space may be a script.
				if w := c.words[k]; !w.opaque && !w.expandable && strings.ContainsAny(w.text, " \t\n;|&") {
					for _, d := range scriptCmds(w.text) {
						add(d)
					}
				}
			}
		case prog == "eval":
			if s, ok := joined(c.words[1:]); ok {
				for _, d := range scriptCmds(s) {
					add(d)
				}
			}
		case slices.Contains(scriptShells, prog):
			for k := 1; k+1 < len(c.words); k++ {
				w := c.words[k]
				if w.opaque || w.text == "--" {
					break
				}
				if strings.HasPrefix(w.text, "-") && !strings.HasPrefix(w.text, "--") && strings.Contains(w.text, "c") {
					if s := c.words[k+1]; !s.opaque && !s.expandable {
						for _, d := range scriptCmds(s.text) {
							add(d)
						}
					}
					break
				}
			}
		}
	}
	for _, c := range all {
		walk(c, 0)
	}
	return out
}

// joined is eval's script: its words joined by spaces, when all are known.
func joined(ws []shellWord) (string, bool) {
	var parts []string
	for _, w := range ws {
		if w.opaque || w.expandable {
			return "", false
		}
		parts = append(parts, w.text)
	}
	return strings.Join(parts, " "), len(parts) > 0
}

// scriptCmds returns every simple command of a script, as bash reads it;
// a script that does not parse gives a command of one unknown word,
// which every deny and ask rule may match.
func scriptCmds(s string) []simpleCmd {
	if len(s) > maxScript {
		return []simpleCmd{{words: []shellWord{{opaque: true}}}}
	}
	r := read(s, syntax.LangBash)
	if !r.parsed {
		return []simpleCmd{{words: []shellWord{{opaque: true}}}}
	}
	return r.all
}
