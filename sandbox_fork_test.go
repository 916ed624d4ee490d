//go:build linux

package ipybox_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
)

// TestSandboxForkedExecutor: an Executor whose sandboxed kernels are
// forked (NewSandboxZygote) runs cells, tool-server calls and resets in a
// sandbox of its own, and two of them share no process.
func TestSandboxForkedExecutor(t *testing.T) {
	z := sandboxZygote(t, "")
	a := startSandboxed(t, &ipybox.Options{Zygote: z})
	b := startSandboxed(t, &ipybox.Options{Zygote: z, WorkDir: a.Workspace()})
	probe := `import os
print(sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()), os.getppid())
try:
    open("/etc/shadow"); print("shadow readable")
except OSError:
    print("shadow denied")
`
	for _, ex := range []*ipybox.Executor{a, b} {
		got := run(t, ex, probe).Text
		if !strings.Contains(got, "[1] 0") || !strings.Contains(got, "shadow denied") {
			t.Errorf("forked kernel sees %q; want only its init, and no /etc/shadow", got)
		}
	}
	run(t, a, "x = 41")
	if got := run(t, a, "x + 1").Text; got != "42" {
		t.Errorf("state: %q", got)
	}
	if got := run(t, b, "print('x' in dir())").Text; !strings.Contains(got, "False") {
		t.Errorf("a sibling's state is visible: %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t0 := time.Now()
	if err := a.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	got := run(t, a, "print('x' in dir())").Text
	t.Logf("reset to next result: %v", time.Since(t0))
	if !strings.Contains(got, "False") {
		t.Errorf("after reset: %q", got)
	}
	if got := run(t, a, "!echo shell-ok").Text; !strings.Contains(got, "shell-ok") {
		t.Errorf("shell: %q", got)
	}
	_ = os.Getpid
}
