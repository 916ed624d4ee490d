package codecheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"sort"
	"testing"
)

// maxFuncLines is the longest a product function may be, from its func
// line to its closing brace (docs/design.md, Layout; STYLE.md's quality
// bar). A function past it has grown several jobs: split it by job.
const maxFuncLines = 100

// splitting are the functions over the limit whose split is under way in
// another change, by package-qualified name, with the change. Each entry
// must still be over the limit: once the split lands, the test asks for
// the entry to go, so the list cannot outlive its reason.
var splitting = map[string]string{}

// longFunc is one function of the product over maxFuncLines.
type longFunc struct {
	where string // path:line
	pkg   string // the package's name
	name  string
	lines int
}

// longFuncs returns the functions and function literals of f longer than
// max lines. A literal inside a function counts toward that function as
// well, so a package-level literal (var f = func...) is the one case the
// literals add.
func longFuncs(f goFile, max int) []longFunc {
	var out []longFunc
	check := func(name string, n ast.Node) {
		start, end := f.fset.Position(n.Pos()), f.fset.Position(n.End())
		if lines := end.Line - start.Line + 1; lines > max {
			out = append(out, longFunc{fmt.Sprintf("%s:%d", f.path, start.Line), f.file.Name.Name, name, lines})
		}
	}
	ast.Inspect(f.file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			name := n.Name.Name
			if n.Recv != nil && len(n.Recv.List) == 1 {
				name = recvName(n.Recv.List[0].Type) + "." + name
			}
			check(name, n)
		case *ast.FuncLit:
			check("func literal", n)
		}
		return true
	})
	return out
}

// recvName is the type name of a method's receiver (T for *T or T[P]).
func recvName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return "?"
		}
	}
}

// TestFunctionLength: no product (non-test) function is over
// maxFuncLines lines. The claim regressed within hours once when it was
// only written down; here it is checked from the source.
func TestFunctionLength(t *testing.T) {
	t.Parallel()
	var long []longFunc
	funcs := 0
	for _, f := range sourceFiles(t) {
		ast.Inspect(f.file, func(n ast.Node) bool {
			if _, ok := n.(*ast.FuncDecl); ok {
				funcs++
			}
			return true
		})
		long = append(long, longFuncs(f, maxFuncLines)...)
	}
	sort.Slice(long, func(i, j int) bool { return long[i].lines > long[j].lines })
	seen := map[string]bool{}
	for _, l := range long {
		if why, ok := splitting[l.pkg+"."+l.name]; ok {
			seen[l.pkg+"."+l.name] = true
			t.Logf("%s: %s is %d lines, over %d, while %s", l.where, l.name, l.lines, maxFuncLines, why)
			continue
		}
		t.Errorf("%s: %s is %d lines, over %d: split it by job", l.where, l.name, l.lines, maxFuncLines)
	}
	for name := range splitting {
		if !seen[name] {
			t.Errorf("%s is no longer over %d lines: remove it from splitting", name, maxFuncLines)
		}
	}
	if funcs < 1000 {
		t.Errorf("found only %d functions; is the walk finding the code?", funcs)
	}
	t.Logf("%d functions, %d over %d lines", funcs, len(long), maxFuncLines)
}

// TestLongFuncs checks the measure itself on a parsed example: the
// signature and the closing brace count, a method is named by its
// receiver's type, and a package-level literal is measured too.
func TestLongFuncs(t *testing.T) {
	src := "package p\n\nfunc short() {\n}\n\nfunc (r *T[K]) long() {\n" + lines(3) + "}\n\nvar lit = func() {\n" + lines(3) + "}\n"
	f := parseSrc(t, src)
	got := longFuncs(f, 4)
	want := []longFunc{{"p.go:6", "p", "T.long", 5}, {"p.go:12", "p", "func literal", 5}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("longFuncs = %v, want %v", got, want)
	}
	if got := longFuncs(f, 5); len(got) != 0 {
		t.Errorf("longFuncs(5) = %v, want none: a function of exactly the limit passes", got)
	}
}

func lines(n int) string {
	s := ""
	for range n {
		s += "\t_ = 0\n"
	}
	return s
}

func parseSrc(t *testing.T, src string) goFile {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	return goFile{"p.go", fset, f}
}
