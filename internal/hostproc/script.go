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

// valueOptions are the options whose value is the next argument, and not
// a script: python's -W and -X, the shells' -o and -O, node's -C and
// --conditions and the like, php's -d. Without them, the value passed for
// the script (python -W ignore /ws/srv.py ran /ws/srv.py unchecked).
var valueOptions = map[string]bool{
	"-W": true, "-X": true, "--check-hash-based-pycs": true,
	"-o": true, "-O": true, "+o": true, "+O": true,
	"-C": true, "--conditions": true, "--input-type": true, "--title": true, "--env-file-if-exists": true,
	"-d": true,
}

// includeOptions are perl's and ruby's -I DIR, a folder their code is
// loaded from (perl -I /ws -MEvil, ruby -I /ws -r evil).
var includeOptions = map[string]bool{"perl": true, "ruby": true}

// Scripts returns the files that the program (cmd.Path, with arguments
// args, its argv[0] first) runs or loads because its arguments name them:
// for an interpreter, its script (the first operand) and the values of
// its code-loading options. A relative one is relative to dir. Other
// programs' arguments are data (a folder that server-filesystem serves),
// and none is returned for them.
func Scripts(path string, args []string, dir string) []string {
	if rest := envArgs(path, args); len(rest) > 0 {
		// env [-i] [-u NAME] [-S STRING] [NAME=VALUE...] PROGRAM ARGS:
		// PROGRAM itself when a path names it (a bare name is looked up
		// in the cleaned PATH), and its scripts.
		var out []string
		if strings.ContainsRune(rest[0], '/') {
			out = append(out, abs(rest[0], dir))
		}
		return append(out, Scripts(rest[0], rest, dir)...)
	}
	if !isInterpreter(filepath.Base(path)) && (len(args) == 0 || !isInterpreter(filepath.Base(args[0]))) {
		return nil
	}
	include := includeOptions[strings.TrimRight(filepath.Base(path), "0123456789.")]
	var out []string
	add := func(p string) {
		if p == "" || p == "-" {
			return
		}
		out = append(out, abs(p, dir))
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
		if include && strings.HasPrefix(a, "-I") {
			if v := a[2:]; v != "" {
				add(v)
			} else if i+1 < len(args) {
				add(args[i+1])
				i++
			}
			continue
		}
		if valueOptions[a] {
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

// abs is p, relative to dir.
func abs(p, dir string) string {
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return p
}

// envArgs returns the argument vector of the program that env (path)
// runs, past its options and NAME=VALUE assignments (-S's string split
// into words), or nil when path is not env or names none.
func envArgs(path string, args []string) []string {
	if filepath.Base(path) != "env" {
		return nil
	}
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-u" || a == "--unset" || a == "-C" || a == "--chdir":
			i++
		case a == "-S" || a == "--split-string":
			if i+1 < len(args) {
				return envArgs(path, append(append([]string{path}, strings.Fields(args[i+1])...), args[i+2:]...))
			}
			return nil
		case strings.HasPrefix(a, "-S") || strings.HasPrefix(a, "--split-string="):
			v := strings.TrimPrefix(strings.TrimPrefix(a, "--split-string="), "-S")
			return envArgs(path, append(append([]string{path}, strings.Fields(v)...), args[i+1:]...))
		case a == "--":
			return args[i+1:]
		case strings.HasPrefix(a, "-") || strings.Contains(a, "="):
		default:
			return args[i:]
		}
	}
	return nil
}
