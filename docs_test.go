package ipybox_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

var pythonBlock = regexp.MustCompile("(?s)```python\n(.*?)```")

// docExample is what one Python example of a doc must do.
type docExample struct {
	want   string // the cell's text contains this
	images int    // the cell shows this many images
}

// runDocExamples runs every Python example of the markdown file doc, in
// order, in one kernel with server-everything registered as "everything",
// as the docs describe. Tool calls whose arguments contain rejectArg are
// rejected (the examples of the error path); the others are approved.
// want has one entry per example.
func runDocExamples(t *testing.T, doc, rejectArg string, want []docExample) {
	bin := testenv.NPMBin(t, "mcp-server-everything")
	text, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	blocks := pythonBlock.FindAllStringSubmatch(string(text), -1)
	if len(blocks) != len(want) {
		t.Fatalf("found %d python examples in %s, want %d: update the test with the doc", len(blocks), doc, len(want))
	}
	ex := start(t, &ipybox.Options{Approver: func(_ context.Context, r *ipybox.ApprovalRequest) error {
		var args map[string]any
		json.Unmarshal(r.Args, &args)
		for _, v := range args {
			if s, ok := v.(string); ok && s == rejectArg {
				return errors.New("not this one")
			}
		}
		return nil
	}})
	register(t, ex, "everything", ipybox.ServerConfig{Command: bin, Args: []string{"stdio"}})
	for i, b := range blocks {
		res := run(t, ex, b[1])
		if !strings.Contains(res.Text, want[i].want) || len(res.Images) != want[i].images {
			t.Errorf("%s example %d printed %q and %d images, want it to contain %q and %d images:\n%s",
				doc, i+1, res.Text, len(res.Images), want[i].want, want[i].images, b[1])
		}
	}
}

// TestDocsPythonExamples runs every Python example of docs/tools.md.
func TestDocsPythonExamples(t *testing.T) {
	t.Parallel()
	// The fourth example shows the error path: the application rejects it.
	runDocExamples(t, "docs/tools.md", "maybe", []docExample{
		{want: "hello"},
		{want: "Result float"},
		{want: "1 image/png", images: 1},
		{want: "not run: ApprovalRejectedError"},
	})
}

// TestSkillPythonExamples runs every Python example of the Claude Code
// plugin's skill. The tool calls of its JSON examples (register_mcp_server,
// install_package, reset) are made through `ipybox mcp`, as the plugin
// starts it, by TestPluginClaudeCode in cmd/ipybox.
func TestSkillPythonExamples(t *testing.T) {
	t.Parallel()
	runDocExamples(t, "plugin/skills/codeact/SKILL.md", "deploy to production", []docExample{
		{want: "location: Literal[\"New York\", \"Chicago\", \"Los Angeles\"] = _Field(..., description=\"Choose city\")"},
		{want: "Echo: humid: New York, Chicago; total 69"},
		{want: "refused: ['deploy to production: "},
		{want: "", images: 1},
		{want: "[]"},
		{want: "Echo: tools survive a reset"},
	})
}

// TestDesignListsEveryPackage keeps docs/design.md's package table true:
// every package of the module has a row.
func TestDesignListsEveryPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "./...").Output()
	if err != nil {
		testenv.Missing(t, "go list: %v", err)
	}
	doc, err := os.ReadFile("docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(doc), "## Packages")
	table, _, _ = strings.Cut(table, "\n## ")
	for _, pkg := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, "github.com/ipybox/ipybox"), "/")
		name := "`" + rel + "`"
		if rel == "" {
			name = "`ipybox` (root)"
		}
		if !strings.Contains(table, name) {
			t.Errorf("docs/design.md's package table has no row for %s", name)
		}
	}
}

// TestNoCitationOutsideTheRepository: the project's own docs cite
// docs/design.md; the DESIGN.md the project was built to lives outside
// the repository, where a reader cannot follow a citation.
func TestNoCitationOutsideTheRepository(t *testing.T) {
	out, err := exec.Command("git", "grep", "-n", "DESIGN\\.md").Output()
	if err != nil && len(out) == 0 {
		return // no match (git grep exits 1)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(line, "docs_test.go:") {
			continue
		}
		t.Errorf("cites a DESIGN.md that is not in the repository: %s", line)
	}
}

// TestReadmeNamesSetupPackages keeps the README's list of what set-up
// installs true: every Debian package scripts/setup.sh installs is named.
func TestReadmeNamesSetupPackages(t *testing.T) {
	setup, err := os.ReadFile("scripts/setup.sh")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(setup), "\npkgs=(\n")
	block, _, ok2 := strings.Cut(block, "\n)\n")
	if !ok || !ok2 {
		t.Fatal("scripts/setup.sh has no pkgs=( ... ) block")
	}
	var n int
	for line := range strings.Lines(block) {
		line, _, _ = strings.Cut(line, "#")
		for _, p := range strings.Fields(line) {
			n++
			if !strings.Contains(string(readme), "`"+p+"`") {
				t.Errorf("README.md does not name %s, which scripts/setup.sh installs", p)
			}
		}
	}
	if n < 10 {
		t.Errorf("read %d packages from scripts/setup.sh; the block's format changed", n)
	}
}

// TestDocsNameTheWheelsMacOS keeps the oldest macOS that the READMEs
// promise equal to the one the wheels' tags say (scripts/wheels.sh's
// macosx_N_0, which TestWheels checks against the binaries): they said
// macOS 12 while the Go 1.27 binaries and their tags say 13.
func TestDocsNameTheWheelsMacOS(t *testing.T) {
	t.Parallel()
	script, err := os.ReadFile("scripts/wheels.sh")
	if err != nil {
		t.Fatal(err)
	}
	tags := regexp.MustCompile(`macosx_(\d+)_0_`).FindAllStringSubmatch(string(script), -1)
	if len(tags) == 0 {
		t.Fatal("scripts/wheels.sh names no macosx_N_0 tag")
	}
	for _, m := range tags[1:] {
		if m[1] != tags[0][1] {
			t.Fatalf("scripts/wheels.sh's macOS tags differ: %s and %s", tags[0][0], m[0])
		}
	}
	want := tags[0][1]
	for _, f := range []string{"README.md", "python/README.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		said := regexp.MustCompile(`macOS (\d+) or\s+newer`).FindAllStringSubmatch(string(b), -1)
		if len(said) == 0 {
			t.Errorf("%s does not say which macOS the wheels need (macOS %s or newer)", f, want)
		}
		for _, m := range said {
			if m[1] != want {
				t.Errorf("%s says %q; the wheels are tagged macosx_%s_0", f, m[0], want)
			}
		}
	}
}
