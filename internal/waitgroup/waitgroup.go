// Package waitgroup is a WaitGroup whose Wait can give up: waiting with a
// bound needs no extra goroutine, so nothing is left waiting after the
// bound passed (a sync.WaitGroup would need a goroutine that calls Wait and
// outlives the timeout).
package waitgroup

import (
	"sync"
	"time"
)

// Group counts running tasks. The zero value is ready to use.
type Group struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0; nil while n is 0
}

// Add counts a task.
func (g *Group) Add() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n == 0 {
		g.zero = make(chan struct{})
	}
	g.n++
}

// Done ends a task.
func (g *Group) Done() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n == 0 {
		panic("waitgroup: Done without Add")
	}
	if g.n--; g.n == 0 {
		close(g.zero)
		g.zero = nil
	}
}

// Wait waits until no task runs, for at most d, and reports whether none
// does.
func (g *Group) Wait(d time.Duration) bool {
	g.mu.Lock()
	ch := g.zero
	g.mu.Unlock()
	if ch == nil {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}
