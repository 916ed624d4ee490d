package codecheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/testenv"
)

// missingSkip matches a skip that says a tool or a facility is missing:
// such a skip goes through testenv.Missing (or internal/testenv/ci, its
// leaf), which fails in CI, so that a broken set-up cannot pass CI by
// skipping. Skips for a platform, -short, or a user the test needs (root)
// are conditions, not missing tools, and stay.
var missingSkip = regexp.MustCompile(`\.Skipf?\("(no |[^"]*\b(not on PATH|not installed|missing|unavailable|cannot find)\b)`)

// TestSkipsGoThroughTestenv: no test skips on a missing tool by itself.
func TestSkipsGoThroughTestenv(t *testing.T) {
	t.Parallel()
	root := testenv.RepoRoot(t)
	files := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if rel != "." && strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata" || rel == "internal/testenv" || rel == "internal/codecheck" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		files++
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if missingSkip.MatchString(line) {
				t.Errorf("%s:%d: a skip on a missing tool passes CI silently; call testenv.Missing or testenv.NeedsTool (internal/testenv/ci inside the packages testenv imports)", filepath.ToSlash(rel), i+1)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Errorf("read only %d test files; is the walk finding them?", files)
	}
}

// TestMissingSkip checks the pattern both ways.
func TestMissingSkip(t *testing.T) {
	for line, want := range map[string]bool{
		`t.Skip("no git")`:                             true,
		`t.Skipf("no true: %v", err)`:                  true,
		`t.Skip("python3 not on PATH")`:                true,
		`t.Skip("tier 3 test: skipped with -short")`:   false,
		`t.Skip("needs root")`:                         false,
		`t.Skip("the zygote needs Linux")`:             false,
		`testenv.Missing(t, "no pseudo-terminal: %v")`: false,
	} {
		if got := missingSkip.MatchString(line); got != want {
			t.Errorf("missingSkip(%s) = %v, want %v", line, got, want)
		}
	}
}
