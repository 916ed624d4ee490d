package codecheck

import (
	"go/ast"
	"slices"
	"strings"
	"testing"
)

// startExempt are the functions that start a host process without
// hostproc.Prepare, each with its reason (docs/design.md, invariant 14: every
// other host process starts in the private folder of host processes).
var startExempt = map[string]string{
	// The kernel is kernel code: the workspace is its working folder by
	// design, and a sandboxed one starts through the sandbox.
	"internal/kernel/launcher.go:Start": "the kernel itself",
	"internal/kernel/zygote.go:proc":    "the fork server of unsandboxed kernels, which is kernel code",
	// bwrap, sandbox-exec and ipybox's own binary, by absolute path, with
	// constructed environments: none loads anything from its working
	// folder, and what runs inside gets its own (--chdir).
	"internal/sandbox/probe_linux.go:probeBwrap":       "bwrap",
	"internal/sandbox/probe_linux.go:runConfined":      "bwrap, working in / (--chdir /), read-only host, env of PATH, HOME, LANG, PYENV_*",
	"internal/sandbox/launch_linux.go:launchCmd":       "bwrap",
	"internal/sandbox/prep_linux.go:idmapNS":           "ipybox's own binary",
	"internal/sandbox/prep_linux.go:prepCmd":           "ipybox's own binary",
	"internal/sandbox/initcheck_linux.go:checkInit":    "ipybox's own binary",
	"internal/sandbox/sandbox_darwin.go:probeSeatbelt": "sandbox-exec",
	"internal/sandbox/sandbox_darwin.go:seatbeltCmd":   "sandbox-exec",
	"internal/container/idmap_linux.go:idmapUserns":    "ipybox's own binary",
	// A test helper: Python reads test literals.
	"internal/pylit/python.go:PythonEval": "tests only",
}

// TestHostProcessesPrepared: every function that starts a process calls
// hostproc.Prepare, so that it starts in the private folder with a cleaned
// environment, or is exempt above with its reason. A new launcher that
// forgets fails here rather than in an attack.
func TestHostProcessesPrepared(t *testing.T) {
	var seen []string
	for _, f := range sourceFiles(t) {
		if strings.HasPrefix(f.path, "internal/hostproc/") {
			continue
		}
		for _, d := range f.file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			starts, prepared := false, false
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				c, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := c.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				switch {
				case isPkg(sel.X, "exec") && (sel.Sel.Name == "Command" || sel.Sel.Name == "CommandContext"),
					isPkg(sel.X, "os") && sel.Sel.Name == "StartProcess":
					starts = true
				case isPkg(sel.X, "hostproc") && sel.Sel.Name == "Prepare":
					prepared = true
				}
				return true
			})
			if !starts || prepared {
				continue
			}
			key := f.path + ":" + fn.Name.Name
			seen = append(seen, key)
			if _, ok := startExempt[key]; !ok {
				t.Errorf("%s starts a process without hostproc.Prepare: a host process must not start in the workspace (invariant 14); call it, or exempt the function in startExempt with the reason", key)
			}
		}
	}
	for key := range startExempt {
		if !slices.Contains(seen, key) {
			t.Errorf("startExempt names %s, which starts no unprepared process any more; remove it", key)
		}
	}
}
