package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCheckInit: a binary that does not dispatch InitCommand (one that
// exits, one that prints something else, one that never stops) gets a
// ProbeError that says how to fix main, within the check's bound; the test
// binary, whose TestMain dispatches, passes.
func TestCheckInit(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name string
		bin  string
		ok   bool
	}{
		{"dispatches", self, true},
		{"exits quietly", script("quiet", "exit 0"), false},
		{"prints something else", script("other", "echo usage: other"), false},
		{"runs forever", script("forever", "exec sleep 600"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			begin := time.Now()
			err := checkInit(context.Background(), c.bin)
			if c.ok {
				if err != nil {
					t.Fatalf("checkInit(%s) = %v, want nil", c.bin, err)
				}
				return
			}
			var pe *ProbeError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), "does not serve as the sandbox's init") ||
				!strings.Contains(err.Error(), "ipybox.SandboxInit()") {
				t.Fatalf("checkInit(%s) = %v, want a ProbeError that shows the dispatch for main", c.bin, err)
			}
			if d := time.Since(begin); d > initCheckTimeout+3*time.Second {
				t.Errorf("the check took %v, past its bound %v", d, initCheckTimeout)
			}
		})
	}
}
