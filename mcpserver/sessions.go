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

// forget removes x from the tables, with its suspended cells. Called by
// x.close.
func (s *Server) forget(x *session) {
	s.store.remove(x)
	s.mu.Lock()
	if x.conn != nil {
		if s.implicit[x.conn] == x {
			delete(s.implicit, x.conn)
		}
	} else {
		s.handlesBy[x.principal]--
		if s.handlesBy[x.principal] <= 0 {
			delete(s.handlesBy, x.principal)
		}
	}
	s.mu.Unlock()
	s.dropRuns(x)
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

// startReaper starts, once, the goroutine that closes sessions of
// create_session idle for longer than Options.SessionIdleTimeout. Called
// with s.mu held.
func (s *Server) startReaper() {
	s.reaper.Do(func() {
		tick := min(max(s.opts.SessionIdleTimeout/10, 10*time.Millisecond), 30*time.Second)
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

// reap closes the sessions of create_session that have been idle for
// longer than the idle timeout. (An implicit session ends with its
// connection, which has the same timeout over HTTP.)
func (s *Server) reap(now time.Time) {
	for _, x := range s.store.all() {
		if x.conn != nil {
			continue
		}
		if since := x.idleSince(); !since.IsZero() && now.Sub(since) > s.opts.SessionIdleTimeout {
			s.log.Info("session idle; closing it", "session", x.id, "idle", now.Sub(since).Round(time.Second))
			x.close()
		}
	}
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
