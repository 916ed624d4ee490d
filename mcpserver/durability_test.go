package mcpserver

import (
	"context"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/waitgroup"
)

// TestDurabilityExpiredRecords: the reaper's read of the state folder
// returns the records that outlived the expiry and are not live here,
// and is made at most once per tenth of the expiry.
func TestDurabilityExpiredRecords(t *testing.T) {
	t.Parallel()
	state, err := openStateDir(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	old, fresh, live := handleKey("old"), handleKey("fresh"), handleKey("live")
	for k, used := range map[[32]byte]time.Time{old: now.Add(-2 * time.Hour), fresh: now, live: now.Add(-2 * time.Hour)} {
		if err := state.write(k, &record{V: recordVersion, Principal: localPrincipal, Created: used, Used: used}); err != nil {
			t.Fatal(err)
		}
	}
	d := &durability{state: state, expiry: time.Hour, hibernateAfter: time.Minute}
	got := d.expired(now, map[[32]byte]bool{live: true})
	if len(got) != 1 || got[0].key != old {
		t.Fatalf("expired: %d records, want the old one alone", len(got))
	}
	if again := d.expired(now.Add(time.Second), nil); again != nil {
		t.Errorf("a second read within a tenth of the expiry: %d records, want none (not due)", len(again))
	}
	if due := d.expired(now.Add(7*time.Minute), nil); len(due) != 2 {
		t.Errorf("a read once due: %d records, want the two old ones", len(due))
	}
	if none := (&durability{expiry: time.Hour}).expired(now, nil); none != nil {
		t.Error("without a state folder: records")
	}
}

// TestDurabilityReaperStartsOnce: the reaper starts once, however often
// it is asked to, calls reap at its ticks, and ends with its context.
func TestDurabilityReaperStartsOnce(t *testing.T) {
	t.Parallel()
	d := &durability{expiry: time.Hour, hibernateAfter: 100 * time.Millisecond}
	ctx, cancel := context.WithCancel(t.Context())
	var wg waitgroup.Group
	ticks := make(chan time.Time, 100)
	second := make(chan time.Time, 100)
	d.startReaper(ctx, &wg, func(now time.Time) { ticks <- now })
	d.startReaper(ctx, &wg, func(now time.Time) { second <- now })
	for range 2 {
		select {
		case <-ticks:
		case <-time.After(time.Minute):
			t.Fatal("the reaper did not tick within a minute")
		}
	}
	cancel()
	if !wg.Wait(time.Minute) {
		t.Fatal("the reaper did not end with its context")
	}
	if len(second) != 0 {
		t.Error("a second start made a second reaper")
	}
}
