package codecheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/testenv"
)

// TestEveryWaitIsMarked keeps the claim of internal/defaults true, that
// every wait has a bound (docs/design.md, Waits): every place in the
// non-test code where a goroutine may block until another party acts
// carries a comment, on its line or alone on the line before, that starts
// with "bound:" (what ends the wait before the call it is in must return)
// or "lifetime:" (what the wait lives as long as: an exit watcher, a
// server's loop). A new bare receive or Wait fails here until it says why
// it ends.
//
// The waits found are the ones the source spells out: a channel receive or
// send outside a select; a range over a channel; a select with no default
// and no case on a context, time.After or a timer; a Wait() (sync.WaitGroup,
// sync.Cond, exec.Cmd, os.Process); an Accept(); a child run to its end
// (Run, Output, CombinedOutput, in a file that imports os/exec); the system
// calls that wait for another process (Wait4, Poll...); a call handed
// context.Background() or TODO() itself; and the net/http and net calls
// that take no context. Reads on pipes and sockets are not found (telling a
// pipe from a file takes types): they were audited by hand, and what ends
// them (a close, a kill, a deadline) is among the waits checked.
func TestEveryWaitIsMarked(t *testing.T) {
	t.Parallel()
	root := testenv.RepoRoot(t)
	pkgs := map[string][]goFile{} // by directory
	for _, f := range sourceFiles(t) {
		pkgs[filepath.Dir(f.path)] = append(pkgs[filepath.Dir(f.path)], f)
	}
	n := 0
	for _, files := range pkgs {
		parsed := make([]*ast.File, len(files))
		for i, f := range files {
			parsed[i] = f.file
		}
		chans := chanNames(parsed)
		for _, f := range files {
			src, err := os.ReadFile(filepath.Join(root, f.path))
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range findWaits(f.fset, f.file, src, chans) {
				n++
				if !w.marked {
					t.Errorf("%s:%d: %s with no \"// bound: why it ends\" or \"// lifetime: what it lives as long as\" on its line or the line before", filepath.ToSlash(f.path), w.pos.Line, w.kind)
				}
			}
		}
	}
	if n < 50 {
		t.Errorf("found only %d waits; is the walk finding the code?", n)
	}
	t.Logf("%d waits", n)
}

// A wait is one place where a goroutine may block until another party acts.
type wait struct {
	pos    token.Position
	kind   string
	marked bool // by a bound: or lifetime: comment
}

// findWaits returns the waits in f, parsed from src. chans holds the names
// declared with a channel type in f's package, to tell a range over a
// channel.
func findWaits(fset *token.FileSet, f *ast.File, src []byte, chans map[string]bool) []wait {
	// Lines with a marker: a comment on the line itself, or a block of
	// comments on lines of their own that ends on the line before and
	// holds a marker (a comment after code marks that line only).
	markedLines := map[int]bool{}
	for _, g := range f.Comments {
		above := false
		for _, c := range g.List {
			if isMarker(c.Text) {
				markedLines[fset.Position(c.Pos()).Line] = true
				above = above || ownLine(src, fset.Position(c.Pos()).Offset)
			}
		}
		if above {
			markedLines[fset.Position(g.End()).Line+1] = true
		}
	}
	importsExec := false
	for _, im := range f.Imports {
		if p, _ := strconv.Unquote(im.Path.Value); p == "os/exec" {
			importsExec = true
		}
	}

	var waits []wait
	add := func(p token.Pos, kind string) {
		pos := fset.Position(p)
		waits = append(waits, wait{pos, kind, markedLines[pos.Line]})
	}
	comms := map[ast.Node]bool{} // the send and receive of each select case
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectStmt:
			bounded := false
			for _, s := range n.Body.List {
				cc := s.(*ast.CommClause)
				switch c := cc.Comm.(type) {
				case nil:
					bounded = true // default
				case *ast.SendStmt:
					comms[c] = true
				case *ast.ExprStmt:
					comms[c.X] = true
					bounded = bounded || isBoundCase(c.X)
				case *ast.AssignStmt:
					comms[c.Rhs[0]] = true
					bounded = bounded || isBoundCase(c.Rhs[0])
				}
			}
			if !bounded {
				add(n.Select, "select with no default, context or timer case")
			}
		case *ast.UnaryExpr:
			if n.Op == token.ARROW && !comms[n] {
				add(n.OpPos, "channel receive")
			}
		case *ast.SendStmt:
			if !comms[n] {
				add(n.Arrow, "channel send")
			}
		case *ast.RangeStmt:
			if name := lastName(n.X); name != "" && chans[name] {
				add(n.For, "range over a channel")
			}
		case *ast.CallExpr:
			if p, ok := backgroundArg(n); ok {
				add(p, "a call given context.Background() or TODO() (no bound)")
			}
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok {
				break
			}
			name := sel.Sel.Name
			switch {
			case (isPkg(sel.X, "syscall") || isPkg(sel.X, "unix") || isPkg(sel.X, "windows")) && blockingSyscalls[name]:
				add(sel.Sel.Pos(), sel.X.(*ast.Ident).Name+"."+name)
			case len(n.Args) == 0 && (name == "Wait" || name == "Accept"):
				add(sel.Sel.Pos(), name+"()")
			case len(n.Args) == 0 && importsExec && (name == "Run" || name == "Output" || name == "CombinedOutput"):
				add(sel.Sel.Pos(), name+"()")
			case isPkg(sel.X, "http") && (name == "Get" || name == "Post" || name == "Head" || name == "PostForm" || name == "NewRequest"):
				add(sel.Sel.Pos(), "http."+name+" (no context)")
			case isPkg(sel.X, "net") && name == "Dial":
				add(sel.Sel.Pos(), "net.Dial (no context or timeout)")
			}
		}
		return true
	})
	return waits
}

// blockingSyscalls are the system calls that wait for another process.
var blockingSyscalls = map[string]bool{
	"Wait4": true, "Waitid": true, "Poll": true, "Ppoll": true, "EpollWait": true, "Select": true,
	"WaitForSingleObject": true, "WaitForMultipleObjects": true,
}

// backgroundArg reports a context.Background() or context.TODO() passed
// straight to a call: whatever that call waits for, nothing bounds it.
// Deriving a context from it (context.WithTimeout, signal.NotifyContext)
// is not a wait, nor is a log record's context.
func backgroundArg(c *ast.CallExpr) (token.Pos, bool) {
	if sel, ok := c.Fun.(*ast.SelectorExpr); ok {
		switch {
		case isPkg(sel.X, "context"), isPkg(sel.X, "signal") && sel.Sel.Name == "NotifyContext",
			sel.Sel.Name == "Log" || sel.Sel.Name == "LogAttrs":
			return 0, false
		}
	}
	for _, a := range c.Args {
		if ac, ok := a.(*ast.CallExpr); ok && len(ac.Args) == 0 {
			if sel, ok := ac.Fun.(*ast.SelectorExpr); ok && isPkg(sel.X, "context") && (sel.Sel.Name == "Background" || sel.Sel.Name == "TODO") {
				return ac.Pos(), true
			}
		}
	}
	return 0, false
}

// ownLine reports whether only blanks precede offset on its line in src.
func ownLine(src []byte, offset int) bool {
	for i := offset - 1; i >= 0 && src[i] != '\n'; i-- {
		if src[i] != ' ' && src[i] != '\t' {
			return false
		}
	}
	return true
}

// isMarker reports whether a comment says why a wait ends.
func isMarker(text string) bool {
	text = strings.TrimSpace(strings.TrimPrefix(text, "//"))
	for _, p := range []string{"bound:", "lifetime:"} {
		if rest, ok := strings.CutPrefix(text, p); ok && strings.TrimSpace(rest) != "" {
			return true
		}
	}
	return false
}

// isBoundCase reports whether a select case's receive is one that ends by
// itself or with the call: <-ctx.Done(), <-time.After(d), <-t.C.
func isBoundCase(e ast.Expr) bool {
	u, ok := e.(*ast.UnaryExpr)
	if !ok || u.Op != token.ARROW {
		return false
	}
	switch x := u.X.(type) {
	case *ast.CallExpr:
		sel, ok := x.Fun.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		if sel.Sel.Name == "After" && isPkg(sel.X, "time") {
			return true
		}
		if sel.Sel.Name == "Done" && len(x.Args) == 0 {
			if c, ok := sel.X.(*ast.CallExpr); ok { // r.Context().Done()
				if s, ok := c.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "Context" {
					return true
				}
			}
			name := lastName(sel.X)
			return name == "ctx" || strings.HasSuffix(name, "Ctx")
		}
	case *ast.SelectorExpr:
		return x.Sel.Name == "C" // a time.Timer or time.Ticker
	}
	return false
}

// chanNames returns the names declared with a channel type in files: struct
// fields, parameters, variables and x := make(chan T).
func chanNames(files []*ast.File) map[string]bool {
	names := map[string]bool{}
	isChan := func(e ast.Expr) bool {
		if _, ok := e.(*ast.ChanType); ok {
			return true
		}
		if c, ok := e.(*ast.CallExpr); ok && len(c.Args) > 0 {
			if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "make" {
				_, ok := c.Args[0].(*ast.ChanType)
				return ok
			}
		}
		return false
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.Field:
				if isChan(n.Type) {
					for _, id := range n.Names {
						names[id.Name] = true
					}
				}
			case *ast.ValueSpec:
				for i, id := range n.Names {
					if n.Type != nil && isChan(n.Type) || i < len(n.Values) && isChan(n.Values[i]) {
						names[id.Name] = true
					}
				}
			case *ast.AssignStmt:
				for i, lhs := range n.Lhs {
					if i < len(n.Rhs) && len(n.Lhs) == len(n.Rhs) && isChan(n.Rhs[i]) {
						if name := lastName(lhs); name != "" {
							names[name] = true
						}
					}
				}
			}
			return true
		})
	}
	return names
}

// lastName returns x for x and a.b.x, and "" for anything else.
func lastName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return e.Sel.Name
	}
	return ""
}

// isPkg reports whether e is the package name pkg.
func isPkg(e ast.Expr, pkg string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == pkg
}

// TestFindWaits: what the check flags, and what it lets be.
func TestFindWaits(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		body string // of a function; a file that imports os/exec when exec is true
		exec bool
		want int // unmarked waits
	}{
		// Flagged.
		{"bare receive", "<-ch", false, 1},
		{"receive into a variable", "x := <-ch\n_ = x", false, 1},
		{"receive returned", "return <-ch", false, 1},
		{"receive as an argument", "f(<-ch)", false, 1},
		{"send", "ch <- v", false, 1},
		{"WaitGroup.Wait", "wg.Wait()", false, 1},
		{"Cmd.Wait with its error", "err := cmd.Wait()", false, 1},
		{"send of a Wait in a goroutine", "go func() { done <- cmd.Wait() }()", false, 2},
		{"range over a made channel", "ch := make(chan int)\nfor v := range ch { _ = v }", false, 1},
		{"range over a channel field", "type s struct{ events <-chan int }\nfor v := range x.events { _ = v }", false, 1},
		{"select on channels alone", "select {\ncase <-a:\ncase v := <-b:\n_ = v\n}", false, 1},
		{"select with a send alone", "select {\ncase a <- 1:\n}", false, 1},
		{"empty select", "select {}", false, 1},
		{"select on a Done that is no context", "select {\ncase <-p.Done():\n}", false, 1},
		{"Accept", "c, err := ln.Accept()", false, 1},
		{"Run where os/exec is imported", "err := cmd.Run()", true, 1},
		{"Output where os/exec is imported", "out, err := cmd.Output()", true, 1},
		{"http.Get", "resp, err := http.Get(u)", false, 1},
		{"http.NewRequest", "req, err := http.NewRequest(\"GET\", u, nil)", false, 1},
		{"net.Dial", "c, err := net.Dial(\"unix\", p)", false, 1},
		{"Wait4", "syscall.Wait4(-1, &ws, 0, nil)", false, 1},
		{"Poll", "unix.Poll(fds, -1)", false, 1},
		{"a wait given context.Background", "p.Wait(context.Background())", false, 1},
		{"a call given context.TODO", "lock(context.TODO(), f)", false, 1},
		{"marker without a reason", "wg.Wait() // bound:", false, 1},
		{"marker of another kind", "wg.Wait() // waits for the readers", false, 1},
		{"marker two lines up", "// bound: closed above\n\nwg.Wait()", false, 1},
		{"marker for the line above only", "<-a // bound: a is closed\n<-b", false, 1},
		{"marker after code, with comments below", "<-a // bound: a is closed\n// and b?\n<-b", false, 1},

		// Not flagged.
		{"marked receive", "<-ch // bound: closed above", false, 0},
		{"marked on the line before", "// lifetime: the process\nwg.Wait()", false, 0},
		{"marker first in a comment block", "// bound: the child was killed above, so\n// Wait returns once it is reaped.\ncmd.Wait()", false, 0},
		{"marked select", "// bound: closed by Close\nselect {\ncase <-a:\ncase <-b:\n}", false, 0},
		{"select with a default", "select {\ncase <-a:\ndefault:\n}", false, 0},
		{"select with ctx", "select {\ncase v := <-a:\n_ = v\ncase b <- 1:\ncase <-ctx.Done():\n}", false, 0},
		{"select with a derived context", "select {\ncase <-a:\ncase <-s.closeCtx.Done():\n}", false, 0},
		{"select with a request's context", "select {\ncase <-a:\ncase <-r.Context().Done():\n}", false, 0},
		{"select with time.After", "select {\ncase <-a:\ncase <-time.After(d):\n}", false, 0},
		{"select with a timer", "select {\ncase <-a:\ncase now := <-t.C:\n_ = now\n}", false, 0},
		{"a bounded wait group", "g.Wait(time.Second)", false, 0},
		{"a Wait with a context", "p.Wait(ctx)", false, 0},
		{"range over a slice", "for _, x := range list { _ = x }", false, 0},
		{"Run where os/exec is not imported", "c.Run()", false, 0},
		{"a request with a context", "req, err := http.NewRequestWithContext(ctx, \"GET\", u, nil)", false, 0},
		{"net.DialTimeout", "c, err := net.DialTimeout(\"unix\", p, time.Second)", false, 0},
		{"a context derived from Background", "ctx, cancel := context.WithTimeout(context.Background(), d)", false, 0},
		{"signal.NotifyContext", "ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)", false, 0},
		{"a log record's context", "log.Log(context.Background(), slog.LevelInfo, \"x\")", false, 0},
		{"a closure that is not called", "f := func() { _ = 1 }\n_ = f", false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			imp := ""
			if c.exec {
				imp = "import \"os/exec\"\n"
			}
			src := "package p\n" + imp + "func f() {\n" + c.body + "\n}\n"
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "p.go", src, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("%v\n%s", err, src)
			}
			var unmarked []string
			for _, w := range findWaits(fset, f, []byte(src), chanNames([]*ast.File{f})) {
				if !w.marked {
					unmarked = append(unmarked, fmt.Sprintf("%d: %s", w.pos.Line, w.kind))
				}
			}
			if len(unmarked) != c.want {
				t.Errorf("%d unmarked waits %q, want %d, in\n%s", len(unmarked), unmarked, c.want, src)
			}
		})
	}
}
