package mcpserver

import (
	"context"
	"sync"
	"time"

	"github.com/ipybox/ipybox/internal/waitgroup"
)

// durability is what keeps sessions of create_session beyond their
// kernels and the process (durable.go says how a session hibernates and
// comes back): the state folder (state.go) and this process's name in it
// (frontend), the snapshot budget (budget.go), and the reaper's clock:
// its start, once, and when it last read the state folder. state,
// frontend, budget and the durations are set at New and read-only after;
// lastScan is the reaper goroutine's alone; the budget has its own lock.
// So it has no lock of its own. It calls the state folder and the
// budget only: the Server's reap composes it with the sessions.
type durability struct {
	state    *stateDir
	frontend string
	budget   *snapshotBudget
	// hibernateAfter and expiry are Options.Durability's, defaults applied.
	hibernateAfter, expiry time.Duration

	reaper   sync.Once
	lastScan time.Time
}

// startReaper starts, once, the goroutine that calls reap at every tick
// (a tenth of the shorter of hibernateAfter and expiry, within 10ms and
// 30s) until ctx ends, counted in wg.
func (d *durability) startReaper(ctx context.Context, wg *waitgroup.Group, reap func(time.Time)) {
	d.reaper.Do(func() {
		tick := min(max(min(d.hibernateAfter, d.expiry)/10, 10*time.Millisecond), 30*time.Second)
		wg.Add()
		go func() {
			defer wg.Done()
			t := time.NewTicker(tick)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case now := <-t.C:
					reap(now)
				}
			}
		}()
	})
}

// expired returns, when a read of the state folder is due at now (a
// tenth of expiry since the last, at most a minute), the records of the
// sessions that outlived expiry and are not live here. Called by the
// reaper alone.
func (d *durability) expired(now time.Time, live map[[32]byte]bool) []keyed {
	if d.state == nil || now.Sub(d.lastScan) < min(d.expiry/10, time.Minute) {
		return nil
	}
	d.lastScan = now
	var out []keyed
	for _, k := range d.state.list() {
		if live[k.key] || now.Sub(k.rec.Used) <= d.expiry {
			continue
		}
		out = append(out, k)
	}
	return out
}
