package hostproc

import (
	"path/filepath"
	"strings"
)

// interpreters are programs whose first operand is a script they run
// (python server.py, node index.js, bash x.sh). By their base name, with
// any version suffix (python3.12, node22) cut off.
var interpreters = map[string]bool{
	"python": true, "pypy": true, "node": true, "nodejs": true, "deno": true, "bun": true, "tsx": true, "ts-node": true,
	"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "fish": true,
	"ruby": true, "perl": true, "php": true, "lua": true, "Rscript": true, "osascript": true,
}

// codeOptions are the options of interpreters whose value is a file they
// load before the script: node's --require/-r, --import and --loader,
// bash's --rcfile and --init-file.
var codeOptions = map[string]bool{
	"-r": true, "--require": true, "--import": true, "--loader": true, "--experimental-loader": true,
	"--rcfile": true, "--init-file": true, "--env-file": true,
}

// noScript are the options after which an interpreter runs no script from
// its operands: python -c CODE and -m MODULE, node -e/-p, sh -c.
var noScript = map[string]bool{"-c": true, "-m": true, "-e": true, "--eval": true, "-p": true, "--print": true}

// Scripts returns the files that the program (cmd.Path, with arguments
// args, its argv[0] first) runs or loads because its arguments name them:
// for an interpreter, its script (the first operand) and the values of
// its code-loading options. A relative one is relative to dir. Other
// programs' arguments are data (a folder that server-filesystem serves),
// and none is returned for them.
func Scripts(path string, args []string, dir string) []string {
	if !isInterpreter(filepath.Base(path)) && (len(args) == 0 || !isInterpreter(filepath.Base(args[0]))) {
		return nil
	}
	var out []string
	add := func(p string) {
		if p == "" || p == "-" {
			return
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		out = append(out, p)
	}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if i+1 < len(args) {
				add(args[i+1])
			}
			break
		}
		if k, v, ok := strings.Cut(a, "="); ok && codeOptions[k] {
			add(v)
			continue
		}
		if codeOptions[a] && i+1 < len(args) {
			add(args[i+1])
			i++
			continue
		}
		if noScript[a] {
			break
		}
		if strings.HasPrefix(a, "-") {
			continue
		}
		add(a)
		break
	}
	return out
}

// isInterpreter reports whether a program's base name is one of
// interpreters, version suffix aside.
func isInterpreter(base string) bool {
	base = strings.TrimSuffix(base, ".exe")
	return interpreters[strings.TrimRight(base, "0123456789.")]
}
