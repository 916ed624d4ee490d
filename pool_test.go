package ipybox_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

func TestPool(t *testing.T) {
	testenv.CheckGoroutines(t)
	py := testenv.NeedsPython(t)
	pool := ipybox.NewPool(2, &ipybox.Options{Python: py, WorkDir: t.TempDir()})
	waitReady(t, pool, 2)

	ctx := context.Background()
	// A warm Get hands out a kernel started before it: one of the
	// processes below this one before the call (a check of what ran, not
	// of how long it took, which the machine's load decides).
	before := map[string]bool{}
	for _, p := range testenv.Descendants(os.Getpid()) {
		before[strconv.Itoa(p.Pid)] = true
	}
	a, err := pool.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Execute(ctx, "x = 1\nx + 1", nil)
	if err != nil || res.Text != "2" {
		t.Fatalf("%v %+v", err, res)
	}
	if res, err := a.Execute(ctx, "import os\nprint(os.getpid())", nil); err != nil || !before[strings.TrimSpace(res.Text)] {
		t.Errorf("a warm Get started a kernel: pid %v (%v), before it %v", res, err, before)
	}
	b, err := pool.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Executors of a pool are independent kernels.
	if _, err := b.Execute(ctx, "x", nil); err == nil {
		t.Error("b sees a's variable")
	}
	waitReady(t, pool, 2) // refilled in the background
	a.Close()
	b.Close()
	if err := pool.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Get(ctx); !errors.Is(err, ipybox.ErrClosed) {
		t.Errorf("Get after Close: %v", err)
	}
	if err := pool.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestPoolColdGetAndFailure(t *testing.T) {
	testenv.CheckGoroutines(t)
	// A pool whose starts fail: Get reports the error; Close is prompt.
	pool := ipybox.NewPool(1, &ipybox.Options{Python: "/nonexistent/python3", WorkDir: t.TempDir()})
	_, err := pool.Get(context.Background())
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/python3") || pool.Ready() != 0 {
		t.Fatalf("Get from a failing pool: %v", err)
	}
	begin := time.Now()
	pool.Close()
	if d := time.Since(begin); d > 3*time.Second {
		t.Errorf("Close took %v", d)
	}
}

func waitReady(t *testing.T, pool *ipybox.Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for pool.Ready() < n {
		if time.Now().After(deadline) {
			t.Fatalf("pool has %d ready after 30 s, want %d", pool.Ready(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
