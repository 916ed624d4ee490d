package pyinstall

import (
	"strings"
	"testing"
)

// TestHint: the fix fits the system.
func TestHint(t *testing.T) {
	for goos, want := range map[string]string{
		"linux":   "apt-get install python3-ipykernel",
		"freebsd": "pip install ipykernel",
		"darwin":  "brew install python",
		"windows": "py -3 -m pip install ipykernel",
	} {
		if got := Hint(goos, "ipykernel"); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want it to mention %q", goos, got, want)
		}
	}
}
