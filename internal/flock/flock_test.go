//go:build unix

package flock

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func open(t *testing.T, p string) *os.File {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestLock: a held exclusive lock makes another open file of the same
// path wait, bounded by wait and by ctx; closing the holder releases it;
// shared locks go together.
func TestLock(t *testing.T) {
	t.Parallel()
	// The waits run on the bubble's clock: exact, and at once.
	synctest.Test(t, testLock)
}

func testLock(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	a, b := open(t, p), open(t, p)
	ctx := context.Background()
	if err := Lock(ctx, a, true, time.Second); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := Lock(ctx, b, true, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "locked by another process for more than 100ms") {
		t.Fatalf("second exclusive lock = %v, want the bounded wait's error", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 100*time.Millisecond+poll {
		t.Errorf("the bounded wait took %v, want 100ms to 100ms and a poll", d)
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := Lock(cctx, b, false, time.Minute); err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Fatalf("lock under an ending ctx = %v, want ctx's error", err)
	}
	a.Close()
	if err := Lock(ctx, b, false, time.Second); err != nil {
		t.Fatalf("lock after the holder closed: %v", err)
	}
	c := open(t, p)
	if err := Lock(ctx, c, false, time.Second); err != nil {
		t.Fatalf("a second shared lock: %v", err)
	}
}
