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

// maxHandlesPerPrincipal bounds the sessions of create_session that one
// principal holds at once, with or without a kernel: a handle without a
// kernel costs little, but not nothing.
const maxHandlesPerPrincipal = 256

// maxConnections bounds the connections (2025-11-25 HTTP sessions) that
// are open at once. They hold no kernel until their first cell, so
// clients that never close theirs (the conformance suite, the Inspector)
// cost a few goroutines each until the idle timeout.
const maxConnections = 1024

// initialized records a 2025-11-25 connection, so that its implicit
// session (if it gets one) ends with it and Close ends it. It starts no
// kernel: a session gets one at its first cell.
func (s *Server) initialized(_ context.Context, req *mcp.InitializedRequest) {
	s.trackConn(req.Session, principalOf(req))
}

// trackInitialize counts a 2025-11-25 HTTP connection from its initialize
// request, not only from its initialized notification: a client that
// never sends the notification holds a transport session until the idle
// timeout all the same, and must count against maxConnections and its
// principal's share.
func (s *Server) trackInitialize(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "initialize" {
			if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss.ID() != "" {
				s.trackConn(ss, principalOf(req))
			}
		}
		return next(ctx, method, req)
	}
}

// trackConn records a connection until it ends. It reports false once the
// server is closed.
func (s *Server) trackConn(ss *mcp.ServerSession, p string) bool {
	// The goroutine is counted under the table's lock, before Close can
	// mark the table closed and wait for s.wg.
	return s.sessions.track(ss, p, func() {
		s.wg.Add()
		go func() {
			defer s.wg.Done()
			ss.Wait() // lifetime: the MCP connection
			s.endConn(ss)
			s.sessions.untrack(ss)
		}()
	})
}

// endConn ends the implicit session of a connection, if it has one. A
// task's cell that runs in it is not lost with the connection
// (tasks.go): the session ends when that cell does, and the task's
// result stays for the principal's other connections.
func (s *Server) endConn(ss *mcp.ServerSession) {
	x := s.sessions.implicitOf(ss)
	if x == nil {
		return
	}
	if c := s.runs.oldestCell(x, true); c != nil && c.isTask() && s.ctx.Err() == nil {
		s.log.Info("connection ended; its session ends when its task's cell does", "session", x.id, "task", c.taskID(), "cell", c.id)
		s.wg.Add()
		go func() {
			defer s.wg.Done()
			// Bounded: the cell's timeout ends it, and Close ends s.ctx.
			c.waitEnd(s.ctx)
			s.closeImplicit(x)
		}()
		return
	}
	s.closeImplicit(x)
}

// closeImplicit ends x, the implicit session of a connection that ended.
func (s *Server) closeImplicit(x *session) {
	if err := x.close(); err != nil {
		s.log.Warn("closing a session's kernel", "session", x.id, "err", err)
	}
}

// sessionOf returns the session a tool call runs in: the one its session
// argument names, checked against the caller's principal, or else the
// implicit session of its connection, made on first use.
func (s *Server) sessionOf(req *mcp.CallToolRequest, handle string) (*session, error) {
	p := principalOf(req)
	if handle != "" {
		x := s.sessions.store.get(handle)
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
	if !s.trackConn(ss, p) {
		return nil, errShuttingDown
	}
	return s.sessions.implicitSession(ss, p, func() *session { return newSession(s, p, ss) })
}

// createSession makes a session for principal p, without a kernel.
func (s *Server) createSession(p string) (*session, error) {
	x, err := s.sessions.createSession(p, func() *session { return newSession(s, p, nil) })
	if err != nil {
		return nil, err
	}
	s.log.Info("session created", "session", x.id, "principal", p)
	return x, nil
}

// forget removes x from the tables, with its suspended cells, and, unless
// keep, from the state folder. Called by x.finish.
func (s *Server) forget(x *session, keep bool) {
	s.sessions.forget(x, keep)
	s.runs.dropRuns(x)
	s.ui.forget(x)
}

// startReaper starts, once, the goroutine that hibernates sessions idle
// for longer than Options.Durability.HibernateAfter and ends sessions of
// create_session idle for longer than Options.Durability.SessionExpiry. Called with
// s.sessions.mu held (sessionTable.onAdd).
func (s *Server) startReaper() {
	s.durability.startReaper(s.ctx, &s.wg, s.reap)
}

// reap hibernates the sessions idle for longer than Options.Durability.HibernateAfter
// (in the background: a save takes a while), and ends the sessions of
// create_session idle for longer than Options.Durability.SessionExpiry, here or, for
// those of the state folder that no call revived, on disk. (An implicit
// session ends with its connection, after Options.HTTP.SessionIdleTimeout over
// HTTP.)
func (s *Server) reap(now time.Time) {
	live := map[[32]byte]bool{}
	for _, x := range s.sessions.store.all() {
		live[x.key] = true
		since := x.idleSince()
		if since.IsZero() {
			continue
		}
		idle := now.Sub(since)
		switch {
		case x.durable() && idle > s.opts.Durability.SessionExpiry:
			s.log.Info("session expired; closing it", "session", x.id, "idle", idle.Round(time.Second))
			x.close()
		case idle > s.opts.Durability.HibernateAfter && x.hasKernel():
			s.wg.Add()
			go func() {
				defer s.wg.Done()
				x.hibernate(s.ctx, "idle for "+shortDuration(s.opts.Durability.HibernateAfter.Round(time.Second)), false)
			}()
		}
	}
	for _, k := range s.durability.expired(now, live) {
		s.expire(k)
	}
}

// expire ends a session of the state folder that no call revived here and
// that outlived Options.Durability.SessionExpiry: its record, its folders, its
// gateway kernel. One that another process runs now is left to it.
func (s *Server) expire(k keyed) {
	if s.local() {
		f, err := s.durability.state.lock(s.ctx, k.key, 0)
		if err != nil {
			return
		}
		defer f.Close()
	}
	s.log.Info("a stored session expired; removing it", "session", keyName(k.key)[:8])
	s.durability.state.remove(k.key)
	s.tenant(k.rec.Principal).removeFolders(k.rec.Packages, k.rec.Snapshot)
	if k.rec.Kernel != "" && !s.local() {
		s.deleteGatewayKernel(k.rec.Kernel)
	}
	s.sessions.expired(k.key, k.rec.Principal)
}

// SessionCount returns the number of sessions: those of create_session
// and the implicit ones of connections, with a kernel or not.
func (s *Server) SessionCount() int { return len(s.sessions.store.all()) }

// KernelCount returns the number of sessions that hold a kernel (started
// or starting).
func (s *Server) KernelCount() int {
	return s.sessions.kernelCount()
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
			return nil, errors.New(`Options.HTTP.AuthToken is the token of the principal "default", which Options.HTTP.Principals names too`)
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
