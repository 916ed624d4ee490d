package toolserver

import (
	"container/list"
	"context"
	"sync"
)

// budget is a weighted semaphore with FIFO waiters: the bytes of request
// bodies, or the number of requests, that may be held at once. A large
// request at the head of the queue is not overtaken by other large ones,
// so it cannot be starved by them; a small one (at most small) that fits
// in what is left goes ahead of waiters that do not fit, so that a large
// waiter does not hold up every small call behind it.
type budget struct {
	mu      sync.Mutex
	size    int64
	small   int64 // 0: strictly FIFO
	used    int64
	waiters list.List // of *waiter
}

type waiter struct {
	n     int64
	ready chan struct{} // closed when the waiter holds n
}

func newBudget(size int64) *budget { return &budget{size: size} }

// newBytesBudget is a budget of bytes in which requests of at most
// smallBody bytes may pass waiters that do not fit.
func newBytesBudget(size int64) *budget { return &budget{size: size, small: smallBody} }

// smallBody is the size up to which a body may pass larger waiters.
const smallBody = 64 << 10

// acquire takes n, waiting in line until it can or until ctx is done.
// n must not exceed the budget's size.
func (b *budget) acquire(ctx context.Context, n int64) error {
	b.mu.Lock()
	if b.size-b.used >= n && (b.waiters.Len() == 0 || n <= b.small) {
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

// grant hands the budget to waiters in order while the first fits, and
// then to small waiters that fit in what is left; b.mu is held.
func (b *budget) grant() {
	for {
		e := b.waiters.Front()
		if e == nil {
			return
		}
		w := e.Value.(*waiter)
		if b.size-b.used < w.n {
			break
		}
		b.used += w.n
		b.waiters.Remove(e)
		close(w.ready)
	}
	for e := b.waiters.Front(); e != nil && b.small > 0; {
		next := e.Next()
		if w := e.Value.(*waiter); w.n <= b.small && b.size-b.used >= w.n {
			b.used += w.n
			b.waiters.Remove(e)
			close(w.ready)
		}
		e = next
	}
}

// held returns what is taken now (for tests and logs).
func (b *budget) held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
