// Package warm keeps things that are slow to start (kernels) started in
// advance: a number of them wait, and one handed out is replaced in the
// background. The number grows with demand, up to a maximum: a Take that
// finds the pool empty raises the target by one; a target above the
// base size comes back down by one after each quiet period without such a
// miss. ipybox.Pool and the MCP server's pool of executors both use it.
package warm

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/ipybox/ipybox/internal/telemetry"
)

// Retry is the pause after a failed background start, so that a start
// that keeps failing is not retried in a tight loop. Each further failure
// doubles it, up to MaxRetry; a success resets it.
const Retry = 2 * time.Second

// MaxRetry bounds the pause between failed background starts.
const MaxRetry = time.Minute

// Quiet is how long the pool goes without a miss before a target above
// its base size shrinks by one.
var Quiet = 2 * time.Minute

// A Pool keeps values of T started.
type Pool[T any] struct {
	size     int           // the base size
	max      int           // the most it grows to
	target   int           // what fill keeps ready now; guarded by mu
	lastMiss time.Time     // guarded by mu
	retry    time.Duration // the first pause after a failed start
	start    func(context.Context) (T, error)
	discard  func(T) error
	log      *slog.Logger

	ctx    context.Context // ends at Close: stops refilling
	cancel context.CancelFunc
	wake   chan struct{}
	wg     sync.WaitGroup

	mu     sync.Mutex
	idle   []T
	closed bool

	unreport func() // ends the report of Ready to the metrics
}

// New starts filling a pool of size values (none when size < 1) with
// start, in the background; discard ends a value that is not handed out.
// Failed starts are retried, ever less often (Retry, doubled up to
// MaxRetry), and logged on log (which may be nil) when their error is
// new: a start that fails the same way every time is logged once.
func New[T any](size int, start func(context.Context) (T, error), discard func(T) error, log *slog.Logger) *Pool[T] {
	return newPool(size, start, discard, log, Retry)
}

func newPool[T any](size int, start func(context.Context) (T, error), discard func(T) error, log *slog.Logger, retry time.Duration) *Pool[T] {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool[T]{size: size, max: size, target: size, retry: retry, start: start, discard: discard, log: log, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1)}
	p.unreport = telemetry.Pool(p.Ready)
	if size > 0 {
		p.wg.Add(1)
		go p.fill()
	}
	return p
}

// Grow lets the pool keep up to most values ready when demand calls for
// it (below the base size: the base size).
func (p *Pool[T]) Grow(most int) {
	p.mu.Lock()
	p.max = max(most, p.size)
	p.mu.Unlock()
}

// Target returns how many values the pool keeps ready now.
func (p *Pool[T]) Target() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// Take returns a started value, if one waits, and asks for a refill. A
// Take that finds none raises the pool's target (see Grow).
func (p *Pool[T]) Take() (T, bool) {
	p.mu.Lock()
	var v T
	ok := !p.closed && len(p.idle) > 0
	if ok {
		v, p.idle = p.idle[0], p.idle[1:]
	} else if !p.closed && p.size > 0 {
		p.lastMiss = time.Now()
		if p.target < p.max {
			p.target++
		}
	}
	closed := p.closed
	p.mu.Unlock()
	if !closed {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
	return v, ok
}

// Ready returns how many started values wait.
func (p *Pool[T]) Ready() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// Closed reports whether Close was called.
func (p *Pool[T]) Closed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *Pool[T]) fill() {
	defer p.wg.Done()
	quiet := time.NewTimer(Quiet)
	defer quiet.Stop()
	delay, lastErr := p.retry, ""
	for {
		p.mu.Lock()
		need := !p.closed && len(p.idle) < p.target
		p.mu.Unlock()
		if !need {
			select {
			case <-p.wake:
				continue
			case <-quiet.C:
				p.shrink()
				quiet.Reset(Quiet)
				continue
			case <-p.ctx.Done():
				return
			}
		}
		v, err := p.start(p.ctx)
		p.mu.Lock()
		if err == nil && !p.closed {
			p.idle = append(p.idle, v)
			p.mu.Unlock()
			delay, lastErr = p.retry, ""
			continue
		}
		closed := p.closed
		p.mu.Unlock()
		if err == nil {
			p.discard(v) // started as the pool closed
		}
		if closed || p.ctx.Err() != nil {
			return
		}
		if p.log != nil && err.Error() != lastErr { // codecheck:ok: a log's deduplication, by the text it logs
			p.log.Warn("pool: a background start failed; retrying, ever less often (logged again only if the error changes)", "err", err)
		}
		lastErr = err.Error()
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-p.ctx.Done():
			t.Stop()
			return
		}
		delay = min(2*delay, MaxRetry)
	}
}

// shrink lowers a target above the base size by one when no Take missed
// for a quiet period, and discards a value that waits beyond it.
func (p *Pool[T]) shrink() {
	p.mu.Lock()
	var extra []T
	if p.target > p.size && time.Since(p.lastMiss) >= Quiet {
		p.target--
		for len(p.idle) > p.target {
			extra = append(extra, p.idle[len(p.idle)-1])
			p.idle = p.idle[:len(p.idle)-1]
		}
	}
	p.mu.Unlock()
	for _, v := range extra {
		p.discard(v)
	}
}

// Close stops refilling and discards the values that wait, in parallel.
// It is idempotent.
func (p *Pool[T]) Close() error {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.closed = true
	p.mu.Unlock()
	p.unreport()
	p.cancel()
	p.wg.Wait() // bound: fill ends with p.ctx, cancelled above (a start honours it)
	errs := make([]error, len(idle))
	var wg sync.WaitGroup
	for i, v := range idle {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.discard(v)
		}()
	}
	wg.Wait() // bound: each discard is a bounded Close
	return errors.Join(errs...)
}
