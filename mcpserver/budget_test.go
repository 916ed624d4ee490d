package mcpserver

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv"
)

// newBudget returns a budget over one tenant folder, dir.
func newBudget(dir string, per, total int64) *snapshotBudget {
	return &snapshotBudget{per: per, total: total, dirs: func() []string { return []string{dir} }}
}

// TestBudgetReserveWaitsForRoom: the saves in flight hold their room; one
// more waits until one of them releases, then gets it, and a wait that
// outlives its context fails and says what it waited for.
func TestBudgetReserveWaitsForRoom(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	snaps := filepath.Join(dir, ".ipybox", "snapshots")
	b := newBudget(dir, 1<<20, 2<<20)
	var releases []func()
	for i := range 2 {
		n, release, err := b.reserve(t.Context(), filepath.Join(snaps, "s"+string(rune('a'+i))))
		if err != nil || n != 1<<20 {
			t.Fatalf("save %d: %d, %v; want the session's budget", i, n, err)
		}
		releases = append(releases, release)
	}
	// A third save waits: the two hold the whole budget.
	ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
	defer cancel()
	if _, _, err := b.reserve(ctx, filepath.Join(snaps, "c")); err == nil || !strings.Contains(err.Error(), "waiting for room") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a save past the budget in flight: %v; want a bounded wait that says so", err)
	}
	got := make(chan int64, 1)
	go func() {
		n, release, err := b.reserve(t.Context(), filepath.Join(snaps, "c"))
		if err != nil {
			t.Error(err)
			got <- 0
			return
		}
		release()
		got <- n
	}()
	// Once it waits (freed is made by the waiter), release one.
	testenv.WaitFor(t, time.Minute, "the third save to wait", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.freed != nil
	})
	select {
	case n := <-got:
		t.Fatalf("the third save got %d before any release", n)
	default:
	}
	releases[0]()
	select {
	case n := <-got:
		if n != 1<<20 {
			t.Errorf("the third save after a release: %d, want %d", n, 1<<20)
		}
	case <-time.After(time.Minute):
		t.Fatal("the third save did not get the released room within a minute")
	}
	releases[1]()
	if b.reserved != 0 {
		t.Errorf("reserved after every release: %d, want 0", b.reserved)
	}
}

// TestBudgetCountsOthersOnDisk: the other sessions' snapshot folders (in
// every tenant's folder) count against the workspace's budget, the
// save's own folder does not, and without a workspace budget a save gets
// the session's.
func TestBudgetCountsOthersOnDisk(t *testing.T) {
	t.Parallel()
	a, c := t.TempDir(), t.TempDir()
	for _, d := range []string{a, c} {
		other := filepath.Join(d, ".ipybox", "snapshots", "other")
		if err := os.MkdirAll(other, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(other, "namespace"), make([]byte, 300<<10), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mine := filepath.Join(a, ".ipybox", "snapshots", "mine")
	if err := os.MkdirAll(mine, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mine, "namespace"), make([]byte, 900<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	b := &snapshotBudget{per: -1, total: 1 << 20, dirs: func() []string { return []string{a, c} }}
	n, release, err := b.reserve(t.Context(), mine)
	if err != nil {
		t.Fatal(err)
	}
	release()
	if n <= 0 || n > (1<<20)-(600<<10) {
		t.Errorf("room beside two others' 300 KiB each: %d; want at most %d (the save's own folder not counted)", n, (1<<20)-(600<<10))
	}
	b = newBudget(a, 5<<20, -1)
	if n, _, err := b.reserve(t.Context(), mine); err != nil || n != 5<<20 {
		t.Errorf("without a workspace budget: %d, %v; want the session's %d", n, err, 5<<20)
	}
}

// TestBudgetPrincipalShare attacks issue 34 item 9 for snapshots: with
// several principals, one principal's snapshots on disk and saves in
// flight take at most half of the workspace's budget, so that another
// principal's save still finds room; one principal alone is not capped.
func TestBudgetPrincipalShare(t *testing.T) {
	t.Parallel()
	alice, bob := t.TempDir(), t.TempDir()
	snaps := func(d, name string) string { return filepath.Join(d, ".ipybox", "snapshots", name) }
	// alice's kernel filled one of her snapshot folders (its running
	// kernel can write it between saves).
	full := snaps(alice, "full")
	if err := os.MkdirAll(full, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "namespace"), make([]byte, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	b := &snapshotBudget{per: 2 << 20, total: 4 << 20, share: 2 << 20, dirs: func() []string { return []string{alice, bob} }}
	if _, _, err := b.reserve(t.Context(), snaps(alice, "more")); err == nil || !strings.Contains(err.Error(), "one principal may hold") {
		t.Fatalf("alice's save past her share: %v; want a refusal that names the share", err)
	}
	n, release, err := b.reserve(t.Context(), snaps(bob, "s"))
	if err != nil || n != 2<<20 {
		t.Fatalf("bob's save beside alice's full share: %d, %v; want his session's budget", n, err)
	}
	release()

	// In flight: alice's saves hold her share; bob's still gets room.
	os.RemoveAll(full)
	b = &snapshotBudget{per: 1 << 20, total: 4 << 20, share: 2 << 20, dirs: func() []string { return []string{alice, bob} }}
	var releases []func()
	for i := range 2 {
		n, release, err := b.reserve(t.Context(), snaps(alice, "a"+string(rune('0'+i))))
		if err != nil || n != 1<<20 {
			t.Fatalf("alice's save %d: %d, %v", i, n, err)
		}
		releases = append(releases, release)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
	defer cancel()
	if _, _, err := b.reserve(ctx, snaps(alice, "a2")); err == nil || !strings.Contains(err.Error(), "waiting for room") {
		t.Errorf("alice's third save while two hold her share: %v; want a bounded wait", err)
	}
	if n, release, err := b.reserve(t.Context(), snaps(bob, "b0")); err != nil || n != 1<<20 {
		t.Errorf("bob's save while alice's hold her share: %d, %v; want his session's budget", n, err)
	} else {
		release()
	}
	for _, r := range releases {
		r()
	}

	// One principal (no share) may take the whole budget, as before.
	b = &snapshotBudget{per: -1, total: 4 << 20, dirs: func() []string { return []string{alice} }}
	if n, release, err := b.reserve(t.Context(), snaps(alice, "x")); err != nil || n != 4<<20 {
		t.Errorf("one principal: %d, %v; want the whole budget", n, err)
	} else {
		release()
	}
}

// TestBudgetShareOfThree: with three principals the share is a third, and
// what two of them hold past their shares (their kernels write their own
// snapshot folders) counts against the others only up to each share: the
// third still gets its own (acc3, attack 10).
func TestBudgetShareOfThree(t *testing.T) {
	t.Parallel()
	alice, bob, carol := t.TempDir(), t.TempDir(), t.TempDir()
	snaps := func(d, name string) string { return filepath.Join(d, ".ipybox", "snapshots", name) }
	for _, d := range []string{alice, bob} {
		if err := os.MkdirAll(snaps(d, "full"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(snaps(d, "full"), "namespace"), make([]byte, 4<<20), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b := &snapshotBudget{per: -1, total: 6 << 20, share: 2 << 20, dirs: func() []string { return []string{alice, bob, carol} }}
	n, release, err := b.reserve(t.Context(), snaps(carol, "s"))
	if err != nil || n != 2<<20 {
		t.Fatalf("carol's save beside two principals past their shares: %d, %v; want her share", n, err)
	}
	release()
	if _, _, err := b.reserve(t.Context(), snaps(alice, "more")); err == nil || !strings.Contains(err.Error(), "one principal may hold") {
		t.Errorf("alice's save past her share: %v", err)
	}
}
