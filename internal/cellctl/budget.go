package cellctl

import (
	"sync"
	"time"
)

// Budget is a cell's time budget that can be paused, for example while the
// application decides whether a tool call may run. Pauses nest. A Budget is
// safe for concurrent use.
type Budget struct {
	mu      sync.Mutex
	total   time.Duration
	used    time.Duration // before the current running stretch
	since   time.Time     // start of the current running stretch
	paused  int
	timer   *time.Timer
	expired chan struct{}
	done    bool
}

// NewBudget returns a running budget of total.
func NewBudget(total time.Duration) *Budget {
	b := &Budget{total: total, since: time.Now(), expired: make(chan struct{})}
	b.timer = time.AfterFunc(total, b.expire)
	return b
}

func (b *Budget) expire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.paused > 0 || b.done {
		return
	}
	b.done = true
	close(b.expired)
}

// Total returns the budget's size.
func (b *Budget) Total() time.Duration { return b.total }

// Expired is closed when the running time reaches the total.
func (b *Budget) Expired() <-chan struct{} { return b.expired }

// Pause stops the clock until the matching Resume.
func (b *Budget) Pause() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.paused == 0 && !b.done {
		b.timer.Stop()
		b.used += time.Since(b.since)
	}
	b.paused++
}

// Resume restarts the clock after Pause.
func (b *Budget) Resume() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.paused == 0 {
		return
	}
	b.paused--
	if b.paused == 0 && !b.done {
		b.since = time.Now()
		left := b.total - b.used
		if left <= 0 {
			b.done = true
			close(b.expired)
			return
		}
		b.timer.Reset(left)
	}
}

// Remaining returns the running time left (never negative).
func (b *Budget) Remaining() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	used := b.used
	if b.paused == 0 && !b.done {
		used += time.Since(b.since)
	}
	return max(b.total-used, 0)
}

// Stop releases the timer.
func (b *Budget) Stop() { b.timer.Stop() }
