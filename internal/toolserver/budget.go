package toolserver

import (
	"container/list"
	"context"
	"sync"
)

// budget is a weighted semaphore with FIFO waiters: the bytes of request
// bodies, or the number of requests, that may be held at once. A large
// request at the head of the queue is not overtaken by small ones, so it
// cannot be starved.
type budget struct {
	mu      sync.Mutex
	size    int64
	used    int64
	waiters list.List // of *waiter
}

type waiter struct {
	n     int64
	ready chan struct{} // closed when the waiter holds n
}

func newBudget(size int64) *budget { return &budget{size: size} }

// acquire takes n, waiting in line until it can or until ctx is done.
// n must not exceed the budget's size.
func (b *budget) acquire(ctx context.Context, n int64) error {
	b.mu.Lock()
	if b.size-b.used >= n && b.waiters.Len() == 0 {
		b.used += n
		b.mu.Unlock()
		return nil
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	elem := b.waiters.PushBack(w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		select {
		case <-w.ready:
			// Granted as ctx ended: give it back.
			b.used -= n
			b.grant()
		default:
			front := b.waiters.Front() == elem
			b.waiters.Remove(elem)
			if front {
				// The ones behind may fit now.
				b.grant()
			}
		}
		b.mu.Unlock()
		return ctx.Err()
	}
}

// release gives back n.
func (b *budget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	if b.used < 0 {
		b.mu.Unlock()
		panic("toolserver: budget released more than it held")
	}
	b.grant()
	b.mu.Unlock()
}

// grant hands the budget to waiters in order while the first fits; b.mu
// is held.
func (b *budget) grant() {
	for {
		e := b.waiters.Front()
		if e == nil {
			return
		}
		w := e.Value.(*waiter)
		if b.size-b.used < w.n {
			return
		}
		b.used += w.n
		b.waiters.Remove(e)
		close(w.ready)
	}
}

// held returns what is taken now (for tests and logs).
func (b *budget) held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
