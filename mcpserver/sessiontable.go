package mcpserver

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// errShuttingDown answers a call that would make a session once Close
// began.
var errShuttingDown = errors.New("ipybox is shutting down")

// sessionTable is the server's sessions and what counts them: it owns
// the session store (the handles, implicit sessions included), the
// connections that have not ended (live) and their implicit sessions,
// whether the server is closed, and the counts the limits check: the
// sessions that hold a kernel, in total and per principal, and each
// principal's sessions of create_session (with the keys of the state
// folder's sessions it counted), all under its lock mu.
//
// mu guards memory; under it the table may take a session's x.mu
// (takeSlot, releaseSlot) and the store's lock (store.add, which with a
// state folder writes the session's record), and call onAdd (the
// reaper's start) and track's added (which starts a goroutine), and
// nothing else of the Server.
type sessionTable struct {
	store sessionStore
	log   *slog.Logger
	// maxTotal and maxPer are the kernel limits: in total and per
	// principal (-1: none).
	maxTotal, maxPer int
	// onAdd is called, under mu, whenever a session is added or revived.
	onAdd func()

	mu sync.Mutex
	// implicit maps a connection to its implicit session.
	implicit map[*mcp.ServerSession]*session
	// live holds every connection (stdio, or a 2025-11-25 HTTP session)
	// that has not ended: Close must close them all, or it would wait for
	// them.
	// live maps each to its principal, and liveBy counts them by
	// principal: with several principals, one holds at most half of
	// maxConnections (connsFullFor).
	live   map[*mcp.ServerSession]string
	liveBy map[string]int
	multi  bool
	closed bool
	// kernels counts the sessions that hold a kernel, kernelsBy those of
	// each principal, and handlesBy each principal's sessions of
	// create_session; counted holds the keys of the state folder's
	// sessions that handlesBy counts.
	kernels   int
	kernelsBy map[string]int
	handlesBy map[string]int
	counted   map[[32]byte]bool
}

// newSessionTable returns an empty table with the kernel limits of
// Options.Sessions.MaxSessions and Options.Sessions.MaxSessionsPerPrincipal;
// multi says the server has several principals (tenants).
func newSessionTable(maxSessions, maxPerPrincipal int, multi bool, log *slog.Logger) *sessionTable {
	t := &sessionTable{
		log:       log,
		onAdd:     func() {},
		implicit:  map[*mcp.ServerSession]*session{},
		live:      map[*mcp.ServerSession]string{},
		liveBy:    map[string]int{},
		multi:     multi,
		kernelsBy: map[string]int{},
		handlesBy: map[string]int{},
		counted:   map[[32]byte]bool{},
	}
	t.maxTotal, t.maxPer = limits(maxSessions, maxPerPrincipal, multi)
	return t
}

// limits returns the kernel limits: in total and per principal (-1: none).
// With several principals, a principal's share defaults to half the total
// (at least 1), so that no principal takes every kernel of a bounded
// server (acc3, attack 8); with one, it is the total, as before.
func limits(maxSessions, maxPerPrincipal int, multi bool) (total, per int) {
	total = maxSessions
	switch {
	case total == 0:
		total = defaultMaxSessions
	case total < 0:
		total = -1
	}
	per = maxPerPrincipal
	switch {
	case per == 0 && multi && total > 0:
		per = max(1, total/2)
	case per == 0:
		per = total
	case per < 0:
		per = -1
	}
	return total, per
}

// countStored counts the sessions the state folder keeps against their
// principals' limit, from the start.
func (t *sessionTable) countStored(ks []keyed) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range ks {
		t.counted[k.key] = true
		t.handlesBy[k.rec.Principal]++
	}
}

// track records connection ss of principal p and, when it is new, calls
// added under mu (the Server counts the goroutine that waits for its end
// there, so that Close, which closes the table first, waits for it). It
// reports false once the table is closed.
func (t *sessionTable) track(ss *mcp.ServerSession, p string, added func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	if _, ok := t.live[ss]; ok {
		return true
	}
	t.live[ss] = p
	t.liveBy[p]++
	added()
	return true
}

// untrack forgets connection ss, which ended.
func (t *sessionTable) untrack(ss *mcp.ServerSession) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.live[ss]
	if !ok {
		return
	}
	delete(t.live, ss)
	if t.liveBy[p]--; t.liveBy[p] <= 0 {
		delete(t.liveBy, p)
	}
}

// connsFull reports whether one more 2025-11-25 connection would pass
// maxConnections.
func (t *sessionTable) connsFull() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.live) >= maxConnections
}

// connsFullFor says why one more 2025-11-25 connection of principal p is
// refused: it would pass maxConnections, or, with several principals, p's
// share of it (half), so that one principal's idle connections never
// leave another none (acc3, attack 9). It returns "" when there is room.
func (t *sessionTable) connsFullFor(p string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.multi && t.liveBy[p] >= maxConnections/2:
		return fmt.Sprintf("your token already has %d open connections to ipybox mcp, the share of one principal (half of %d)", t.liveBy[p], maxConnections)
	case len(t.live) >= maxConnections:
		return fmt.Sprintf("ipybox mcp already has %d open connections", maxConnections)
	}
	return ""
}

// implicitOf returns the implicit session of connection ss, or nil.
func (t *sessionTable) implicitOf(ss *mcp.ServerSession) *session {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.implicit[ss]
}

// connByID returns the connection with the given ID whose implicit
// session is principal p's, or nil.
func (t *sessionTable) connByID(id, p string) *mcp.ServerSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	for ss, x := range t.implicit {
		if ss.ID() == id && x.principal == p {
			return ss
		}
	}
	return nil
}

// implicitSession returns the implicit session of connection ss for
// principal p, made with mk on first use.
func (t *sessionTable) implicitSession(ss *mcp.ServerSession, p string, mk func() *session) (*session, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errShuttingDown
	}
	if x, ok := t.implicit[ss]; ok {
		if x.principal != p {
			return nil, errUnknownSession
		}
		return x, nil
	}
	x := mk()
	t.implicit[ss] = x
	t.store.add(x)
	t.onAdd()
	return x, nil
}

// createSession adds a session of create_session for principal p, made
// with mk, unless p holds maxHandlesPerPrincipal.
func (t *sessionTable) createSession(p string, mk func() *session) (*session, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errShuttingDown
	}
	if t.handlesBy[p] >= maxHandlesPerPrincipal {
		return nil, fmt.Errorf("you already hold %d sessions, the most one token may; close some with close_session (list_sessions lists them)", maxHandlesPerPrincipal)
	}
	x := mk()
	t.handlesBy[p]++
	t.store.add(x)
	t.onAdd()
	return x, nil
}

// isClosed reports whether close was called.
func (t *sessionTable) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// close refuses new sessions and connections from now on, and returns
// the connections that have not ended.
func (t *sessionTable) close() []*mcp.ServerSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	var all []*mcp.ServerSession
	for ss := range t.live {
		all = append(all, ss)
	}
	return all
}

// revived counts a session that the store brought back from the state
// folder against its principal's handles, unless it was counted at start.
func (t *sessionTable) revived(x *session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.counted[x.key] {
		t.counted[x.key] = true
		t.handlesBy[x.principal]++
	}
	t.onAdd()
}

// forget removes x from the store and the counts and, unless keep, from
// the state folder.
func (t *sessionTable) forget(x *session, keep bool) {
	if keep {
		t.store.drop(x)
	} else {
		t.store.remove(x)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if x.conn != nil {
		if t.implicit[x.conn] == x {
			delete(t.implicit, x.conn)
		}
	} else if !keep {
		t.uncountLocked(x.key, x.principal)
	}
}

// expired uncounts the state folder's session key of principal p, which
// expired on disk.
func (t *sessionTable) expired(key [32]byte, p string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.counted[key] {
		t.uncountLocked(key, p)
	}
}

func (t *sessionTable) uncountLocked(key [32]byte, p string) {
	delete(t.counted, key)
	t.handlesBy[p]--
	if t.handlesBy[p] <= 0 {
		delete(t.handlesBy, p)
	}
}

// takeSlot counts x's kernel against the limits, or says which is full.
func (t *sessionTable) takeSlot(x *session) error {
	total, per := t.maxTotal, t.maxPer
	t.mu.Lock()
	defer t.mu.Unlock()
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.slot {
		return nil
	}
	switch {
	case total >= 0 && t.kernels >= total:
		t.log.Warn("refused a kernel: the server's limit", "max_sessions", total)
		return fmt.Errorf("ipybox mcp already runs %d kernels, its limit (--max-sessions); close a session you no longer need (close_session, or end a connection) and call again, or start the server with a higher --max-sessions", total)
	case per >= 0 && t.kernelsBy[x.principal] >= per:
		t.log.Warn("refused a kernel: the principal's limit", "principal", x.principal, "max_sessions_per_principal", per)
		return fmt.Errorf("your sessions already run %d kernels, the limit of one token (--max-sessions-per-principal); close a session you no longer need (close_session, or end a connection) and call again", per)
	}
	x.slot = true
	t.kernels++
	t.kernelsBy[x.principal]++
	return nil
}

// releaseSlot returns x's kernel slot, if it holds one.
func (t *sessionTable) releaseSlot(x *session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.slot {
		return
	}
	x.slot = false
	t.kernels--
	t.kernelsBy[x.principal]--
	if t.kernelsBy[x.principal] <= 0 {
		delete(t.kernelsBy, x.principal)
	}
}

// kernelCount returns the number of sessions that hold a kernel.
func (t *sessionTable) kernelCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.kernels
}
