package policy

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// BypassForms are commands that start with an allowed prefix ("git status",
// under the rule "allow shell git status *") and yet run something else:
// here, they create the file "pwned". Each is run under real shells to
// show that it is a bypass there, and must not be allowed by the policy.
var bypassForms = []struct{ name, cmd string }{
	{"semicolon", "git status; touch pwned"},
	{"semicolon without spaces", "git status;touch pwned"},
	{"and", "git status && touch pwned"},
	{"or", "git status --bad || touch pwned"},
	{"pipe", "git status | touch pwned"},
	{"pipe of stderr", "git status |& touch pwned"},
	{"background", "git status & touch pwned"},
	{"newline", "git status\ntouch pwned"},
	{"comment then newline", "git status # harmless\ntouch pwned"},
	{"line continuation", "git status \\\n; touch pwned"},
	{"command substitution", "git status $(touch pwned)"},
	{"backquotes", "git status `touch pwned`"},
	{"substitution in double quotes", `git status "$(touch pwned)"`},
	{"substitution in a default value", "git status ${x:-$(touch pwned)}"},
	{"arithmetic then substitution", "git status $((1))$(touch pwned)"},
	{"process substitution in", "git status <(touch pwned)"},
	{"process substitution out", "git status >(touch pwned)"},
	{"redirect out", "git status > pwned"},
	{"redirect append", "git status >> pwned"},
	{"redirect stderr", "git status 2> pwned"},
	{"redirect both (bash), background (sh)", "git status &> pwned"},
	{"redirect clobber", "git status >| pwned"},
	{"redirect numbered descriptor", "git status 3> pwned"},
	{"redirect after a duplication", "git status 2>&1 > pwned"},
	{"here-document with substitution", "git status <<EOF\n$(touch pwned)\nEOF"},
	{"here-string with substitution", "git status <<< $(touch pwned)"},
	{"environment prefix", "PATH=./evil git status"},
	{"environment prefix of the shell", "BASH_ENV=./evil/env.sh bash -c 'git status'"},
	{"function shadows the program", "git() { touch pwned; }; git status"},
	{"alias shadows the program", "alias git='touch pwned #'\ngit status"},
	{"subshell", "(git status; touch pwned)"},
	{"block", "{ git status; touch pwned; }"},
	{"if", "if git status; then touch pwned; fi"},
	{"for", "for x in 1; do git status; touch pwned; done"},
	{"negation then or", "! git status || touch pwned"},
	{"eval", "eval 'git status; touch pwned'"},
	{"carriage return and newline", "git status\r\ntouch pwned"},
	{"script magic with a list", "%%bash\ngit status\ntouch pwned\n"},
	{"script magic in the background", "%%bash --bg\ngit status; touch pwned\n"},
}

func TestShellBypassForms(t *testing.T) {
	rs, err := Parse("bypass.policy", []byte("allow shell git status *\n"))
	if err != nil {
		t.Fatal(err)
	}
	// The allowed forms are allowed (so that "not allowed" below means
	// something), and create nothing.
	for _, ok := range []string{"git status", "git status --short", "'git' status", "git status 2>/dev/null", "git status >/dev/null 2>&1", "%%bash\ngit status\n"} {
		if d := Decide(&Call{Kind: KindShell, Command: ok}, rs); d.Action != Allow {
			t.Errorf("%q: %s; want it allowed", ok, d.Why())
		}
	}
	shells := map[string]string{}
	if runtime.GOOS != "windows" {
		for _, sh := range []string{"bash", "sh"} {
			if p, err := exec.LookPath(sh); err == nil {
				shells[sh] = p
			}
		}
	}
	for _, f := range bypassForms {
		t.Run(f.name, func(t *testing.T) {
			d := Decide(&Call{Kind: KindShell, Command: f.cmd}, rs)
			if d.Action == Allow {
				t.Errorf("%q is allowed (%s)", f.cmd, d.Why())
			}
			t.Logf("%q: %s", f.cmd, d.Why())
			if len(shells) == 0 {
				return
			}
			// A real shell runs something other than git status.
			ran := []string{}
			for name, sh := range shells {
				if bypassRuns(t, sh, f.cmd) {
					ran = append(ran, name)
				}
			}
			if len(ran) == 0 {
				t.Errorf("%q creates nothing under bash or sh: not a bypass form", f.cmd)
			}
		})
	}
}

// bypassRuns runs cmd under sh in a fresh folder where git is a harmless
// script (exiting 1 for --bad), as IPython runs it (sh -c), and reports
// whether "pwned" appeared. A script magic's body is run as a script.
func bypassRuns(t *testing.T, sh, cmd string) bool {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	evil := filepath.Join(dir, "evil")
	os.Mkdir(bin, 0o755)
	os.Mkdir(evil, 0o755)
	os.WriteFile(filepath.Join(bin, "git"), []byte("#!/bin/sh\nfor a; do [ \"$a\" = --bad ] && exit 1; done\nexit 0\n"), 0o755)
	os.WriteFile(filepath.Join(evil, "git"), []byte("#!/bin/sh\n/usr/bin/touch pwned\n"), 0o755)
	os.WriteFile(filepath.Join(evil, "env.sh"), []byte("/usr/bin/touch pwned\n"), 0o644)
	if strings.HasPrefix(cmd, "%%") {
		_, body, _ := strings.Cut(cmd, "\n")
		cmd = body
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, sh, "-c", cmd)
	c.Dir = dir
	c.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=" + dir}
	// Every process of the command (a background job, a process
	// substitution) inherits fd 3, the write end of a pipe: the read end
	// sees its end once the last of them has exited.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c.ExtraFiles = []*os.File{w}
	c.Run()
	w.Close()
	r.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, r); err != nil {
		t.Errorf("%q: a process of it outlived 10 s: %v", cmd, err)
	}
	_, err = os.Stat(filepath.Join(dir, "pwned"))
	return err == nil
}
