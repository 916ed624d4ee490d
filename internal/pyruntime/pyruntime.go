// Package pyruntime holds the Python code ipybox puts into the kernel: the
// ipybox_runtime package that generated tool modules import, and the init
// code that configures every fresh kernel.
package pyruntime

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"

	"github.com/ipybox/ipybox/internal/safefs"
)

//go:embed kernel_init.py
var initSource string

//go:embed ipybox_runtime/*.py
var runtimeFS embed.FS

// InitConfig is what the init code needs to know.
type InitConfig struct {
	// WorkDir, when set, is restored after every cell, with a message.
	WorkDir string `json:"workdir,omitempty"`
	// SysPath entries are put at the front of sys.path.
	SysPath []string `json:"sys_path,omitempty"`
	// SysPathEnd entries are put at the end of sys.path, after the
	// installed packages, and the current directory ("") moves there too:
	// a module in the workspace never shadows the standard library or an
	// installed package. Sessions share a workspace, so a json.py that one
	// session's kernel wrote would otherwise run in the next kernel that
	// imports json.
	SysPathEnd []string `json:"sys_path_end,omitempty"`
	// ShellApproval routes every shell command through the tool server's
	// shell approval before it runs.
	ShellApproval bool `json:"shell_approval,omitempty"`
	// RequireShellEscape installs the Python-level process guards.
	RequireShellEscape bool `json:"require_shell_escape,omitempty"`
	// Remote is set for a kernel that does not share the host's disk: it
	// imports mcptools from the tool server, and file transfers and
	// install_package work from the directory it started in.
	Remote bool `json:"remote,omitempty"`
}

// InitCode returns the Python source to run silently in a fresh kernel. It
// defines nothing in the user's namespace. A kernel forked from a fork
// server that ran Preload takes the definitions from there, when they are
// of this very source (its hash), and runs only setup.
func InitCode(cfg InitConfig) string {
	args, _ := json.Marshal(cfg)
	// A JSON string literal is a valid Python string literal, so the
	// source and the config travel without any Python-side escaping.
	return fmt.Sprintf("(lambda __m: (lambda __g: (__g.__setitem__('get_ipython', get_ipython), __g['setup'](__import__('json').loads(%s))))"+
		"(__m.__dict__ if getattr(__m, '__ipybox_hash__', None) == %s else (lambda __g: (exec(%s, __g), __g)[1])({})))"+
		"(__import__('sys').modules.get(%s))\n",
		Quote(string(args)), Quote(initHash()), Quote(initSource), Quote(preloadModule))
}

// preloadModule is the module Preload makes.
const preloadModule = "_ipybox_kernel_init"

// initHash names initSource's text.
var initHash = sync.OnceValue(func() string {
	h := sha256.Sum256([]byte(initSource))
	return hex.EncodeToString(h[:8])
})

// Preload returns one line of Python for a fork server, before it serves:
// it runs the init code's definitions (not setup, which takes a session's
// configuration) into a module, once, so that every kernel forked from
// there shares them instead of compiling and defining them again: 1.3 MB
// less of each forked kernel's private memory (issue 38). The definitions
// read nothing of the process they run in.
func Preload() string {
	return fmt.Sprintf("(lambda __m: (exec(%s, __m.__dict__), setattr(__m, '__ipybox_hash__', %s), __import__('sys').modules.__setitem__(%s, __m)))(__import__('types').ModuleType(%s))\n",
		Quote(initSource), Quote(initHash()), Quote(preloadModule), Quote(preloadModule))
}

// Install writes the ipybox_runtime package into dir (dir/ipybox_runtime)
// and returns dir, the entry to put on the kernel's sys.path. dir's parent
// must exist; nothing below it is followed if it is a link.
func Install(dir string) (string, error) {
	base := filepath.Dir(dir)
	if err := safefs.MkdirAll(base, filepath.Join(filepath.Base(dir), "ipybox_runtime"), 0o755); err != nil {
		return "", err
	}
	err := fs.WalkDir(runtimeFS, "ipybox_runtime", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := runtimeFS.ReadFile(p)
		if err != nil {
			return err
		}
		return safefs.WriteFile(base, filepath.Join(filepath.Base(dir), p), b, 0o644)
	})
	if err != nil {
		return "", fmt.Errorf("install ipybox_runtime: %w", err)
	}
	return dir, nil
}

// InstallCode returns Python source that writes the ipybox_runtime package
// into a fresh private directory of the kernel's machine and puts it first
// on sys.path: the way the runtime reaches a kernel that does not share
// the host's file system (a gateway kernel). The directory goes when the
// kernel exits (atexit: not after a SIGKILL). It defines nothing in the
// user's namespace.
func InstallCode() string {
	files := map[string]string{}
	fs.WalkDir(runtimeFS, "ipybox_runtime", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := runtimeFS.ReadFile(p)
		if err == nil {
			files[p] = string(b)
		}
		return err
	})
	src, _ := json.Marshal(files)
	// A JSON string literal is a valid Python string literal.
	return fmt.Sprintf(`(lambda os, sys, files, d: ([(os.makedirs(os.path.dirname(os.path.join(d, p)), mode=0o700, exist_ok=True), open(os.path.join(d, p), "w", encoding="utf-8").write(s)) for p, s in files.items()], sys.path.insert(0, d), __import__("atexit").register(__import__("shutil").rmtree, d, True)))(__import__("os"), __import__("sys"), __import__("json").loads(%s), __import__("tempfile").mkdtemp(prefix="ipybox-runtime-"))
`, Quote(string(src)))
}

// Quote returns s as a Python string literal: a JSON string literal is one.
func Quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
