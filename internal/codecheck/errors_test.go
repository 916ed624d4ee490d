// Package codecheck holds tests that read the module's own source and
// keep rules of docs/design.md true that the compiler does not check.
package codecheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/testenv"
)

// componentWords are package names that are also the user's word for a
// component, and so may start a message: the façade's own name, and what
// a user chooses or runs (a sandbox, a container, a gateway, a kernel,
// Docker, Jupyter, the Linux facility seccomp).
var componentWords = map[string]bool{
	"ipybox": true, "sandbox": true, "container": true, "gateway": true, "kernel": true,
	"docker": true, "jupyter": true, "seccomp": true,
}

// frontWord is a message's first link when it is one word and a colon.
var frontWord = regexp.MustCompile(`^([a-z][a-z0-9_]*): `)

// goFile is one parsed non-test Go file of the module.
type goFile struct {
	path string // relative to the module root
	fset *token.FileSet
	file *ast.File
}

// sourceFiles parses every non-test Go file of the module, but for the
// test-only packages and test data.
func sourceFiles(t *testing.T) []goFile {
	t.Helper()
	root := testenv.RepoRoot(t)
	var out []goFile
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			switch {
			case rel != "." && strings.HasPrefix(d.Name(), "."), d.Name() == "testdata", d.Name() == "node_modules",
				rel == "internal/testenv", rel == "internal/mcptest", rel == "internal/codecheck", rel == "tools", rel == "python":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution|parser.ParseComments)
		if err != nil {
			return err
		}
		out = append(out, goFile{rel, fset, f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 100 {
		t.Fatalf("found %d Go files under %s; the walk is wrong", len(out), root)
	}
	return out
}

// packageNames are the names of the module's packages (their folders).
func packageNames(files []goFile) map[string]bool {
	names := map[string]bool{}
	for _, f := range files {
		names[f.file.Name.Name] = true
	}
	return names
}

// errorMessages yields each errors.New or fmt.Errorf call whose message
// is a string literal, with its position.
func errorMessages(f goFile, yield func(pos token.Position, msg string)) {
	ast.Inspect(f.file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		pkg, ok := sel.X.(*ast.Ident)
		if !ok || !(pkg.Name == "errors" && sel.Sel.Name == "New" || pkg.Name == "fmt" && sel.Sel.Name == "Errorf") {
			return true
		}
		lit, ok := call.Args[0].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		msg, err := strconv.Unquote(lit.Value)
		if err != nil {
			return true
		}
		yield(f.fset.Position(lit.Pos()), msg)
		return true
	})
}

// badFront returns the Go package name a message starts with, when that
// name is not also a component's (see docs/design.md, Errors).
func badFront(msg string, packages map[string]bool) string {
	m := frontWord.FindStringSubmatch(msg)
	if m == nil || componentWords[m[1]] || !packages[m[1]] {
		return ""
	}
	return m[1]
}

// TestErrorFronts: no error message starts with the name of one of our Go
// packages that a user never sees (pygen, mcpconn, toolserver, ...). The
// façade starts its own errors with "ipybox: "; below it, a message says
// what failed in the user's terms.
func TestErrorFronts(t *testing.T) {
	files := sourceFiles(t)
	packages := packageNames(files)
	n := 0
	for _, f := range files {
		errorMessages(f, func(pos token.Position, msg string) {
			n++
			if name := badFront(msg, packages); name != "" {
				t.Errorf("%s:%d: message %q starts with the package name %q; say what failed instead (docs/design.md, Errors)", f.path, pos.Line, msg, name)
			}
		})
	}
	if n < 300 {
		t.Errorf("read %d messages; the reader is broken", n)
	}
}

// TestBadFront checks the rule itself on examples, both ways.
func TestBadFront(t *testing.T) {
	packages := map[string]bool{"pygen": true, "mcpconn": true, "sandbox": true, "ipybox": true, "kernel": true}
	for msg, want := range map[string]string{
		"pygen: tool %q: inputSchema: %w":     "pygen",
		"mcpconn: server config: %w":          "mcpconn",
		"ipybox: register server %q: %w":      "",
		"sandbox: bwrap cannot start: %w":     "",
		"kernel: died":                        "",
		"server config: trailing data":        "",
		"fork server: %w":                     "", // two words: not a package's name
		"open %s: %w":                         "",
		"url: %w":                             "", // not one of our packages
		"%w: the request was not made by one": "",
	} {
		if got := badFront(msg, packages); got != want {
			t.Errorf("badFront(%q) = %q, want %q", msg, got, want)
		}
	}
}

// textMatch reports whether n matches on an error's text: a strings
// function (Contains, HasPrefix, HasSuffix, Index, EqualFold) or a
// comparison whose operand calls Error().
func textMatch(n ast.Node) bool {
	callsError := func(e ast.Expr) bool {
		found := false
		ast.Inspect(e, func(n ast.Node) bool {
			if c, ok := n.(*ast.CallExpr); ok && len(c.Args) == 0 {
				if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Error" {
					found = true
				}
			}
			return !found
		})
		return found
	}
	switch n := n.(type) {
	case *ast.CallExpr:
		sel, ok := n.Fun.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		pkg, ok := sel.X.(*ast.Ident)
		if !ok || pkg.Name != "strings" {
			return false
		}
		switch sel.Sel.Name {
		case "Contains", "HasPrefix", "HasSuffix", "Index", "EqualFold", "Cut", "CutPrefix":
			return len(n.Args) > 0 && callsError(n.Args[0])
		}
	case *ast.BinaryExpr:
		return (n.Op == token.EQL || n.Op == token.NEQ) && (callsError(n.X) || callsError(n.Y))
	}
	return false
}

// exempt reports whether the line of pos carries "codecheck:ok" with a
// reason: a use of an error's text that decides nothing (deduplicating
// log lines).
func exempt(f goFile, pos token.Pos) bool {
	line := f.fset.Position(pos).Line
	for _, cg := range f.file.Comments {
		if f.fset.Position(cg.Pos()).Line == line && strings.Contains(cg.Text(), "codecheck:ok: ") {
			return true
		}
	}
	return false
}

// TestNoErrorTextMatching: no code decides on an error's text (a message
// may change in any release, ours or a dependency's); it uses errors.Is
// or errors.As (docs/design.md, Errors).
func TestNoErrorTextMatching(t *testing.T) {
	for _, f := range sourceFiles(t) {
		ast.Inspect(f.file, func(n ast.Node) bool {
			if textMatch(n) && !exempt(f, n.Pos()) {
				t.Errorf("%s:%d: decides on an error's text; use errors.Is or errors.As", f.path, f.fset.Position(n.Pos()).Line)
			}
			return true
		})
	}
}

// TestTextMatch checks the detector on examples, both ways.
func TestTextMatch(t *testing.T) {
	for src, want := range map[string]bool{
		`strings.Contains(pe.Err.Error(), "escapes")`: true,
		`strings.HasPrefix(err.Error(), "x")`:         true,
		`err.Error() == "EOF"`:                        true,
		`"x" != e.Error()`:                            true,
		`strings.Contains(msg, "x")`:                  false,
		`errors.Is(err, fs.ErrNotExist)`:              false,
		`strings.TrimPrefix(err.Error(), "ipybox: ")`: false, // reshapes text for people, decides nothing
		`a == b`: false,
	} {
		e, err := parser.ParseExpr(src)
		if err != nil {
			t.Fatal(err)
		}
		if got := textMatch(e); got != want {
			t.Errorf("textMatch(%s) = %v, want %v", src, got, want)
		}
	}
}
