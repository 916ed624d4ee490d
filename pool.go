package ipybox

import (
	"context"
	"fmt"

	"github.com/ipybox/ipybox/internal/warm"
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
	warm *warm.Pool[*Executor]
}

// NewPool returns a pool that keeps size Executors ready (at least 1) and
// starts filling it at once, in the background. A nil opts means the
// defaults. The options are copied. The size comes first: it is required.
func NewPool(size int, opts *Options) *Pool {
	var o Options
	if opts != nil {
		o = *opts
	}
	p := &Pool{opts: o}
	start := func(ctx context.Context) (*Executor, error) { return Start(ctx, &p.opts) }
	p.warm = warm.New(max(size, 1), start, (*Executor).Close, o.Logger)
	return p
}

// Get returns a started Executor: a warm one if there is one, otherwise one
// started now (bounded by ctx). The caller must Close it. After Close, Get
// returns [ErrClosed].
func (p *Pool) Get(ctx context.Context) (*Executor, error) {
	if p.warm.Closed() {
		return nil, ErrClosed
	}
	for {
		ex, ok := p.warm.Take()
		if !ok {
			break
		}
		if !ex.Stale() {
			return ex, nil
		}
		// It started before a secret it would have to hide existed.
		ex.Close()
	}
	return Start(ctx, &p.opts)
}

// Ready returns how many warm Executors wait in the pool.
func (p *Pool) Ready() int { return p.warm.Ready() }

// Close stops refilling and closes the Executors that wait in the pool
// (not those handed out). It is idempotent and bounded by the Executors'
// own Close.
func (p *Pool) Close() error {
	if err := p.warm.Close(); err != nil {
		return fmt.Errorf("ipybox: pool: %w", err)
	}
	return nil
}
