package ipybox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Pool keeps Executors started in advance, so that Get hands one out
// without waiting for a kernel to start (a cold start costs a few hundred
// milliseconds). Every Executor of a Pool has the same Options. The caller
// owns what Get returns and closes it; the Pool starts a replacement in the
// background.
//
//	pool := ipybox.NewPool(1, &ipybox.Options{WorkDir: ws})
//	defer pool.Close()
//	ex, err := pool.Get(ctx) // ready at once when a warm one is there
//	defer ex.Close()
type Pool struct {
	opts Options
	size int

	ctx    context.Context // ends at Close: stops refilling
	cancel context.CancelFunc
	wake   chan struct{} // asks the filler to top up
	wg     sync.WaitGroup

	mu     sync.Mutex
	idle   []*Executor
	closed bool
}

// ErrPoolClosed is returned by Get after Close.
var ErrPoolClosed = errors.New("ipybox: pool closed")

// poolRetry is the pause after a failed background start.
const poolRetry = 2 * time.Second

// NewPool returns a pool that keeps size Executors ready (at least 1) and
// starts filling it at once, in the background. A nil opts means the
// defaults. The options are copied. The size comes first: it is required.
func NewPool(size int, opts *Options) *Pool {
	var o Options
	if opts != nil {
		o = *opts
	}
	if size < 1 {
		size = 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{opts: o, size: size, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1)}
	p.wg.Add(1)
	go p.fill()
	return p
}

// Get returns a started Executor: a warm one if there is one, otherwise one
// started now (bounded by ctx). The caller must Close it.
func (p *Pool) Get(ctx context.Context) (*Executor, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrPoolClosed
	}
	var ex *Executor
	if n := len(p.idle); n > 0 {
		ex, p.idle = p.idle[0], p.idle[1:]
	}
	p.mu.Unlock()
	p.topUp()
	if ex != nil {
		return ex, nil
	}
	ex, err := Start(ctx, &p.opts)
	if err != nil {
		return nil, err
	}
	return ex, nil
}

// Ready returns how many warm Executors wait in the pool.
func (p *Pool) Ready() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

func (p *Pool) topUp() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// fill keeps the pool at its size until Close.
func (p *Pool) fill() {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		need := !p.closed && len(p.idle) < p.size
		p.mu.Unlock()
		if !need {
			select {
			case <-p.wake:
				continue
			case <-p.ctx.Done():
				return
			}
		}
		ex, err := Start(p.ctx, &p.opts)
		p.mu.Lock()
		if err == nil && !p.closed {
			p.idle = append(p.idle, ex)
			p.mu.Unlock()
			continue
		}
		closed := p.closed
		p.mu.Unlock()
		if err != nil && !closed && p.opts.Logger != nil {
			p.opts.Logger.Warn("ipybox: pool: background start failed", "err", err)
		}
		if ex != nil {
			ex.Close() // started as the pool closed
		}
		if closed {
			return
		}
		select { // a failing start is not retried in a tight loop
		case <-time.After(poolRetry):
		case <-p.ctx.Done():
			return
		}
	}
}

// Close stops refilling and closes the Executors that wait in the pool
// (not those handed out). It is idempotent and bounded by the Executors'
// own Close.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	var errs []error
	for _, ex := range idle {
		errs = append(errs, ex.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ipybox: pool: %w", err)
	}
	return nil
}
