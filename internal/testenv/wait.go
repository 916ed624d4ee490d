package testenv

import (
	"os"
	"testing"
	"time"
)

// WaitFor polls cond until it holds and fails t if it does not within d.
// It is for a condition that no channel reports, because it lies in
// another process or in the kernel: a file, a process, a log line. It is
// never a pause: a test that must let something happen waits for the sign
// that it has.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

// WaitFile waits up to d for path to exist: a cell that must be running
// before the test goes on creates it first.
func WaitFile(t testing.TB, path string, d time.Duration) {
	t.Helper()
	WaitFor(t, d, "waiting for "+path, func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
}
