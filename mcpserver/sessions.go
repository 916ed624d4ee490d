package mcpserver

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxHandlesPerPrincipal bounds the sessions of create_session that one
// principal holds at once, with or without a kernel: a handle without a
// kernel costs little, but not nothing.
const MaxHandlesPerPrincipal = 256

// maxConnections bounds the connections (2025-11-25 HTTP sessions) that
// are open at once. They hold no kernel until their first cell, so
// clients that never close theirs (the conformance suite, the Inspector)
// cost a few goroutines each until the idle timeout.
const maxConnections = 1024

// initialized records a 2025-11-25 connection, so that its implicit
// session (if it gets one) ends with it and Close ends it. It starts no
// kernel: a session gets one at its first cell.
func (s *Server) initialized(_ context.Context, req *mcp.InitializedRequest) {
	s.trackConn(req.Session)
}

// trackConn records a connection until it ends. It reports false once the
// server is closed.
func (s *Server) trackConn(ss *mcp.ServerSession) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if _, ok := s.live[ss]; ok {
		return true
	}
	s.live[ss] = struct{}{}
	s.wg.Add()
	go func() {
		defer s.wg.Done()
		ss.Wait() // lifetime: the MCP connection
		s.endConn(ss)
		s.mu.Lock()
		delete(s.live, ss)
		s.mu.Unlock()
	}()
	return true
}

// endConn ends the implicit session of a connection, if it has one.
func (s *Server) endConn(ss *mcp.ServerSession) {
	s.mu.Lock()
	x := s.implicit[ss]
	s.mu.Unlock()
	if x != nil {
		if err := x.close(); err != nil {
			s.log.Warn("closing a session's kernel", "session", x.id, "err", err)
		}
	}
}

// sessionOf returns the session a tool call runs in: the one its session
// argument names, checked against the caller's principal, or else the
// implicit session of its connection, made on first use.
func (s *Server) sessionOf(req *mcp.CallToolRequest, handle string) (*session, error) {
	p := principalOf(req)
	if handle != "" {
		x := s.store.get(handle)
		// The same answer whatever is wrong.
		if x == nil || subtle.ConstantTimeCompare([]byte(x.principal), []byte(p)) != 1 || x.ctx.Err() != nil {
			return nil, errUnknownSession
		}
		return x, nil
	}
	if sessionless(req) {
		return nil, errNoSession
	}
	ss := req.Session
	if !s.trackConn(ss) {
		return nil, errors.New("ipybox is shutting down")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("ipybox is shutting down")
	}
	if x, ok := s.implicit[ss]; ok {
		if x.principal != p {
			return nil, errUnknownSession
		}
		return x, nil
	}
	x := newSession(s, p, ss)
	s.implicit[ss] = x
	s.store.add(x)
	s.startReaper()
	return x, nil
}

// createSession makes a session for principal p, without a kernel.
func (s *Server) createSession(p string) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("ipybox is shutting down")
	}
	if s.handlesBy[p] >= MaxHandlesPerPrincipal {
		return nil, fmt.Errorf("you already hold %d sessions, the most one token may; close some with close_session (list_sessions lists them)", MaxHandlesPerPrincipal)
	}
	x := newSession(s, p, nil)
	s.handlesBy[p]++
	s.store.add(x)
	s.startReaper()
	s.log.Info("session created", "session", x.id, "principal", p)
	return x, nil
}

// revived counts a session that the store brought back from the state
// folder against its principal's handles, unless it was counted at start.
func (s *Server) revived(x *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.counted[x.key] {
		s.counted[x.key] = true
		s.handlesBy[x.principal]++
	}
	s.startReaper()
}

// forget removes x from the tables, with its suspended cells, and, unless
// keep, from the state folder. Called by x.finish.
func (s *Server) forget(x *session, keep bool) {
	if keep {
		s.store.drop(x)
	} else {
		s.store.remove(x)
	}
	s.mu.Lock()
	if x.conn != nil {
		if s.implicit[x.conn] == x {
			delete(s.implicit, x.conn)
		}
	} else if !keep {
		delete(s.counted, x.key)
		s.handlesBy[x.principal]--
		if s.handlesBy[x.principal] <= 0 {
			delete(s.handlesBy, x.principal)
		}
	}
	s.mu.Unlock()
	s.runs.dropRuns(x)
}

// limits returns the kernel limits: in total and per principal (-1: none).
func (s *Server) limits() (total, per int) {
	total = s.opts.MaxSessions
	switch {
	case total == 0:
		total = DefaultMaxSessions
	case total < 0:
		total = -1
	}
	per = s.opts.MaxSessionsPerPrincipal
	switch {
	case per == 0:
		per = total
	case per < 0:
		per = -1
	}
	return total, per
}

// takeSlot counts x's kernel against the limits, or says which is full.
func (s *Server) takeSlot(x *session) error {
	total, per := s.limits()
	s.mu.Lock()
	defer s.mu.Unlock()
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.slot {
		return nil
	}
	switch {
	case total >= 0 && s.kernels >= total:
		s.log.Warn("refused a kernel: the server's limit", "max_sessions", total)
		return fmt.Errorf("ipybox mcp already runs %d kernels, its limit (--max-sessions); close a session you no longer need (close_session, or end a connection) and call again, or start the server with a higher --max-sessions", total)
	case per >= 0 && s.kernelsBy[x.principal] >= per:
		s.log.Warn("refused a kernel: the principal's limit", "principal", x.principal, "max_sessions_per_principal", per)
		return fmt.Errorf("your sessions already run %d kernels, the limit of one token (--max-sessions-per-principal); close a session you no longer need (close_session, or end a connection) and call again", per)
	}
	x.slot = true
	s.kernels++
	s.kernelsBy[x.principal]++
	return nil
}

// releaseSlot returns x's kernel slot, if it holds one.
func (s *Server) releaseSlot(x *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.slot {
		return
	}
	x.slot = false
	s.kernels--
	s.kernelsBy[x.principal]--
	if s.kernelsBy[x.principal] <= 0 {
		delete(s.kernelsBy, x.principal)
	}
}

// startReaper starts, once, the goroutine that hibernates sessions idle
// for longer than Options.HibernateAfter and ends sessions of
// create_session idle for longer than Options.SessionExpiry. Called with
// s.mu held.
func (s *Server) startReaper() {
	s.reaper.Do(func() {
		tick := min(max(min(s.opts.HibernateAfter, s.opts.SessionExpiry)/10, 10*time.Millisecond), 30*time.Second)
		s.wg.Add()
		go func() {
			defer s.wg.Done()
			t := time.NewTicker(tick)
			defer t.Stop()
			for {
				select {
				case <-s.ctx.Done():
					return
				case now := <-t.C:
					s.reap(now)
				}
			}
		}()
	})
}

// reap hibernates the sessions idle for longer than Options.HibernateAfter
// (in the background: a save takes a while), and ends the sessions of
// create_session idle for longer than Options.SessionExpiry, here or, for
// those of the state folder that no call revived, on disk. (An implicit
// session ends with its connection, after Options.SessionIdleTimeout over
// HTTP.)
func (s *Server) reap(now time.Time) {
	live := map[[32]byte]bool{}
	for _, x := range s.store.all() {
		live[x.key] = true
		since := x.idleSince()
		if since.IsZero() {
			continue
		}
		idle := now.Sub(since)
		switch {
		case x.durable() && idle > s.opts.SessionExpiry:
			s.log.Info("session expired; closing it", "session", x.id, "idle", idle.Round(time.Second))
			x.close()
		case idle > s.opts.HibernateAfter && x.hasKernel():
			s.wg.Add()
			go func() {
				defer s.wg.Done()
				x.hibernate(s.ctx, "idle for "+shortDuration(s.opts.HibernateAfter.Round(time.Second)), false)
			}()
		}
	}
	if s.state == nil || now.Sub(s.lastScan) < min(s.opts.SessionExpiry/10, time.Minute) {
		return
	}
	s.lastScan = now
	for _, k := range s.state.list() {
		if live[k.key] || now.Sub(k.rec.Used) <= s.opts.SessionExpiry {
			continue
		}
		s.expire(k)
	}
}

// expire ends a session of the state folder that no call revived here and
// that outlived Options.SessionExpiry: its record, its folders, its
// gateway kernel. One that another process runs now is left to it.
func (s *Server) expire(k keyed) {
	if s.local() {
		f, err := s.state.lock(s.ctx, k.key, 0)
		if err != nil {
			return
		}
		defer f.Close()
	}
	s.log.Info("a stored session expired; removing it", "session", keyName(k.key)[:8])
	s.state.remove(k.key)
	s.tenant(k.rec.Principal).removeFolders(k.rec.Packages, k.rec.Snapshot)
	if k.rec.Kernel != "" && !s.local() {
		s.deleteGatewayKernel(k.rec.Kernel)
	}
	s.mu.Lock()
	if s.counted[k.key] {
		delete(s.counted, k.key)
		s.handlesBy[k.rec.Principal]--
		if s.handlesBy[k.rec.Principal] <= 0 {
			delete(s.handlesBy, k.rec.Principal)
		}
	}
	s.mu.Unlock()
}

// SessionCount returns the number of sessions: those of create_session
// and the implicit ones of connections, with a kernel or not.
func (s *Server) SessionCount() int { return len(s.store.all()) }

// KernelCount returns the number of sessions that hold a kernel (started
// or starting).
func (s *Server) KernelCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kernels
}

// principalToken is an accepted bearer token's digest and its principal.
type principalToken struct {
	name   string
	digest [32]byte
}

// principalTokens checks the tokens of Options and returns their digests,
// in a stable order.
func principalTokens(def string, principals map[string]string) ([]principalToken, error) {
	var out []principalToken
	seen := map[[32]byte]string{}
	add := func(name, tok string) error {
		if err := ValidPrincipalName(name); err != nil {
			return err
		}
		if tok == "" {
			return fmt.Errorf("principal %q has an empty token", name)
		}
		d := sha256.Sum256([]byte(tok))
		if other, ok := seen[d]; ok {
			return fmt.Errorf("principals %q and %q have the same token; give each its own", other, name)
		}
		seen[d] = name
		out = append(out, principalToken{name, d})
		return nil
	}
	if def != "" {
		if _, ok := principals["default"]; ok {
			return nil, errors.New(`Options.AuthToken is the token of the principal "default", which Options.Principals names too`)
		}
		if err := add("default", def); err != nil {
			return nil, err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(principals)) {
		if err := add(name, principals[name]); err != nil {
			return nil, err
		}
	}
	return out, nil
}
