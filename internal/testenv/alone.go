package testenv

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// aloneEnv names, in a test binary that Alone re-executed, the one test
// it runs.
const aloneEnv = "IPYBOX_TEST_ALONE"

// Alone runs the test t again in a process of its own: the test binary,
// re-executed with -test.run naming t alone. In the parent it marks t
// parallel, waits for that process, reports its result and output as t's,
// and returns true: the caller returns at once. In the child it returns
// false: the caller runs the test's body, with no other test in the
// process.
//
// It is for tests that measure their process's memory: a peak of the Go
// heap or of the resident set counts every test's allocations, so such a
// test ran alone, and the whole package waited for it. In a process of
// its own it measures only itself, and the package's other tests run
// meanwhile.
func Alone(t *testing.T) (parent bool) {
	t.Helper()
	if os.Getenv(aloneEnv) == t.Name() {
		return false
	}
	t.Parallel()
	var run []string
	for _, part := range strings.Split(t.Name(), "/") {
		run = append(run, "^"+regexp.QuoteMeta(part)+"$")
	}
	args := []string{"-test.run=" + strings.Join(run, "/"), "-test.v", "-test.count=1"}
	if d, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout="+time.Until(d).Round(time.Second).String())
	}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), aloneEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	switch {
	case err != nil:
		t.Errorf("in a process of its own: %v\n%s", err, out)
	case !strings.Contains(string(out), "--- PASS: "+t.Name()+" "):
		// Run but not passed: skipped, or not found (a vacuous run).
		if m := regexp.MustCompile(`(?m)^\s*--- SKIP: ` + regexp.QuoteMeta(t.Name()) + ` .*\n((?:\s{4,}.*\n)*)`).FindSubmatch(out); m != nil {
			t.Skipf("skipped in a process of its own:\n%s", m[1])
		}
		t.Errorf("the test did not pass in a process of its own, and did not fail there either:\n%s", out)
	default:
		t.Logf("in a process of its own:\n%s", out)
	}
	return true
}
