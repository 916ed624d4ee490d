package mcpserver

import (
	"context"
	"sync"
	"time"

	"github.com/ipybox/ipybox"
)

// A new session, a reset aside, needs a kernel at once: a cold start costs
// about 0.35 s of CPU (Python's imports), and a burst of sessions on two
// cores waits seconds for theirs. Two things remove that wait:
//   - a warm pool of Executors started in advance (Options.Pool), refilled
//     in the background, sandboxed or not;
//   - unsandboxed, a fork server (a zygote: one Python process that has
//     imported ipykernel and forks a kernel per start), so that starts,
//     refills and resets take a fifth of the time. A sandboxed session
//     never gets a forked kernel: kernels forked inside one sandbox would
//     share its processes, files and sockets.

// warmExec is an Executor started in advance, with the registration
// generations it loaded at its start.
type warmExec struct {
	ex     *ipybox.Executor
	synced map[string]int
}

// warmPool keeps size Executors ready.
type warmPool struct {
	s    *Server
	size int
	wake chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	idle   []warmExec
	closed bool
}

// poolRetry is the pause after a failed background start.
const poolRetry = 2 * time.Second

func newWarmPool(s *Server, size int) *warmPool {
	p := &warmPool{s: s, size: size, wake: make(chan struct{}, 1)}
	if size > 0 {
		p.wg.Add(1)
		go p.fill()
	}
	return p
}

// take returns a warm Executor, if there is one, and asks for a refill.
func (p *warmPool) take() (warmExec, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle) == 0 {
		p.topUp()
		return warmExec{}, false
	}
	w := p.idle[0]
	p.idle = p.idle[1:]
	p.topUp()
	return w, true
}

// ready returns how many warm Executors wait.
func (p *warmPool) ready() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

func (p *warmPool) topUp() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *warmPool) fill() {
	defer p.wg.Done()
	ctx := p.s.ctx
	for {
		p.mu.Lock()
		need := !p.closed && len(p.idle) < p.size
		p.mu.Unlock()
		if !need {
			select {
			case <-p.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		ex, synced, err := p.s.newExecutor(ctx)
		p.mu.Lock()
		if err == nil && !p.closed {
			p.idle = append(p.idle, warmExec{ex, synced})
			p.mu.Unlock()
			continue
		}
		closed := p.closed
		p.mu.Unlock()
		if ex != nil {
			ex.Close()
		}
		if closed || ctx.Err() != nil {
			return
		}
		p.s.log.Warn("pool: a background kernel start failed", "err", err)
		select {
		case <-time.After(poolRetry):
		case <-ctx.Done():
			return
		}
	}
}

// close stops refilling and closes the warm Executors, in parallel.
func (p *warmPool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	p.wg.Wait()
	var wg sync.WaitGroup
	for _, w := range idle {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.ex.Close()
		}()
	}
	wg.Wait()
}

// zygote returns the server's fork server for python, starting it once;
// nil when it cannot start (kernels then start cold, which still works).
func (s *Server) zygote(ctx context.Context, python string) *ipybox.Zygote {
	s.zygMu.Lock()
	defer s.zygMu.Unlock()
	if s.zyg != nil || s.zygErr != nil || s.opts.NoZygote {
		return s.zyg
	}
	s.zyg, s.zygErr = ipybox.NewZygote(ctx, python, s.log)
	if s.zygErr != nil {
		s.log.Warn("the fork server did not start; kernels start cold", "err", s.zygErr)
	}
	return s.zyg
}
