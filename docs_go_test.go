package ipybox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv"
)

// goBlock finds the Go blocks of a Markdown file, with the comment line
// before one, if any.
var goBlock = regexp.MustCompile("(?s)(<!--[^\n]*-->\n)?```go\n(.*?)```")

// signatures marks a Go block that lists an API rather than runs.
const signatures = "<!-- signatures, not a program -->"

// docSnippetWant is what a snippet must print, by file and position.
var docSnippetWant = map[string][]string{
	"README.md#1":         {"12.566370614359172", "0\n1\n2\n", "images: []"},
	"README.md#2":         {`approving tool call everything.echo({"message": "hi"})`, "Echo: hi"},
	"docs/sandbox.md#1":   {"PermissionError", "/etc/shadow"},
	"docs/approvals.md#1": {"asked: echo other - no rule matched", "hi", "ApprovalRejectedError"},
	"docs/tools.md#1":     {"from mcptools.everything.echo import Params, run"},
}

// TestDocsGoSnippets runs every Go block of the README and docs/ as
// written: each becomes the body of a function that gets ctx and ws (a
// fresh workspace) and, when the block uses an ex it does not start, a
// started Executor. A block marked as signatures is skipped.
func TestDocsGoSnippets(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	everything := testenv.NPMBin(t, "mcp-server-everything")
	files, _ := filepath.Glob("docs/*.md")
	files = append([]string{"README.md"}, files...)
	var bodies, names []string
	var mainStart string // the start of main that docs/sandbox.md shows
	for _, f := range files {
		doc, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range goBlock.FindAllStringSubmatch(string(doc), -1) {
			if strings.TrimSpace(m[1]) == signatures {
				continue
			}
			if body, ok := strings.CutPrefix(m[2], "func main() {\n"); ok {
				// The program's main starts as the doc says, then runs the
				// snippets where the doc's main calls run().
				i := strings.Index(body, "\trun()")
				if i < 0 || mainStart != "" {
					t.Fatalf("%s: a main block must call run() after its start, and only one may exist", f)
				}
				mainStart = body[:i]
				continue
			}
			n++
			bodies = append(bodies, m[2])
			names = append(names, fmt.Sprintf("%s#%d", f, n))
		}
	}
	if len(bodies) < 4 {
		t.Fatalf("found %d Go snippets in the README and docs/", len(bodies))
	}
	for name := range docSnippetWant {
		if strings.Contains(name, "#") && !slices.Contains(names, name) {
			t.Errorf("no snippet %s: the docs changed; update docSnippetWant", name)
		}
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if mainStart == "" {
		t.Fatal("docs/sandbox.md no longer shows the start of main a sandboxed program needs")
	}
	prog := snippetProgram(mainStart, bodies)
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "snippets")
	if out, err := exec.Command("go", "build", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("the Go snippets do not compile as written:\n%s\nprogram:\n%s", out, numbered(prog))
	}
	for i, name := range names {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, fmt.Sprint(i), t.TempDir())
			cmd.Env = append(os.Environ(), "IPYBOX_PYTHON="+py, "PATH="+filepath.Dir(everything)+":"+os.Getenv("PATH"))
			cmd.WaitDelay = 5 * time.Second
			b, err := cmd.CombinedOutput()
			out := string(b)
			if err != nil {
				t.Fatalf("snippet failed: %v\n%s\n%s", err, out, bodies[i])
			}
			for _, want := range docSnippetWant[name] {
				if !strings.Contains(out, want) {
					t.Errorf("snippet printed %q, want it to contain %q", out, want)
				}
			}
		})
	}
}

// snippetProgram wraps each body in a function and dispatches on argv.
func snippetProgram(mainStart string, bodies []string) string {
	var b strings.Builder
	b.WriteString(`package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/ipybox/ipybox"
)

var (
	_ = errors.New
	_ = time.Second
)

func main() {
` + mainStart + `	run()
}

func run() {
	i, err := strconv.Atoi(os.Args[1])
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := snippets[i](ctx, os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

`)
	b.WriteString("var snippets = []func(context.Context, string) error{\n")
	for i := range bodies {
		fmt.Fprintf(&b, "\tsnippet%d,\n", i)
	}
	b.WriteString("}\n")
	startsEx := regexp.MustCompile(`\bex, err :?= ipybox\.Start`)
	usesEx := regexp.MustCompile(`\bex\.`)
	for i, body := range bodies {
		fmt.Fprintf(&b, "\nfunc snippet%d(ctx context.Context, ws string) error {\n", i)
		if usesEx.MatchString(body) && !startsEx.MatchString(body) {
			b.WriteString("\tex, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: ws})\n\tif err != nil {\n\t\treturn err\n\t}\n\tdefer ex.Close()\n\t_ = err\n")
		}
		b.WriteString("\t_ = ws\n")
		for _, line := range strings.Split(strings.TrimRight(body, "\n"), "\n") {
			b.WriteString("\t" + line + "\n")
		}
		b.WriteString("\treturn nil\n}\n")
	}
	return b.String()
}

func numbered(s string) string {
	var b strings.Builder
	for i, l := range strings.Split(s, "\n") {
		fmt.Fprintf(&b, "%4d %s\n", i+1, l)
	}
	return b.String()
}
