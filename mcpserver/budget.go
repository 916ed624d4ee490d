package mcpserver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/ipybox/ipybox/internal/safefs"
)

// snapshotBudget is the workspace's snapshot budget: it owns the room
// that the saves in flight hold (reserved) and the signal that one ended
// (freed), under its lock mu, a leaf that is held across no I/O (the
// snapshot folders are measured outside it). It calls only dirs, which
// names the tenants' folders (the budget is the server's, over its
// principals), and reads the snapshot folders below them.
type snapshotBudget struct {
	// per bounds one session's snapshot (Options.Durability.SnapshotBytes), total
	// all of them (Options.Durability.SnapshotWorkspaceBytes); negative: no limit.
	per, total int64
	dirs       func() []string
	// share bounds what one tenant's snapshots and saves in flight take
	// of total, with several principals: total divided by their number,
	// so that no principal, nor any group of them, fills the budget and
	// fails another principal's saves; zero: no share. A tenant's
	// snapshots count against the others' room only up to its share:
	// its kernel can write its own snapshot folders past it (they are
	// bound writable for it), and that excess is its own loss alone
	// (acc3, attack 10).
	share int64

	mu sync.Mutex
	// reserved is what the saves in flight may take of the workspace's
	// budget, reservedBy the same by tenant folder; freed is closed (and
	// replaced) when one ends.
	reserved   int64
	reservedBy map[string]int64
	freed      chan struct{}
}

// tenantOf returns the tenant folder among dirs whose snapshots hold dir.
func (b *snapshotBudget) tenantOf(dir string) string {
	for _, d := range b.dirs() {
		if filepath.Dir(dir) == filepath.Join(d, ".ipybox", "snapshots") {
			return d
		}
	}
	return ""
}

// minSave is the least room a save is started with.
const minSave = 64 << 10

// reserve returns the size a save into dir may take, and holds it against
// the workspace's budget until release: the session's budget, or what the
// other sessions' snapshots leave of the workspace's. While saves in
// flight hold that room (SIGTERM saves every session at once), it waits
// for one to end, until ctx does; when the snapshots on disk leave less
// than minSave, it fails.
func (b *snapshotBudget) reserve(ctx context.Context, dir string) (int64, func(), error) {
	per := b.per
	total := b.total
	if total < 0 {
		if per < 0 {
			return 0, func() {}, nil
		}
		return per, func() {}, nil
	}
	if b.share > 0 {
		if tenant := b.tenantOf(dir); tenant != "" {
			return b.reserveShare(ctx, dir, tenant)
		}
	}
	for {
		used, err := b.snapshotsSize(dir)
		if err != nil {
			return 0, nil, err
		}
		want := total - used
		if per >= 0 && per < want {
			want = per
		}
		if want < minSave {
			switch {
			case per >= 0 && per < total-used:
				// The session's own budget is what refuses.
				return 0, nil, fmt.Errorf("the session's snapshot budget (--snapshot-budget) is %d bytes, under the %d a save needs at least; raise it", per, minSave)
			}
			return 0, nil, fmt.Errorf("the workspace's snapshots already take %d of their %d bytes (--snapshot-workspace-budget); close sessions you no longer need (close_session), or raise the budget", used, total)
		}
		b.mu.Lock()
		if b.reserved+want <= total-used {
			b.reserved += want
			b.mu.Unlock()
			return want, b.releaser(want, ""), nil
		}
		if err := b.waitFreed(ctx); err != nil {
			return 0, nil, err
		}
	}
}

// releaser returns the end of a reservation of want bytes (by tenant,
// when not ""), which wakes the saves that wait for room.
func (b *snapshotBudget) releaser(want int64, tenant string) func() {
	return func() {
		b.mu.Lock()
		b.reserved -= want
		if tenant != "" {
			if b.reservedBy[tenant] -= want; b.reservedBy[tenant] <= 0 {
				delete(b.reservedBy, tenant)
			}
		}
		if b.freed != nil {
			close(b.freed)
			b.freed = nil
		}
		b.mu.Unlock()
	}
}

// waitFreed, called with b.mu held, releases it and waits for a
// reservation to end, or for ctx to.
func (b *snapshotBudget) waitFreed(ctx context.Context) error {
	if b.freed == nil {
		b.freed = make(chan struct{})
	}
	freed := b.freed
	b.mu.Unlock()
	select {
	case <-freed: // bound: ctx
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for room in the workspace's snapshot budget, which the saves of other sessions hold: %w", context.Cause(ctx))
	}
}

// reserveShare is reserve for a save into dir of tenant, with shares:
// every other tenant's snapshots and saves in flight count up to its
// share, so that whatever they hold, tenant finds its own share free.
func (b *snapshotBudget) reserveShare(ctx context.Context, dir, tenant string) (int64, func(), error) {
	per, total, share := b.per, b.total, b.share
	for {
		sizes := map[string]int64{}
		for _, d := range b.dirs() {
			sizes[d] = b.tenantSnapshotsSize(filepath.Join(d, ".ipybox", "snapshots"), dir)
		}
		mine := sizes[tenant]
		charge := func(reserved map[string]int64) (others int64) {
			for d, n := range sizes {
				if d != tenant {
					others += min(n+reserved[d], share)
				}
			}
			return others
		}
		// Room without the saves in flight: refuse when it is too small.
		want := min(total-charge(nil), share) - mine
		if per >= 0 && per < want {
			want = per
		}
		if want < minSave {
			switch {
			case share-mine < minSave:
				return 0, nil, fmt.Errorf("this principal's snapshots already take %d of the %d bytes one principal may hold (--snapshot-workspace-budget divided among the principals, so that no principal can fill it for the others); close sessions you no longer need (close_session), or raise the budget", mine, share)
			case per >= 0 && per < minSave:
				return 0, nil, fmt.Errorf("the session's snapshot budget (--snapshot-budget) is %d bytes, under the %d a save needs at least; raise it", per, minSave)
			}
			return 0, nil, fmt.Errorf("the workspace's snapshots already take %d of their %d bytes (--snapshot-workspace-budget); close sessions you no longer need (close_session), or raise the budget", charge(nil)+mine, total)
		}
		b.mu.Lock()
		if b.reservedBy == nil {
			b.reservedBy = map[string]int64{}
		}
		if mine+b.reservedBy[tenant]+want <= min(total-charge(b.reservedBy), share) {
			b.reserved += want
			b.reservedBy[tenant] += want
			b.mu.Unlock()
			return want, b.releaser(want, tenant), nil
		}
		if err := b.waitFreed(ctx); err != nil {
			return 0, nil, err
		}
	}
}

// snapshotsSize measures the snapshot folders of every tenant but except
// (the budget is the server's, over its principals).
func (b *snapshotBudget) snapshotsSize(except string) (int64, error) {
	var total int64
	for _, dir := range b.dirs() {
		total += b.tenantSnapshotsSize(filepath.Join(dir, ".ipybox", "snapshots"), except)
	}
	return total, nil
}

// tenantSnapshotsSize measures the snapshot folders in root but except.
func (b *snapshotBudget) tenantSnapshotsSize(root, except string) int64 {
	ents, err := os.ReadDir(root)
	if err != nil {
		return 0
	}
	var total int64
	for _, e := range ents {
		p := filepath.Join(root, e.Name())
		if p == except || !e.IsDir() {
			continue
		}
		n, err := safefs.Size(p, maxSnapshotEntries)
		if err != nil {
			// A folder too full to count counts as the whole budget.
			n = b.per
		}
		// Its running kernel can write it between saves: it counts as at
		// most one session's budget, so that one session cannot take the
		// others' room.
		if per := b.per; per >= 0 {
			n = min(n, per)
		}
		total += n
	}
	return total
}
