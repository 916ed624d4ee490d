package mcpserver

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A session is a kernel behind a handle. The handle is what a client holds:
// a string that create_session returns and that execute_ipython_cell,
// reset, install_package, register_mcp_server, upload_file and
// download_file take as their session argument (SEP-2567's explicit state
// handles). A connection that has a session of its own (stdio, or a
// 2025-11-25 client's transport session) gets an implicit one: a handle the
// server makes for the connection, never shows, and ends with it.
//
// A handle is bound to:
//   - the principal whose token created it (a name of --auth-token-file;
//     localPrincipal over stdio and without a token), checked on every
//     call: another principal's handle, a forged one and a closed one all
//     get the same errUnknownSession;
//   - its kernel (started at the session's first cell), the kernel's
//     package folder (.ipybox/packages/<random>), and its OAuth owner;
//   - the state folder (state.go), for a session of create_session: it
//     ends with close_session, or after Options.Durability.SessionExpiry without a
//     call; it hibernates after Options.Durability.HibernateAfter without one, and
//     outlives the process (durable.go). An implicit session ends with its
//     connection.
//
// The table of handles is behind sessionStore: the live sessions in
// memory, and those of the state folder, which a call revives.

// localPrincipal is the principal of stdio connections and of HTTP
// requests served without a token (Options.HTTP.NoAuth).
const localPrincipal = "local"

// handlePrefix starts every handle, so that one is recognisable in a
// transcript; what follows is 130 random bits (crypto/rand.Text).
const handlePrefix = "ipy_"

// newHandle mints a handle: unguessable, never derived from anything.
func newHandle() string { return handlePrefix + rand.Text() }

// handleKey is what the table is keyed by: a handle's SHA-256, so that a
// lookup's time says nothing about how much of a guess matched.
func handleKey(h string) [32]byte { return sha256.Sum256([]byte(h)) }

// logID names a session in logs without giving its handle away.
func logID(h string) string {
	k := handleKey(h)
	return hex.EncodeToString(k[:4])
}

// errUnknownSession is the one answer to a handle that is not the caller's
// live session, whatever the reason, so that it tells nothing about
// handles of others.
var errUnknownSession = errors.New("unknown session: the handle was closed, expired after --session-expiry without a call, or was never created with your token; " +
	"create a new one with create_session (the kernel's variables are gone; files in the workspace stay)")

// errNoSession answers a call that names no session on a connection that
// has none of its own: a 2026-07-28 request over HTTP, which has no
// transport session.
var errNoSession = errors.New("this call names no session, and over HTTP with MCP 2026-07-28 there is no connection session to fall back on: " +
	"call create_session first, then pass the handle it returns as the session argument of execute_ipython_cell (and of reset, install_package, register_mcp_server, upload_file and download_file)")

// sessionStore is the table of sessions by handle.
type sessionStore interface {
	// add records x under its handle's key; a durable one in the state
	// folder too.
	add(x *session)
	// get returns the session whose handle is h, or nil: a live one, or
	// one the state folder keeps, revived (asleep). It compares keys in
	// constant time.
	get(h string) *session
	// remove forgets x, here and in the state folder; it is a no-op for
	// one that is not there.
	remove(x *session)
	// drop forgets x here only: the state folder keeps it for the next
	// start (the server stops).
	drop(x *session)
	// all returns every live session.
	all() []*session
}

// memStore is the in-memory sessionStore, and the live part of
// durableStore.
type memStore struct {
	mu sync.Mutex
	m  map[[32]byte]*session
}

func newMemStore() *memStore { return &memStore{m: map[[32]byte]*session{}} }

func (st *memStore) add(x *session) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.m[x.key] = x
}

func (st *memStore) get(h string) *session {
	k := handleKey(h)
	st.mu.Lock()
	x := st.m[k]
	st.mu.Unlock()
	if x == nil || subtle.ConstantTimeCompare(x.key[:], k[:]) != 1 {
		return nil
	}
	return x
}

func (st *memStore) remove(x *session) { st.drop(x) }

func (st *memStore) drop(x *session) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.m[x.key] == x {
		delete(st.m, x.key)
	}
}

func (st *memStore) all() []*session {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]*session, 0, len(st.m))
	for _, x := range st.m {
		out = append(out, x)
	}
	return out
}

// durableStore is the sessionStore of a server with a state folder: the
// live sessions in memory, and the sessions of create_session on disk,
// which get revives on their first call.
type durableStore struct {
	mem   *memStore
	state *stateDir
	s     *Server
	// reviveMu makes one revival per handle.
	reviveMu sync.Mutex
}

func (st *durableStore) add(x *session) {
	st.mem.add(x)
	st.s.saveRecord(x)
}

func (st *durableStore) get(h string) *session {
	if x := st.mem.get(h); x != nil {
		return x
	}
	k := handleKey(h)
	st.reviveMu.Lock()
	defer st.reviveMu.Unlock()
	if x := st.mem.get(h); x != nil {
		return x
	}
	r, err := st.state.read(k)
	if err != nil {
		st.s.log.Warn("a session's record cannot be read", "session", logID(h), "err", err)
		return nil
	}
	if r == nil {
		return nil
	}
	if st.s.sessions.isClosed() {
		return nil
	}
	x := st.s.revive(h, k, r)
	st.mem.add(x)
	st.s.sessions.revived(x)
	st.s.log.Info("session revived from the state folder", "session", x.id, "principal", x.principal)
	return x
}

func (st *durableStore) remove(x *session) {
	st.mem.remove(x)
	if x.durable() {
		st.state.remove(x.key)
	}
}

func (st *durableStore) drop(x *session) { st.mem.drop(x) }

func (st *durableStore) all() []*session { return st.mem.all() }

// principalOf returns the principal of a request: the name its bearer
// token has in Options.HTTP.Principals, or localPrincipal (stdio, NoAuth).
func principalOf(req mcp.Request) string {
	if ex := req.GetExtra(); ex != nil && ex.TokenInfo != nil && ex.TokenInfo.UserID != "" {
		return ex.TokenInfo.UserID
	}
	return localPrincipal
}

// sessionless reports whether req came without a transport session: a
// 2026-07-28 request over HTTP, served by a stateless, per-request
// session. Stdio connections and 2025-11-25 HTTP sessions have one.
func sessionless(req *mcp.CallToolRequest) bool {
	return req.Extra != nil && req.Extra.Header != nil && req.Session.ID() == ""
}

// ValidPrincipalName reports whether name can name a principal in a token
// file: letters, digits, '.', '_' and '-', at most 64 of them.
func ValidPrincipalName(name string) error {
	if name == "" || len(name) > 64 || strings.TrimLeft(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != "" {
		return fmt.Errorf("principal name %q: use 1 to 64 letters, digits, '.', '_' or '-'", name)
	}
	return nil
}
