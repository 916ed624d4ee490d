package mcpserver

import (
	"context"
	"maps"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/handoff"
)

// A reset swaps in a kernel that the warm pool started in advance, when it
// has one ready: a restart in place costs a kernel start (a forked
// sandboxed one about 0.3 s, a cold one about a second on two cores),
// while the swap costs moving the session's folders. The pooled kernel was
// started with the settings every session of its tenant gets (the pool
// serves one tenant only); what is the session's own moves over: its
// package and snapshot folders (adopt, as a wake does), the answers
// remembered for it and its name in the audit log and spans
// (handoff.Session), and the MCP servers registered since the pooled
// kernel started (sync). The old executor is closed in the background.
// Attackers: the session's own kernel code wrote the folders that move (as
// at a wake, they move without being read or followed); a pooled kernel
// has run no code of anyone's, and goes to one session only.

// swapReset resets x by swapping in a pooled kernel for old, x's
// executor. It reports false, having changed nothing, when it cannot: no
// kernel ready, a gateway, a stale pooled kernel, or another call of x in
// flight (it may be using old). err is the new kernel's re-masking error.
func (s *Server) swapReset(ctx context.Context, x *session, old *ipybox.Executor) (bool, error) {
	f := s.factory
	if !s.local() || f.warm.Ready() == 0 {
		return false, nil
	}
	x.startMu.Lock()
	defer x.startMu.Unlock()
	if !x.onlyCallOn(old) {
		return false, nil
	}
	w, ok := f.warm.Take()
	if !ok {
		return false, nil
	}
	if w.ex.Stale() {
		s.closeLater(w.ex)
		return false, nil
	}
	x.mu.Lock()
	if x.closed || x.ex != old || x.active != 1 {
		x.mu.Unlock()
		s.closeLater(w.ex)
		return false, nil
	}
	handoff.Session(old, w.ex)
	x.ex, x.owner = w.ex, w.owner
	x.mu.Unlock()
	x.pooled = true
	x.t.mu.Lock()
	clear(x.synced)
	maps.Copy(x.synced, w.synced)
	x.t.mu.Unlock()
	s.adopt(x, w.ex)
	// Its folders' contents moved to the new executor's; what the old
	// kernel wrote into them since (it runs until its Close) goes with
	// them, after it is dead.
	s.closeLater(old)
	x.mu.Lock()
	x.kernelID = w.ex.KernelID()
	x.mu.Unlock()
	s.saveRecord(x)
	s.log.Info("reset: swapped in a pooled kernel", "session", x.id)
	x.sync(ctx, w.ex)
	return true, x.remask(ctx, w.ex, false)
}

// onlyCallOn reports whether x's executor is ex and the calling tool call
// is the only one of x in flight.
func (x *session) onlyCallOn(ex *ipybox.Executor) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return !x.closed && x.ex == ex && x.active == 1
}

// closeLater closes ex in the background, and removes its folders; the
// server's Close waits for it.
func (s *Server) closeLater(ex *ipybox.Executor) {
	s.wg.Add()
	go func() {
		defer s.wg.Done()
		if err := s.factory.closeExecutor(ex, false); err != nil {
			s.log.Warn("closing a replaced kernel", "err", err)
		}
	}()
}

// resetAsleep resets x while it holds no kernel: a hibernated session's
// saved namespace is deleted (a gateway session's detached kernel ends),
// so that its next cell starts in a fresh kernel instead of restoring it;
// its packages are kept. It returns x's executor instead, changing
// nothing, when another call started one meanwhile, and reports whether
// there was saved state to drop.
func (s *Server) resetAsleep(ctx context.Context, x *session) (*ipybox.Executor, bool, error) {
	x.startMu.Lock()
	defer x.startMu.Unlock()
	if x.durable() {
		// The record may say more than this process knows (another one
		// ran it since): read it, under the session's lock.
		if err := x.reload(ctx); err != nil {
			return nil, false, err
		}
	}
	x.mu.Lock()
	if ex := x.ex; ex != nil {
		x.mu.Unlock()
		return ex, false, nil
	}
	had := x.asleep != nil
	var kid string
	if had && x.asleep.detached {
		kid = x.kernelID
	}
	snap := x.snap
	x.asleep, x.snap, x.kernelID = nil, "", ""
	x.mu.Unlock()
	x.t.removeFolders("", snap)
	if kid != "" {
		s.deleteGatewayKernel(kid)
	}
	s.saveRecord(x)
	x.unlock()
	return nil, had, nil
}
