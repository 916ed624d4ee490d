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
//     LocalPrincipal over stdio and without a token), checked on every
//     call: another principal's handle, a forged one and a closed one all
//     get the same errUnknownSession;
//   - its kernel (started at the session's first cell), the kernel's
//     package folder (.ipybox/packages/<random>), and its OAuth owner;
//   - this process: it ends with close_session, after
//     Options.SessionIdleTimeout without a call, and at Close.
//
// The table of handles is behind sessionStore, so that a store that
// outlives the process can take the in-memory one's place.

// LocalPrincipal is the principal of stdio connections and of HTTP
// requests served without a token (Options.NoAuth).
const LocalPrincipal = "local"

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
var errUnknownSession = errors.New("unknown session: the handle was closed, expired after --session-idle-timeout without a call, or was never created with your token; " +
	"create a new one with create_session (the kernel's variables are gone; files in the workspace stay)")

// errNoSession answers a call that names no session on a connection that
// has none of its own: a 2026-07-28 request over HTTP, which has no
// transport session.
var errNoSession = errors.New("this call names no session, and over HTTP with MCP 2026-07-28 there is no connection session to fall back on: " +
	"call create_session first, then pass the handle it returns as the session argument of execute_ipython_cell (and of reset, install_package, register_mcp_server, upload_file and download_file)")

// sessionStore is the table of sessions by handle.
type sessionStore interface {
	// add records x under x.handle.
	add(x *session)
	// get returns the session whose handle is h, or nil. It compares the
	// handle in constant time.
	get(h string) *session
	// remove forgets x; it is a no-op for one that is not there.
	remove(x *session)
	// all returns every session.
	all() []*session
}

// memStore is the in-memory sessionStore.
type memStore struct {
	mu sync.Mutex
	m  map[[32]byte]*session
}

func newMemStore() *memStore { return &memStore{m: map[[32]byte]*session{}} }

func (st *memStore) add(x *session) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.m[handleKey(x.handle)] = x
}

func (st *memStore) get(h string) *session {
	st.mu.Lock()
	x := st.m[handleKey(h)]
	st.mu.Unlock()
	if x == nil || subtle.ConstantTimeCompare([]byte(x.handle), []byte(h)) != 1 {
		return nil
	}
	return x
}

func (st *memStore) remove(x *session) {
	st.mu.Lock()
	defer st.mu.Unlock()
	k := handleKey(x.handle)
	if st.m[k] == x {
		delete(st.m, k)
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

// principalOf returns the principal of a request: the name its bearer
// token has in Options.Principals, or LocalPrincipal (stdio, NoAuth).
func principalOf(req mcp.Request) string {
	if ex := req.GetExtra(); ex != nil && ex.TokenInfo != nil && ex.TokenInfo.UserID != "" {
		return ex.TokenInfo.UserID
	}
	return LocalPrincipal
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
