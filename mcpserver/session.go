package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcpconn"
)

var errSessionClosed = errors.New("the session is closed")

// session is a kernel behind a handle (see handles.go). Its executor
// starts at the first call that needs it, not when the session is made:
// a session that never runs a cell holds no kernel.
type session struct {
	s *Server
	// handle is the secret (logs show id): "" for a session revived from
	// the state folder until a call names it. Guarded by mu.
	handle    string
	key       [32]byte // the handle's SHA-256
	id        string
	principal string
	// uiGone is set when the page's state forgot the session (its end):
	// its history is never made again. Guarded by uiState.mu.
	uiGone bool
	// t is the principal's tenant (tenant.go): its folder, registry and
	// virtualenv.
	t *tenant
	// conf is the confinement of the kernels that wrote the session's
	// folders (confinement.go); guarded by mu.
	conf string
	// conn is the connection of an implicit session, which ends with it;
	// nil for a session of create_session, which the state folder keeps
	// (durable).
	conn    *mcp.ServerSession
	created time.Time

	ctx    context.Context // ends when the session closes
	cancel context.CancelFunc

	startMu sync.Mutex // serialises starts
	mu      sync.Mutex // guards the fields below
	ex      *ipybox.Executor
	closed  bool
	slot    bool      // holds one of the server's kernel slots
	active  int       // calls, cells and checkpoints in flight
	used    time.Time // when the last call ended (or began)

	// pkg and snap name the session's folders, below .ipybox/packages and
	// .ipybox/snapshots ("" until its first local kernel); kernelID is
	// the id of its gateway kernel. Guarded by mu.
	pkg, snap, kernelID string
	// asleep is set while the session holds no kernel and its next call
	// must bring its state back: it hibernated, or was revived from the
	// state folder. Guarded by mu.
	asleep *sleep
	// sleeping is set while a hibernation runs. Guarded by mu.
	sleeping bool
	// lockf is the session's lock in the state folder, held while it has
	// a local kernel. Guarded by startMu.
	lockf *os.File
	// ckBusy is set while a checkpoint runs, ckAgain when a cell ended
	// meanwhile; ckUnsaved is what the last checkpoint left out. Guarded
	// by mu.
	ckBusy, ckAgain bool
	ckDone          chan struct{} // closed when ckBusy clears
	ckUnsaved       string

	closeMu   sync.Mutex // makes close wait for a concurrent close
	closeDone bool
	closeErr  error

	// synced maps a registration's name to the generation this session's
	// executor knows; guarded by t.mu.
	synced map[string]int
	// warnings are registration problems to report with the next execute;
	// guarded by mu.
	warnings []string
	// regErrs are the servers of warnings that could not be registered,
	// and why, for the next execute's structured result.
	regErrs map[string]string
	// owner is the current executor's holder of this session for OAuth
	// sign-ins; guarded by mu.
	owner *oauthOwner
	// pooled says the executor came from the warm pool; guarded by
	// startMu.
	pooled bool
}

func newSession(s *Server, principal string, conn *mcp.ServerSession) *session {
	h := newHandle()
	now := time.Now()
	x := &session{s: s, handle: h, key: handleKey(h), id: logID(h), principal: principal, t: s.tenant(principal), conf: s.factory.confinement(), conn: conn, created: now, used: now, synced: map[string]int{}}
	x.ctx, x.cancel = context.WithCancel(s.ctx)
	return x
}

// durable reports whether the state folder keeps x: a session of
// create_session.
func (x *session) durable() bool { return x.conn == nil }

// sleep says why a session holds no kernel, and what its next call must
// restore.
type sleep struct {
	at  time.Time
	why string // "idle for 10m", "ipybox mcp stopped"
	// saved is set when the snapshot was saved (a local kernel; not its
	// report: a hibernated session holds as little as it can); detached
	// is set for a gateway kernel that runs on without this process.
	saved    bool
	detached bool
	// lost says why nothing was saved, when something should have been.
	lost string
}

// begin marks a call in flight (the idle timeout leaves the session
// alone); end marks it done.
func (x *session) begin() {
	x.mu.Lock()
	x.active++
	x.used = time.Now()
	x.mu.Unlock()
}

func (x *session) end() {
	x.mu.Lock()
	x.active--
	x.used = time.Now()
	x.mu.Unlock()
}

// idleSince returns when the session became idle, or the zero time when a
// call is in flight.
func (x *session) idleSince() time.Time {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.active > 0 {
		return time.Time{}
	}
	return x.used
}

// hasKernel reports whether the session holds a started executor.
func (x *session) hasKernel() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.ex != nil
}

// current returns the executor if there is one, without starting it.
func (x *session) current() *ipybox.Executor {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.ex
}

// executor returns the session's executor, starting it (from the warm
// pool when it has one) on first use, within Options.Sessions.StartTimeout. The
// start takes one of the server's kernel slots (Options.Sessions.MaxSessions).
func (x *session) executor(ctx context.Context) (*ipybox.Executor, error) {
	x.mu.Lock()
	ex, closed := x.ex, x.closed
	x.mu.Unlock()
	if closed {
		return nil, errSessionClosed
	}
	if ex != nil {
		if !x.sync(ctx, ex) {
			return ex, nil
		}
		return ex, x.remask(ctx, ex, true)
	}
	wait := x.s.opts.Sessions.StartTimeout
	sctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	defer context.AfterFunc(x.ctx, cancel)()
	// Another call of this session may be starting it (bounded by the
	// same timeout, and by the session's end), or hibernating it (its
	// save bounded by saveTimeout): wait for that.
	x.startMu.Lock()
	defer x.startMu.Unlock()
	x.mu.Lock()
	ex, closed = x.ex, x.closed
	x.mu.Unlock()
	switch {
	case closed:
		return nil, errSessionClosed
	case ex != nil:
		if !x.sync(ctx, ex) {
			return ex, nil
		}
		return ex, x.remask(ctx, ex, true)
	}
	if err := x.s.sessions.takeSlot(x); err != nil {
		return nil, err
	}
	t0 := time.Now()
	sctx, span := x.s.tel.StartSession(sctx)
	ex, err := x.wake(sctx)
	x.s.tel.EndSession(span, sessionID(ex), x.pooled, err)
	if err != nil {
		x.s.sessions.releaseSlot(x)
		x.unlock()
		x.s.log.Warn("kernel start failed", "session", x.id, "err", err)
		switch {
		case errors.Is(err, errHeldElsewhere), errors.Is(err, errUnknownSession):
			return nil, err
		case sctx.Err() != nil:
			return nil, x.startErr(ctx, err, wait)
		}
		return nil, fmt.Errorf("starting the kernel: %w", err)
	}
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		x.s.factory.closeExecutor(ex, true)
		x.s.sessions.releaseSlot(x)
		x.unlock()
		return nil, errSessionClosed
	}
	x.ex = ex
	x.mu.Unlock()
	x.s.log.Info("kernel started", "session", x.id, "took", time.Since(t0).Round(time.Millisecond))
	x.s.saveRecord(x)
	x.sync(ctx, ex)
	return ex, x.remask(ctx, ex, false)
}

// remask restarts ex's kernel, just started or just given new
// registrations, when it started under masks that a start now would not
// give it: a server registered since (at start, with
// --mcp-config, before the first kernel knew it; or by another session)
// names a file that kernels may not read. A kernel whose masks are stale
// is never handed out. told says whether the session is told that its
// kernel's variables are gone (not for a kernel that has run nothing).
func (x *session) remask(ctx context.Context, ex *ipybox.Executor, told bool) error {
	if !ex.Stale() {
		return nil
	}
	x.s.log.Info("restarting a kernel started under older masks", "session", x.id)
	if err := ex.Reset(ctx); err != nil {
		return fmt.Errorf("restarting the kernel under the masks of the servers registered since it started: %w", err)
	}
	if told {
		x.mu.Lock()
		x.warnings = append(x.warnings, "[ipybox: the kernel restarted before this cell, and its variables are gone: a server registered since it started names files that kernels may not read, and a running kernel cannot lose its view of them]")
		x.mu.Unlock()
	}
	return nil
}

// startErr words a start that ran out of time or was cancelled.
func (x *session) startErr(ctx context.Context, err error, wait time.Duration) error {
	switch {
	case x.ctx.Err() != nil:
		return errSessionClosed
	case ctx.Err() != nil:
		return fmt.Errorf("waiting for the kernel to start: %w", ctx.Err())
	}
	return fmt.Errorf("the kernel did not start within %v (--start-timeout); see the server's log (--log-file) for why: %w", wait, err)
}

// takeRegErrors returns and clears the pending registration errors.
func (x *session) takeRegErrors() map[string]string {
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.regErrs
	x.regErrs = nil
	return e
}

// takeWarnings returns and clears the pending warnings.
func (x *session) takeWarnings() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	w := x.warnings
	x.warnings = nil
	return w
}

// sync registers in ex the servers registered elsewhere (at start, or by
// another session) since ex started. Failures become warnings. It holds
// no lock across a registration's network I/O but that name's own (see
// lockName).
func (x *session) sync(ctx context.Context, ex *ipybox.Executor) (any bool) {
	for _, p := range x.s.pending(x) {
		x.syncOne(ctx, ex, p.name)
		any = true
	}
	return any
}

// syncOne registers name in ex, as the table has it once name's lock is
// held: a registration that committed while this one waited wins.
func (x *session) syncOne(ctx context.Context, ex *ipybox.Executor, name string) {
	t := x.t
	unlock := t.lockName(name)
	defer unlock()
	t.mu.Lock()
	r := t.regs[name]
	if r == nil || x.synced[name] == r.gen {
		t.mu.Unlock()
		return
	}
	cfg, gen := r.cfg, r.gen
	t.mu.Unlock()
	_, err := ex.RegisterMCPServer(ctx, name, cfg)
	t.mu.Lock()
	x.synced[name] = gen
	if err == nil {
		if r := t.regs[name]; r != nil && r.gen == gen {
			r.persisted = true
		}
	}
	t.mu.Unlock()
	if err != nil {
		x.s.log.Warn("registering an MCP server", "server", name, "err", err)
		x.mu.Lock()
		x.warnings = append(x.warnings, fmt.Sprintf("[ipybox: MCP server %q could not be registered: %v]", name, err))
		if x.regErrs == nil {
			x.regErrs = map[string]string{}
		}
		x.regErrs[name] = err.Error()
		x.mu.Unlock()
	}
}

// nameLock is one name's registration lock, with the count of those that
// hold or wait for it.
type nameLock struct {
	mu    sync.Mutex
	users int
}

// lockName takes name's registration lock and returns its release. The
// registrations of one name are ordered by it, so that the last to commit
// is the last written to servers.json and to the table alike; those of
// other names, and everything else, do not wait for its network I/O.
func (t *tenant) lockName(name string) (unlock func()) {
	t.mu.Lock()
	l := t.nameLocks[name]
	if l == nil {
		l = &nameLock{}
		t.nameLocks[name] = l
	}
	l.users++
	t.mu.Unlock()
	l.mu.Lock() // bound: the holder's registration, bounded by its ctx and the connect timeout
	return func() {
		l.mu.Unlock()
		t.mu.Lock()
		if l.users--; l.users == 0 {
			delete(t.nameLocks, name)
		}
		t.mu.Unlock()
	}
}

type pendingReg struct {
	name string
	cfg  ipybox.ServerConfig
	gen  int
}

// pending lists the registrations of x's tenant that x's executor does
// not know yet.
func (s *Server) pending(x *session) []pendingReg {
	t := x.t
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []pendingReg
	for name, r := range t.regs {
		if x.synced[name] != r.gen {
			out = append(out, pendingReg{name, r.cfg, r.gen})
		}
	}
	return out
}

// register registers a server through x's executor and makes it known to
// every other session of x's tenant. The executor saves only this server's entry in
// servers.json (mcpconn's SaveEntry keeps the others), so it need not
// learn the other registrations first.
func (x *session) register(ctx context.Context, ex *ipybox.Executor, name string, cfg ipybox.ServerConfig) ([]ipybox.ToolModule, error) {
	t := x.t
	unlock := t.lockName(name)
	defer unlock()
	release, err := t.reserveServer(name, cfg)
	if err != nil {
		return nil, err
	}
	defer release()
	mods, err := ex.RegisterMCPServer(ctx, name, cfg)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.regGen++
	t.regs[name] = &registration{cfg: cfg, gen: t.regGen, persisted: true}
	x.synced[name] = t.regGen
	t.mu.Unlock()
	return mods, nil
}

// close ends the session for good: its running cell, its kernel, its
// handle, its folders and its record. It is idempotent.
func (x *session) close() error { return x.finish(false) }

// stop ends the session in this process, as the server stops: its
// running cell and its kernel end, but a session of create_session keeps
// its record and folders, and comes back at the next start from its last
// snapshot. An implicit session is closed.
func (x *session) stop() error { return x.finish(x.durable()) }

func (x *session) finish(keep bool) error {
	x.closeMu.Lock()
	defer x.closeMu.Unlock()
	if x.closeDone {
		return x.closeErr
	}
	x.closeDone = true
	x.mu.Lock()
	x.closed = true
	x.mu.Unlock()
	x.cancel()
	x.s.forget(x, keep)
	// A start in progress ends with the context.
	x.startMu.Lock()
	defer x.startMu.Unlock()
	x.mu.Lock()
	ex := x.ex
	x.ex = nil
	pkg, snap, kid, asleep := x.pkg, x.snap, x.kernelID, x.asleep
	x.mu.Unlock()
	if ex != nil {
		if keep && !x.s.local() {
			// A gateway kernel keeps the state itself: let it run on
			// for the next front end, as a hibernation does.
			x.closeErr = ex.Detach()
		} else {
			x.closeErr = x.s.factory.closeExecutor(ex, keep)
		}
		x.s.sessions.releaseSlot(x)
		x.s.log.Info("session ended; its kernel stopped", "session", x.id, "kept", keep)
	} else if !keep && asleep != nil && asleep.detached && kid != "" {
		// Its kernel runs on the gateway without us: end it there too.
		x.s.deleteGatewayKernel(kid)
	}
	if !keep {
		x.t.removeFolders(pkg, snap)
	}
	x.unlock()
	return x.closeErr
}

// unlock releases the session's lock in the state folder, if it holds it.
// Called with startMu held.
func (x *session) unlock() {
	if x.lockf != nil {
		x.lockf.Close()
		x.lockf = nil
	}
}

// sessionID names ex's session in traces ("" for none).
func sessionID(ex *ipybox.Executor) string {
	if ex == nil {
		return ""
	}
	return ex.SessionID()
}

// removeFolders removes a session's folders by their names.
func (t *tenant) removeFolders(pkg, snap string) {
	if t.dir == "" {
		return
	}
	for _, d := range []struct{ kind, name string }{{"packages", pkg}, {"snapshots", snap}} {
		if folderName(d.name) {
			if err := os.RemoveAll(filepath.Join(t.dir, ".ipybox", d.kind, d.name)); err != nil {
				t.s.log.Warn("could not remove a session's folder", "kind", d.kind, "err", err)
			}
		}
	}
}

// oauthOwner returns the holder of the session for OAuth sign-ins of its
// executor, once it has one.
func (x *session) oauthOwner() *oauthOwner {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.owner
}

// clientStdio reports whether cfg is a stdio server that a client
// registered: those count against Options.Sessions.MaxRegisteredServers.
func clientStdio(cfg ipybox.ServerConfig) bool {
	return cfg.Origin == mcpconn.OriginClient && cfg.Command != ""
}

// reserveServer counts the registration of name (cfg) against the
// tenant's share of client-registered stdio servers, until release: a
// name already registered as one is replaced and counts once. Each such
// server runs a process of its own (and an egress proxy) in every session
// that uses it, so without a bound one principal's client could fill the
// host's memory for every other (acc3, attack 11). Those of earlier runs,
// in the tenant's servers.json, count too. The name's lock is held, so
// the table's entry for name does not change until release.
func (t *tenant) reserveServer(name string, cfg ipybox.ServerConfig) (release func(), err error) {
	limit := t.s.opts.Sessions.MaxRegisteredServers
	if limit == 0 {
		limit = defaultMaxRegisteredServers
	}
	if limit < 0 || !clientStdio(cfg) {
		return func() {}, nil
	}
	// servers.json is read before t.mu, which is held across no I/O. An
	// entry without origin that is not the operator's counts as a
	// client's, as at its start (gateStart).
	persisted := map[string]bool{}
	if reg, err := mcpconn.LoadRegistry(filepath.Join(t.dir, ".ipybox", "servers.json")); err == nil {
		for _, n := range reg.Names() {
			c, _ := reg.Get(n)
			if _, op := t.s.opts.Servers[n]; c.Command != "" && (c.Origin == mcpconn.OriginClient || c.Origin == "" && !op) {
				persisted[n] = true
			}
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.regs[name]; persisted[name] || r != nil && clientStdio(r.cfg) {
		return func() {}, nil
	}
	n := t.serversPending
	for rn, r := range t.regs {
		if clientStdio(r.cfg) && !persisted[rn] {
			n++
		}
	}
	n += len(persisted)
	if n >= limit {
		return nil, fmt.Errorf("%d stdio MCP servers are registered for your token already, the limit of one principal (--max-registered-servers %d): each runs a process of its own; register one of their names again to replace it, or ask the operator to raise --max-registered-servers", n, limit)
	}
	t.serversPending++
	return func() {
		t.mu.Lock()
		t.serversPending--
		t.mu.Unlock()
	}, nil
}
