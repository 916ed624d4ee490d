// Package ci decides whether a test whose tool is missing skips or fails:
// locally it skips, with CI=true it fails, so CI never passes by skipping.
//
// It is internal/testenv's leaf: it imports nothing of the module, so the
// tests inside the packages that testenv itself imports (kernel, seccomp,
// safefs, rundir...) can use it. Everything else calls testenv, whose
// Missing and NeedsTool are these.
package ci

import (
	"os"
	"os/exec"
	"testing"
)

// InCI reports whether the tests run in CI, where missing tools are fatal.
func InCI() bool { return os.Getenv("CI") == "true" }

// Missing skips t locally and fails it in CI.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("required in CI: "+format, args...)
	}
	t.Skipf("skipped (missing): "+format, args...)
}

// NeedsTool returns the path of the named program, or calls Missing.
func NeedsTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, "%s not on PATH; run scripts/setup.sh", name)
	}
	return p
}
