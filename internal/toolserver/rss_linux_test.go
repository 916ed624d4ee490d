package toolserver_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// rssPeak resets the process's peak resident set (VmHWM) and returns a
// function that reports its growth since: the peak over the resident set
// at the reset. ok is false where /proc/self/clear_refs cannot be written.
func rssPeak(t *testing.T) (since func() (grew int64), ok bool) {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return nil, false
	}
	base := procStatus(t, "VmRSS:")
	return func() int64 { return procStatus(t, "VmHWM:") - base }, true
}

// procStatus returns a field of /proc/self/status, in bytes.
func procStatus(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}
