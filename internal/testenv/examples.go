package testenv

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ipybox/ipybox/internal/kernel"
)

// SkipExamples makes the Example functions whose names match pattern skip
// when need reports a missing tool, or with -short, the way Needs
// functions skip a test: an example has no *testing.T to skip itself, and
// without its tool it would fail on its output. In CI (CI=true) nothing
// is skipped, so a missing tool fails the example there. Call it in
// TestMain before m.Run; it parses the flags and adds pattern to
// -test.skip.
func SkipExamples(pattern string, need func() error) {
	if !flag.Parsed() {
		flag.Parse()
	}
	why := "tier 3 example: skipped with -short"
	if !testing.Short() {
		err := need()
		if err == nil || InCI() {
			return
		}
		why = fmt.Sprintf("skipped (missing): %v", err)
	}
	skip := flag.Lookup("test.skip")
	if old := skip.Value.String(); old != "" {
		pattern = old + "|" + pattern
	}
	if err := skip.Value.Set(pattern); err != nil {
		panic(err)
	}
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "examples %s %s\n", pattern, why)
	}
}

// HavePython reports why no interpreter that can import ipykernel was
// found, or nil.
func HavePython() error {
	_, err := kernel.FindPython(context.Background(), "")
	return err
}

// HaveNPMBin reports why the npm test server name (see NPMBin) cannot
// run, or nil.
func HaveNPMBin(name string) func() error {
	return func() error {
		if _, err := exec.LookPath("node"); err != nil {
			return fmt.Errorf("node not on PATH; run scripts/setup.sh")
		}
		_, file, _, _ := runtime.Caller(0)
		p := filepath.Join(filepath.Dir(file), "..", "..", "tools", "npm", "node_modules", ".bin", name)
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s not installed; run scripts/setup.sh", p)
		}
		return nil
	}
}
