package ipybox_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestZygoteExecutors: Executors forked from a zygote keep their own
// state, reset to a fresh kernel, and refuse a mismatched interpreter.
func TestZygoteExecutors(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	ctx := context.Background()
	z, err := ipybox.NewZygote(ctx, py, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { z.Close() }) // after the executors' own cleanups
	a := start(t, &ipybox.Options{Zygote: z})
	b := start(t, &ipybox.Options{Zygote: z, KernelEnv: map[string]string{"ONLY_B": "yes"}})
	run(t, a, "x = 'a'")
	if res := run(t, b, "import os\nprint('x' in dir(), os.environ.get('ONLY_B'))"); strings.TrimSpace(res.Text) != "False yes" {
		t.Errorf("b sees a's state or misses its env: %q", res.Text)
	}
	if err := a.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if res := run(t, a, "print('x' in dir())"); strings.TrimSpace(res.Text) != "False" {
		t.Errorf("after Reset: %q", res.Text)
	}
	_, err = ipybox.Start(ctx, &ipybox.Options{Zygote: z, Python: "/usr/bin/env", WorkDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "not the zygote's interpreter") {
		t.Errorf("a mismatched Python: %v", err)
	}
}
