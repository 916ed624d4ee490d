package mcpserver

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// tableSession returns a session of principal p (of create_session when
// conn is nil), as the table sees it.
func tableSession(p string, conn *mcp.ServerSession) *session {
	h := newHandle()
	return &session{handle: h, key: handleKey(h), principal: p, conn: conn}
}

func newTestTable(maxSessions, maxPer int) *sessionTable {
	t := newSessionTable(maxSessions, maxPer, false, slog.New(slog.DiscardHandler))
	t.store = newMemStore()
	return t
}

// TestSessionTableKernelLimits: a kernel slot is counted once per
// session; the server's limit and a principal's refuse the next, each
// naming its flag; a released slot is taken again.
func TestSessionTableKernelLimits(t *testing.T) {
	t.Parallel()
	tab := newTestTable(3, 2)
	a1, a2, a3 := tableSession("alice", nil), tableSession("alice", nil), tableSession("alice", nil)
	b1, b2 := tableSession("bob", nil), tableSession("bob", nil)
	for _, x := range []*session{a1, a2, a1, b1} {
		if err := tab.takeSlot(x); err != nil {
			t.Fatalf("slot of %s: %v", x.principal, err)
		}
	}
	if n := tab.kernelCount(); n != 3 {
		t.Errorf("kernels: %d, want 3 (a session's second take counts once)", n)
	}
	if err := tab.takeSlot(a3); err == nil || !strings.Contains(err.Error(), "--max-sessions") {
		t.Errorf("past the server's limit: %v", err)
	}
	tab.releaseSlot(b1)
	tab.releaseSlot(b1)
	if err := tab.takeSlot(a3); err == nil || !strings.Contains(err.Error(), "--max-sessions-per-principal") {
		t.Errorf("past alice's limit: %v", err)
	}
	if err := tab.takeSlot(b2); err != nil {
		t.Errorf("bob's slot after a release: %v", err)
	}
	if n := tab.kernelCount(); n != 3 {
		t.Errorf("kernels: %d, want 3", n)
	}
	for _, c := range []struct {
		total, per         int
		multi              bool
		wantTotal, wantPer int
	}{
		{0, 0, false, defaultMaxSessions, defaultMaxSessions},
		{-1, 0, false, -1, -1},
		{5, -1, false, 5, -1},
		{5, 2, false, 5, 2},
		// Several principals: half the total by default, at least 1.
		{0, 0, true, defaultMaxSessions, defaultMaxSessions / 2},
		{2, 0, true, 2, 1},
		{5, 0, true, 5, 2},
		{1, 0, true, 1, 1},
		{-1, 0, true, -1, -1},
		{5, 5, true, 5, 5},
		{5, -1, true, 5, -1},
	} {
		if total, per := limits(c.total, c.per, c.multi); total != c.wantTotal || per != c.wantPer {
			t.Errorf("limits(%d, %d, %v) = %d, %d; want %d, %d", c.total, c.per, c.multi, total, per, c.wantTotal, c.wantPer)
		}
	}
}

// TestSessionTableHandles: a principal's sessions of create_session are
// bounded by maxHandlesPerPrincipal, counting those the state folder kept
// and those revived once; forgetting or expiring one frees its place.
func TestSessionTableHandles(t *testing.T) {
	t.Parallel()
	tab := newTestTable(0, 0)
	adds := 0
	tab.onAdd = func() { adds++ }
	stored := []keyed{{key: handleKey("kept"), rec: &record{Principal: "alice"}}}
	tab.countStored(stored)
	var last *session
	for i := range maxHandlesPerPrincipal - 1 {
		x, err := tab.createSession("alice", func() *session { return tableSession("alice", nil) })
		if err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
		last = x
	}
	mk := func() *session { return tableSession("alice", nil) }
	if _, err := tab.createSession("alice", mk); err == nil || !strings.Contains(err.Error(), "close_session") {
		t.Fatalf("past the limit: %v", err)
	}
	if _, err := tab.createSession("bob", func() *session { return tableSession("bob", nil) }); err != nil {
		t.Errorf("another principal: %v", err)
	}
	// The kept one revived counts no more; expiring it frees a place.
	revived := &session{key: handleKey("kept"), principal: "alice"}
	tab.revived(revived)
	if _, err := tab.createSession("alice", mk); err == nil {
		t.Fatal("a revival of a counted session freed a place")
	}
	tab.expired(revived.key, "alice")
	tab.expired(revived.key, "alice")
	x, err := tab.createSession("alice", mk)
	if err != nil {
		t.Fatalf("after an expiry: %v", err)
	}
	if tab.store.get(x.handle) != x {
		t.Error("a created session is not in the store")
	}
	tab.forget(last, false)
	if tab.store.get(last.handle) != nil {
		t.Error("a forgotten session is still in the store")
	}
	if _, err := tab.createSession("alice", mk); err != nil {
		t.Errorf("after forgetting one: %v", err)
	}
	if adds != maxHandlesPerPrincipal+3 {
		t.Errorf("onAdd called %d times, want %d (each add and revival)", adds, maxHandlesPerPrincipal+3)
	}
}

// TestSessionTableImplicitAndClose: a connection's implicit session is
// made once and is its principal's only; once closed the table refuses
// sessions and connections and returns the live ones.
func TestSessionTableImplicitAndClose(t *testing.T) {
	t.Parallel()
	tab := newTestTable(0, 0)
	ss := &mcp.ServerSession{}
	added := 0
	if ok := tab.track(ss, "alice", func() { added++ }); !ok || added != 1 {
		t.Fatalf("track: %v, added %d times", ok, added)
	}
	if ok := tab.track(ss, "alice", func() { added++ }); !ok || added != 1 {
		t.Fatalf("track again: %v, added %d times; want once", ok, added)
	}
	x, err := tab.implicitSession(ss, "alice", func() *session { return tableSession("alice", ss) })
	if err != nil {
		t.Fatal(err)
	}
	if y, err := tab.implicitSession(ss, "alice", func() *session { t.Error("made twice"); return nil }); y != x || err != nil {
		t.Errorf("second use: %v, %v", y, err)
	}
	if _, err := tab.implicitSession(ss, "bob", nil); !errors.Is(err, errUnknownSession) {
		t.Errorf("another principal on the connection: %v", err)
	}
	if tab.implicitOf(ss) != x {
		t.Error("implicitOf")
	}
	tab.forget(x, false)
	if tab.implicitOf(ss) != nil {
		t.Error("implicitOf after forget")
	}
	if all := tab.close(); len(all) != 1 || all[0] != ss {
		t.Errorf("close returned %v", all)
	}
	if ok := tab.track(&mcp.ServerSession{}, "alice", func() { t.Error("added once closed") }); ok || !tab.isClosed() {
		t.Error("a closed table tracked a connection")
	}
	if _, err := tab.createSession("alice", nil); !errors.Is(err, errShuttingDown) {
		t.Errorf("createSession once closed: %v", err)
	}
	if _, err := tab.implicitSession(ss, "alice", nil); !errors.Is(err, errShuttingDown) {
		t.Errorf("implicitSession once closed: %v", err)
	}
	tab.untrack(ss)
	if tab.connsFull() {
		t.Error("connsFull with none")
	}
}

// TestSessionTableConnectionShare: with several principals one holds at
// most half of maxConnections; the refusal says it is the share, and an
// ended connection frees its place. With one principal the whole table
// is its.
func TestSessionTableConnectionShare(t *testing.T) {
	t.Parallel()
	tab := newSessionTable(0, 0, true, slog.New(slog.DiscardHandler))
	var alice []*mcp.ServerSession
	for range maxConnections / 2 {
		ss := &mcp.ServerSession{}
		alice = append(alice, ss)
		tab.track(ss, "alice", func() {})
	}
	if why := tab.connsFullFor("alice"); !strings.Contains(why, "share of one principal") {
		t.Errorf("alice past her share: %q", why)
	}
	if why := tab.connsFullFor("bob"); why != "" {
		t.Errorf("bob: %q", why)
	}
	tab.untrack(alice[0])
	tab.untrack(alice[0])
	if why := tab.connsFullFor("alice"); why != "" {
		t.Errorf("alice after one ended: %q", why)
	}
	one := newSessionTable(0, 0, false, slog.New(slog.DiscardHandler))
	for range maxConnections - 1 {
		one.track(&mcp.ServerSession{}, "local", func() {})
	}
	if why := one.connsFullFor("local"); why != "" {
		t.Errorf("one principal below the total: %q", why)
	}
	one.track(&mcp.ServerSession{}, "local", func() {})
	if why := one.connsFullFor("local"); !strings.Contains(why, "already has 1024 open connections") {
		t.Errorf("one principal at the total: %q", why)
	}
}
