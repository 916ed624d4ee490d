// Package hostproc is where every process that ipybox starts on the host
// gets its working folder and its environment (docs/design.md, invariant 14).
//
// Kernel code can write the workspace, and interpreters and package
// runners load code from their working folder and its parents: `python -m`
// and `python -c` put the working folder on sys.path[0], node and npx look
// for node_modules upward from it, and uv, pyenv and nvm read project and
// version files there (pyproject.toml, uv.toml, .python-version, .nvmrc).
// No list of protected names covers "any module name", so a host process
// never starts in a folder that kernel code can write: it starts in Dir,
// an empty folder private to this process (0700, in $XDG_RUNTIME_DIR or
// the user's cache folder, never below a folder such as /tmp, where
// another user can plant files that an upward search finds), and
// its search-path variables lose every entry that is relative or lies in a
// folder kernel code can write. So do the folders of caches and configs
// (HomeVars) that lie in one, and a HOME there becomes a private home:
// npx runs what it finds in ~/.npm/_npx before it asks the registry.
//
//	cmd := exec.Command(python, "-c", probe)
//	if err := hostproc.Prepare(cmd, []string{workspace}); err != nil { ... }
package hostproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"

	"github.com/ipybox/ipybox/internal/rundir"
)

// SearchPathVars are the variables whose value is a list of folders that
// a program searches for code or for the programs it runs.
var SearchPathVars = []string{"PATH", "PYTHONPATH", "NODE_PATH", "PERL5LIB", "RUBYLIB", "GEM_PATH", "CLASSPATH", "LD_LIBRARY_PATH"}

// HomeVars are the variables that name a folder below which programs
// keep what they later load or run: HOME (npx's ~/.npm/_npx packages,
// Python's user site, uv's tool environments, pyenv's versions), the XDG
// base folders, and the cache, config and install folders of npm, uv,
// pip, pyenv and nvm. One in a folder of writable is a search path into
// the workspace: Prepare drops it, and gives HOME a private folder
// instead (a program without HOME would look its home up in the
// password file, the workspace again when that is the home).
var HomeVars = []string{"HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CONFIG_DIRS", "XDG_DATA_DIRS",
	"npm_config_cache", "npm_config_prefix", "npm_config_userconfig", "npm_config_globalconfig", "PREFIX",
	"UV_CACHE_DIR", "UV_TOOL_DIR", "UV_TOOL_BIN_DIR", "UV_CONFIG_FILE", "UV_PYTHON_INSTALL_DIR", "UV_PROJECT", "UV_PROJECT_ENVIRONMENT",
	"PIP_CONFIG_FILE", "PYTHONUSERBASE", "PYTHONHOME", "PYTHONSTARTUP", "PYENV_ROOT", "NVM_DIR", "VIRTUAL_ENV"}

// CodeVars are the variables whose value holds, among options, files a
// program runs or loads at its start: NODE_OPTIONS (--require,
// --import), BASH_ENV and ENV (a script every non-interactive bash or
// interactive sh runs first), LD_PRELOAD and LD_AUDIT, PERL5OPT (-M),
// RUBYOPT (-r), the JVM's option variables (-javaagent:). One that names
// a file in a folder of writable runs kernel code: Prepare drops it.
var CodeVars = []string{"NODE_OPTIONS", "BASH_ENV", "ENV", "LD_PRELOAD", "LD_AUDIT", "PERL5OPT", "RUBYOPT",
	"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "ZDOTDIR", "PYTHONBREAKPOINT"}

// CodeFamilies are the prefixes (matched without regard to case) of the
// variables through which interpreters, package managers and the C
// library load code: PYTHONPYCACHEPREFIX (a mirror tree of bytecode that
// Python reads for every import), GIT_CONFIG_GLOBAL (a config whose
// core.fsmonitor git runs), GCONV_PATH and OPENSSL_CONF (shared objects
// loaded by iconv and OpenSSL), NODE_COMPILE_CACHE, GEM_HOME, PERLLIB...
// No list of names covers them all, so a variable of one of these
// families whose value names a path in a folder of writable is dropped,
// as CodeVars are; the same value in a variable of no family (a data
// file of the server, MEMORY_FILE_PATH=<ws>/memory.json) is the
// server's data, and stays.
var CodeFamilies = []string{"PYTHON", "NODE_", "NPM_CONFIG_", "PERL", "RUBY", "GEM_", "BUNDLE_", "LD_", "GCONV_", "OPENSSL_",
	"GIT_", "UV_", "PIP_", "JAVA", "_JAVA", "JDK_", "DENO_", "BUN_", "LUA_", "TCL", "R_LIBS", "PHP", "COMPOSER_", "CARGO_",
	"RUSTUP_", "DOTNET_", "GOPATH", "GOFLAGS", "GOENV", "GOROOT", "GOCACHE", "GOMODCACHE", "GOTOOLCHAIN", "PKG_CONFIG"}

// codeFamily reports whether k is a variable of CodeFamilies.
func codeFamily(k string) bool {
	for _, p := range CodeFamilies {
		if len(k) >= len(p) && strings.EqualFold(k[:len(p)], p) {
			return true
		}
	}
	return false
}

var (
	dirMu sync.Mutex
	dirs  = map[string]string{} // root -> the folder made there
)

// Dir returns this process's private working folder for host processes,
// making it at the first call: an empty 0700 folder named ipybox-host-*,
// reaped by a later start when this process died without removing it.
// Its parents are the user's own: $XDG_RUNTIME_DIR/ipybox, else the
// user's cache folder; the system's temporary folder only when neither
// exists.
func Dir() (string, error) { return DirOutside(nil) }

// DirOutside is Dir, in the first of those parents that is not in a
// folder of writable (the user's cache folder is in a workspace that is
// the home folder).
//
// A parent below a folder that another user can put entries in (SharedAbove:
// /tmp, when HOME is /tmp as in the Docker image, or TMPDIR is the
// fallback) is skipped too: an upward search from the private folder
// (npx's for node_modules) would find that user's files. The home folder
// of the password file is then tried, and an $XDG_RUNTIME_DIR that does
// not exist yet is made (0700) when the folder above it is safe: the
// Docker image names one that way.
func DirOutside(writable []string) (string, error) {
	roots := dirRoots()
	dirMu.Lock()
	defer dirMu.Unlock()
	var errs []error
	for _, root := range roots {
		if w := Inside(root, writable); w != "" {
			errs = append(errs, fmt.Errorf("%s is in %s, which kernel code can write", root, w))
			continue
		}
		if at := SharedAbove(root); at != "" && !inImage {
			errs = append(errs, fmt.Errorf("%s is below %s, where another user can put files that an upward search finds", root, at))
			continue
		}
		if d, ok := dirs[root]; ok {
			return d, nil
		}
		if fi, err := os.Lstat(root); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			// Not followed: whoever planted the link chooses where the
			// folder goes (TestGeneratedToken plants one at
			// $XDG_RUNTIME_DIR/ipybox).
			errs = append(errs, fmt.Errorf("%s is a symbolic link", root))
			continue
		}
		d, err := rundir.New(root, "ipybox-host-")
		if err == nil {
			dirs[root] = d
			return d, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("host processes' private folder: %w; set XDG_RUNTIME_DIR to a folder of your own outside the workspace", errors.Join(errs...))
}

// inImage is set in ipybox's Docker image (IPYBOX_IN_IMAGE=1). There a
// folder that others can write above the private folder (/tmp, the home
// of every uid the image runs as) is accepted: the container's other
// processes are the operator's own, and its kernels run as the server's
// uid (or as root confined by Landlock), so they can write every folder
// that the server can, system folders aside, wherever the private folder
// lies (docs/container.md).
var inImage = os.Getenv("IPYBOX_IN_IMAGE") == "1"

// ImagePrivate is, in the image, the folder of the server's own files:
// its config folder (XDG_CONFIG_HOME is /ipybox/config there: the
// approval policy, its audit log, the remembered answers, the OAuth
// sign-ins of its MCP servers) and, there, every --state-dir and
// generated token outside the workspace. The Dockerfile makes it (1777,
// as /tmp, since the server runs as any --user); the server makes its
// own 0700 folders in it. What the server starts can neither read nor
// write it (ImageDomain with scope), nor rename or replace it: nothing
// they start may change "/" itself.
const ImagePrivate = "/ipybox"

// OutsideImagePrivate, in the image, refuses a folder or file of the
// server's own (what: the flag that names it) that lies outside
// ImagePrivate: every other folder but the system's is open to what the
// server starts, to read and to write. Outside the image it returns nil.
func OutsideImagePrivate(what, path string) error {
	if !inImage || Inside(path, []string{ImagePrivate}) != "" {
		return nil
	}
	return fmt.Errorf("%s %s: in the ipybox image, kernels can read and write every folder but the system's and %s; put it under %s (a volume at %s/state, say)", what, path, ImagePrivate, ImagePrivate, ImagePrivate)
}

// dirRoots lists the parents that Dir may use, in order.
func dirRoots() []string {
	var roots []string
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" && filepath.IsAbs(x) {
		if _, err := os.Stat(x); errors.Is(err, os.ErrNotExist) && (inImage || SharedAbove(filepath.Dir(x)) == "") {
			os.Mkdir(x, 0o700) // an error shows below, as a folder that is not there
		}
		if st, err := os.Stat(x); err == nil && st.IsDir() {
			roots = append(roots, filepath.Join(x, "ipybox"))
		}
	}
	if c, err := os.UserCacheDir(); err == nil && filepath.IsAbs(c) {
		roots = append(roots, filepath.Join(c, "ipybox"))
	}
	if u, err := user.Current(); err == nil && filepath.IsAbs(u.HomeDir) {
		roots = append(roots, filepath.Join(u.HomeDir, ".cache", "ipybox"))
	}
	return append(roots, os.TempDir())
}

// Inside reports the folder of writable that p lies at or below, after
// links are resolved as far as the paths exist; "" when none.
func Inside(p string, writable []string) string {
	rp := realPath(p)
	for _, w := range writable {
		if w == "" {
			continue
		}
		rw := realPath(w)
		if rp == rw || strings.HasPrefix(rp, strings.TrimSuffix(rw, string(filepath.Separator))+string(filepath.Separator)) {
			return w
		}
	}
	return ""
}

// ProgramInside reports the folder of writable where kernel code could
// change what the program p runs, "" when none: p itself or the target of
// its links; the folder that holds it (a link there is replaced at will);
// and the virtual environment it belongs to, by its own path or its
// link's target (a pyvenv.cfg beside its folder: the .pth files of the
// environment's site-packages run at every start of its interpreter, -I
// or not). A venv's bin/python is a link to an interpreter elsewhere, so
// Inside of the program alone misses it.
//
// A kernel's run directory (KernelRunDir) counts whatever writable says:
// the kernel writes it, and no caller lists them all.
func ProgramInside(p string, writable []string) string {
	cands := []string{p, filepath.Dir(p)}
	for _, q := range []string{p, realPath(p)} {
		venv := filepath.Dir(filepath.Dir(q))
		if _, err := os.Stat(filepath.Join(venv, "pyvenv.cfg")); err == nil {
			cands = append(cands, venv)
		}
	}
	for _, c := range cands {
		if w := Inside(c, writable); w != "" {
			return w
		}
		if d := KernelRunDir(c); d != "" {
			return d
		}
		if d := KernelRunDir(realPath(c)); d != "" {
			return d
		}
	}
	return ""
}

// KernelRunDir returns the kernel run directory (kernel.NewRunDir:
// $XDG_RUNTIME_DIR/ipybox/<10 hex>, or ipybox-<10 hex> in the temporary
// folder) that p lies at or below, "" when none. A sandboxed kernel's is
// bound writable at its host path.
func KernelRunDir(p string) string {
	p = filepath.Clean(p)
	hex10 := func(s string) bool {
		return len(s) == 10 && strings.Trim(s, "0123456789abcdef") == ""
	}
	if rel, err := filepath.Rel(os.TempDir(), p); err == nil && !strings.HasPrefix(rel, "..") {
		first, _, _ := strings.Cut(rel, string(filepath.Separator))
		if name, ok := strings.CutPrefix(first, "ipybox-"); ok && hex10(name) {
			return filepath.Join(os.TempDir(), first)
		}
	}
	if x := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(x) {
		root := filepath.Join(x, "ipybox")
		if rel, err := filepath.Rel(root, p); err == nil && !strings.HasPrefix(rel, "..") {
			if first, _, _ := strings.Cut(rel, string(filepath.Separator)); hex10(first) {
				return filepath.Join(root, first)
			}
		}
	}
	return ""
}

// realPath returns p absolute and with its links resolved, as far as its
// leading part exists.
func realPath(p string) string {
	p, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	rest := ""
	for cur := p; ; {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// CleanEnv returns env with every entry of a search-path variable
// (SearchPathVars) that is relative, empty, or in a folder of writable
// removed, and the removed entries, as "VAR=entry".
func CleanEnv(env []string, writable []string) (out, dropped []string) {
	out = make([]string, 0, len(env))
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !isSearchVar(k) {
			out = append(out, kv)
			continue
		}
		var keep []string
		for _, e := range filepath.SplitList(v) {
			if e == "" || !filepath.IsAbs(e) || Inside(e, writable) != "" {
				dropped = append(dropped, k+"="+e)
				continue
			}
			keep = append(keep, e)
		}
		if len(keep) > 0 {
			out = append(out, k+"="+strings.Join(keep, string(filepath.ListSeparator)))
		}
	}
	return out, dropped
}

func isSearchVar(k string) bool {
	for _, s := range SearchPathVars {
		if strings.EqualFold(k, s) {
			return true
		}
	}
	return false
}

// Prepare makes cmd fit to start on the host: an empty cmd.Dir becomes
// Dir; a cmd.Dir, a program, or an interpreter's script (Scripts) in a
// folder of writable is an error that names it; cmd.Env (nil means none: it never inherits ours) loses the
// search-path entries CleanEnv drops. In the Docker image, cmd then runs
// confined (Confine). It returns what was dropped, for the caller's log.
func Prepare(cmd *exec.Cmd, writable []string) (dropped []string, err error) {
	if cmd.Dir == "" {
		if cmd.Dir, err = DirOutside(writable); err != nil {
			return nil, err
		}
	} else if w := Inside(cmd.Dir, writable); w != "" {
		return nil, &WritableError{What: "working folder", Path: cmd.Dir, Folder: w}
	}
	if p := cmd.Path; p != "" {
		if !filepath.IsAbs(p) {
			p = filepath.Join(cmd.Dir, p)
		}
		if w := ProgramInside(p, writable); w != "" {
			return nil, &WritableError{What: "program", Path: cmd.Path, Folder: w}
		}
		for _, s := range Scripts(p, cmd.Args, cmd.Dir) {
			if w := ProgramInside(s, writable); w != "" {
				return nil, &WritableError{What: "script", Path: s, Folder: w}
			}
		}
	}
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.Env, dropped = CleanEnv(cmd.Env, writable)
	if dropped, err = cleanHomes(cmd, writable, dropped); err != nil {
		return nil, err
	}
	return dropped, Confine(cmd)
}

// cleanHomes drops the HomeVars of cmd.Env that lie in a folder of
// writable, or below a folder another user can put entries in (HOME=/tmp:
// npx's cache and the upward searches from it), and the CodeVars and
// variables of CodeFamilies that name a path in a folder of writable,
// and sets HOME to Home when it was one of them, or is not a folder (a
// cache variable dropped here then has a home to fall back to).
func cleanHomes(cmd *exec.Cmd, writable []string, dropped []string) ([]string, error) {
	out := cmd.Env[:0:0]
	home := false
	for _, kv := range cmd.Env {
		k, v, _ := strings.Cut(kv, "=")
		if isVar(HomeVars, k) && (homeInside(v, writable) || homeShared(v)) || k == "HOME" && !isDir(v) || (isVar(CodeVars, k) || codeFamily(k)) && codeInside(v, writable) {
			dropped = append(dropped, kv)
			home = home || k == "HOME"
			continue
		}
		out = append(out, kv)
	}
	if home {
		h, err := Home()
		if err != nil {
			return nil, err
		}
		out = append(out, "HOME="+h)
	}
	cmd.Env = out
	return dropped, nil
}

// homeInside reports whether an entry of the list v is in a folder of
// writable, or, in the image, in ImagePrivate (ipybox's XDG_CONFIG_HOME
// there, which nothing the server starts may read).
func homeInside(v string, writable []string) bool {
	if inImage {
		writable = append(writable[:len(writable):len(writable)], ImagePrivate)
	}
	for _, e := range filepath.SplitList(v) {
		if e != "" && filepath.IsAbs(e) && Inside(e, writable) != "" {
			return true
		}
	}
	return false
}

// codeInside reports whether a word of the options v (split at spaces,
// quotes, ':', '=' and ',', so that --require=F, --require "F",
// file:///F and -javaagent:F are seen) is an absolute path in a folder of
// writable.
func codeInside(v string, writable []string) bool {
	for _, e := range strings.FieldsFunc(v, func(r rune) bool {
		return r == ' ' || r == '\t' || r == '\n' || r == ':' || r == '=' || r == ',' || r == '"' || r == '\''
	}) {
		if filepath.IsAbs(e) && Inside(e, writable) != "" {
			return true
		}
	}
	return false
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// homeShared reports whether an entry of the list v is in, or is, a
// folder that another user can put entries in (SharedAbove): HOME=/tmp.
func homeShared(v string) bool {
	for _, e := range filepath.SplitList(v) {
		if e != "" && filepath.IsAbs(e) && SharedAbove(e) != "" {
			return true
		}
	}
	return false
}

func isVar(list []string, k string) bool {
	for _, h := range list {
		if strings.EqualFold(k, h) {
			return true
		}
	}
	return false
}

var (
	homeOnce sync.Once
	home     string
	homeErr  error
)

// Home returns the home folder of host processes whose own HOME is in a
// folder kernel code can write: "home" in Dir, 0700, made at the first
// call. Caches that a program keeps there (npx's packages) last as long
// as this process.
func Home() (string, error) {
	homeOnce.Do(func() {
		d, err := Dir()
		if err != nil {
			homeErr = err
			return
		}
		home = filepath.Join(d, "home")
		if err := os.Mkdir(home, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			homeErr = fmt.Errorf("host processes' home folder: %w", err)
		}
	})
	return home, homeErr
}

// WritableError is Prepare's refusal: a host process would start in, or
// run a program from, a folder that kernel code can write.
type WritableError struct {
	What   string // "working folder", "program", "script" or "argument"
	Path   string
	Folder string // the writable folder Path lies in
}

func (e *WritableError) Error() string {
	return fmt.Sprintf("its %s %s is in %s, which kernel code can write: a host process never starts there, nor runs a program from there", e.What, e.Path, e.Folder)
}

// Env returns the named variables of this process's environment, as
// "KEY=value", followed by extra: the start of a constructed environment.
func Env(keys []string, extra ...string) []string {
	env := []string{}
	for _, k := range keys {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, extra...)
}

// LookPath finds a program that ipybox itself runs on the host (bwrap)
// on this process's PATH, as exec.LookPath does, but only in folders that
// kernel code cannot write: an entry that is empty or relative (the
// working folder), or in a folder of writable (an activated workspace
// venv's bin, a node_modules/.bin), is skipped, and so is a program that
// ProgramInside places in one (a link into it, a venv whose pyvenv.cfg
// kernel code writes). The operator's PATH is theirs, but a workspace on
// it makes every kernel a writer of what the host runs.
func LookPath(name string, writable []string) (string, error) {
	if strings.ContainsRune(name, filepath.Separator) {
		if w := ProgramInside(name, writable); w != "" {
			return "", &WritableError{What: "program", Path: name, Folder: w}
		}
		return name, nil
	}
	var skipped []string
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" || !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			continue
		}
		if w := Inside(dir, writable); w != "" {
			skipped = append(skipped, p)
			continue
		}
		if w := ProgramInside(p, writable); w != "" {
			skipped = append(skipped, p)
			continue
		}
		return p, nil
	}
	if len(skipped) > 0 {
		return "", fmt.Errorf("%s: not found on PATH outside the folders kernel code can write (skipped %s)", name, strings.Join(skipped, ", "))
	}
	return "", fmt.Errorf("%s: %w", name, exec.ErrNotFound)
}

// PythonSafePath keeps an interpreter from putting its working folder or
// the script's folder on sys.path (Python 3.11 and later; older ones
// ignore it, and the private working folder covers them). Only for
// processes that import nothing beside their own script.
const PythonSafePath = "PYTHONSAFEPATH=1"

// ArgInside reports an argument of a host program (args, without the
// program) through which kernel code could change what it runs, and the
// folder of writable it lies in; "", "" when none. A word of an argument
// (split as CodeVars' values are, so that --require=F and file:///F are
// seen) that names a path in a folder of writable, links resolved
// (relative ones from dir), or spelt inside one, counts where the program
// takes it as its code (codeAt): an interpreter's script and what its
// options load before it (python3 <ws>/srv.py puts <ws> first on
// sys.path, node's require looks in <ws>/node_modules, python runs a
// folder's __main__.py); a package runner's package and the folders of
// its source options (npx <ws>/pkg, uvx --from <ws>/pkg, uv run
// --directory <ws>); an unknown program's first operand that is not a
// folder (tsx <ws>/srv.ts); the program a wrapper runs (env
// <ws>/.venv/bin/python). Elsewhere it is the server's data (a file
// server's root, a key file: the sandbox masks the files a config names
// from kernels, and the guard keeps them and the folders above them).
func ArgInside(program string, args []string, dir string, writable []string) (arg, folder string) {
	kind := launcher(program)
	code := kind == interpreter || kind == runner
	first := kind == 0
	prev := ""
	for i, a := range args {
		operand := !strings.HasPrefix(a, "-")
		opt := prev
		if !operand {
			opt, _, _ = strings.Cut(a, "=")
		}
		script := first && operand && !bareOpt(prev)
		wrapped := kind == wrapper && operand && (launcher(a) != 0 || strings.ContainsRune(a, filepath.Separator))
		if f, d := wordsInside(a, dir, writable); f != "" && (code || script && !d || wrapped || kind == runner && sourceOpt(opt)) {
			return a, f
		}
		if wrapped {
			// env python3 <ws>/pkg: the rest is the wrapped program's.
			return ArgInside(a, args[i+1:], dir, writable)
		}
		if script {
			first = false
		}
		if code && operand && !codeAt(kind, a, prev, dir) {
			code = false
		}
		prev = a
	}
	return "", ""
}

// wordsInside returns the folder of writable that a word of the argument
// a names a path in (wordInside), "" when none, and whether that path is
// a folder.
func wordsInside(a, dir string, writable []string) (folder string, isFolder bool) {
	for _, w := range argWords(a) {
		p := w
		if !filepath.IsAbs(p) {
			if !strings.ContainsRune(p, filepath.Separator) || dir == "" {
				continue
			}
			p = filepath.Join(dir, p)
		}
		if f := wordInside(p, writable); f != "" {
			return f, isDir(p)
		}
	}
	return "", false
}

// bareOpt reports an option that may take the next argument as its value
// (-k, --key-file, not --key=V).
func bareOpt(a string) bool { return strings.HasPrefix(a, "-") && !strings.Contains(a, "=") }

// wordInside is Inside of p, or, when p's links lead out of every folder
// of writable, the folder of writable p itself is spelt in: a link there
// (<ws>/.venv/bin/python, a link to the system's interpreter) is kernel
// code's to replace, and a venv's interpreter loads the venv's .pth
// files.
func wordInside(p string, writable []string) string {
	if f := Inside(p, writable); f != "" {
		return f
	}
	c := filepath.Clean(p)
	for _, w := range writable {
		if w == "" {
			continue
		}
		for _, r := range []string{filepath.Clean(w), realPath(w)} {
			if c == r || strings.HasPrefix(c, strings.TrimSuffix(r, string(filepath.Separator))+string(filepath.Separator)) {
				return w
			}
		}
	}
	return ""
}

// Launcher kinds: programs that take their code from an argument.
const (
	interpreter = 1 + iota // its script, the first argument that names a file
	runner                 // its package, the first argument that is not a path
	wrapper                // runs the program its arguments name (env, timeout)
)

// codeAt reports whether the program of kind may still take its code
// from an argument after a, which is not an option and follows prev.
// It fails closed: an interpreter's script is the first argument that
// names a regular file and is not the value of an option that loads one
// (node -r F), or the value of -m, -c, -e or -p (a module or code); an
// option's value that is no file (python3 -X dev, node --title t) keeps
// the place open. A runner's package is the first argument that is
// neither a path nor a subcommand (uv run, npm exec).
func codeAt(kind int, a, prev, dir string) bool {
	switch prev {
	case "-m", "-c", "-e", "-p", "--eval", "--print":
		return kind == runner
	}
	p := a
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	st, err := os.Stat(p)
	if kind == interpreter {
		return err != nil || !st.Mode().IsRegular() || loadOpt(prev)
	}
	switch a {
	case "run", "exec", "x", "tool", "dlx", "tools":
		return true
	}
	return err == nil || sourceOpt(prev)
}

// loadOpt reports an interpreter's option whose value is a file it
// loads before its script.
func loadOpt(o string) bool {
	switch o {
	case "-r", "--require", "--import", "--loader", "--experimental-loader", "--env-file", "-I", "-M", "-x", "-jar", "-cp", "-classpath", "--class-path":
		return true
	}
	return false
}

// sourceOpt reports a package runner's option whose value is where a
// package or project comes from (uvx --from F, uv run --project F,
// npx --package F, npm --prefix F): a folder there is code, wherever
// it stands.
func sourceOpt(o string) bool {
	switch o {
	case "--from", "--with", "--with-editable", "--with-requirements", "--project", "--directory", "--package", "-p",
		"--prefix", "-C", "--cwd", "--dir", "--spec", "--config-file", "--env-file", "--find-links", "-f", "--index-url", "--editable", "-e":
		return true
	}
	return false
}

// argWords splits an argument as codeInside does: at ':', so that a
// URL's path is a word of its own whatever its scheme (file:///F,
// git+file:///F: "///F" is F).
func argWords(a string) []string {
	return strings.FieldsFunc(a, func(r rune) bool {
		return r == ' ' || r == '\t' || r == '\n' || r == ':' || r == '=' || r == ',' || r == '"' || r == '\''
	})
}

// launcher returns the kind of program (by its base name): an
// interpreter that runs a script or folder named by an argument (python,
// pypy, node, bun, deno, the shells, ruby, perl, php, java), a package runner
// (npx, uvx, uv, pipx, bunx, npm, pnpm, yarn), a wrapper that runs the
// program named among its arguments (env, timeout, nice...), or 0.
func launcher(program string) int {
	b := strings.TrimSuffix(strings.ToLower(filepath.Base(program)), ".exe")
	for _, p := range []string{"python", "pypy"} {
		if strings.HasPrefix(b, p) {
			return interpreter
		}
	}
	switch b {
	case "node", "nodejs", "bun", "deno", "sh", "bash", "dash", "zsh", "ksh", "ruby", "perl", "php", "java":
		return interpreter
	case "npx", "uvx", "uv", "pipx", "bunx", "npm", "pnpm", "yarn":
		return runner
	case "env", "timeout", "nice", "nohup", "stdbuf", "setsid", "ionice", "taskset", "chrt", "time", "sudo", "doas",
		"xvfb-run", "unbuffer", "dumb-init", "tini", "firejail", "systemd-run", "prlimit", "flock", "chpst", "runuser":
		return wrapper
	}
	return 0
}
