package mcpserver

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/escape"
	"github.com/ipybox/ipybox/internal/policy"
)

// uiSessionView is a session as the page lists it.
type uiSessionView struct {
	ID      string    `json:"id"`
	State   string    `json:"state"` // running, idle, hibernated, closed, not started
	From    string    `json:"from,omitempty"`
	Created time.Time `json:"created"`
	Cells   int       `json:"cells"`
	Dropped int       `json:"dropped,omitempty"`
	Pending int       `json:"pending,omitempty"`
}

// histories returns the histories of principal p's sessions, oldest
// first.
func (u *uiState) histories(p string) []*uiHistory {
	u.mu.Lock()
	var out []*uiHistory
	for x, h := range u.hist {
		if samePrincipal(x.principal, p) {
			out = append(out, h)
		}
	}
	u.mu.Unlock()
	slices.SortFunc(out, func(a, b *uiHistory) int { return a.x.created.Compare(b.x.created) })
	return out
}

func samePrincipal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// historyOf returns the history of principal p's session with the given
// id, or nil: another principal's is unknown.
func (u *uiState) historyOf(p, id string) *uiHistory {
	for _, h := range u.histories(p) {
		if h.x.id == id {
			return h
		}
	}
	return nil
}

// uiState returns the session's state as the page shows it.
func (x *session) uiState() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	switch {
	case x.closed:
		return "closed"
	case x.asleep != nil:
		return "hibernated"
	case x.active > 0:
		return "running"
	case x.ex != nil:
		return "idle"
	}
	return "not started"
}

func (s *Server) uiSessions(w http.ResponseWriter, r *http.Request, l *uiLogin) {
	out := []uiSessionView{}
	for _, h := range s.ui.histories(l.principal) {
		h.mu.Lock()
		v := uiSessionView{ID: h.x.id, From: h.from, Created: h.x.created, Cells: len(h.cells), Dropped: h.dropped}
		h.mu.Unlock()
		v.State = h.x.uiState()
		v.Pending = len(s.pendingOf(h.x))
		out = append(out, v)
	}
	uiJSON(w, out)
}

// uiCells answers a page of a session's cells: the last limit (at most
// 100) before the cell numbered before (0: the newest).
func (s *Server) uiCells(w http.ResponseWriter, r *http.Request, l *uiLogin) {
	h := s.ui.historyOf(l.principal, r.URL.Query().Get("session"))
	if h == nil {
		http.Error(w, "unknown session", http.StatusNotFound)
		return
	}
	done, ok := s.uiTurn(w, r, l)
	if !ok {
		return
	}
	defer done()
	before, _ := strconv.Atoi(r.URL.Query().Get("before"))
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	if limit <= 0 || limit > 100 {
		limit = 50
	}
	h.mu.Lock()
	end := len(h.cells)
	if before > 0 {
		end, _ = slices.BinarySearchFunc(h.cells, before, func(c *uiCell, n int) int { return cmp.Compare(c.N, n) })
	}
	start := max(0, end-limit)
	cells := make([]*uiCellView, 0, end-start)
	for _, c := range h.cells[start:end] {
		cells = append(cells, c.viewLocked())
	}
	h.mu.Unlock()
	uiJSON(w, map[string]any{"cells": cells, "more": start > 0})
}

// uiPending is a pending approval as the page shows it: the facts of the
// terminal prompt (the message), and the answers it may give.
type uiPending struct {
	ID       string    `json:"id"` // cell/ask
	Session  string    `json:"session"`
	Cell     string    `json:"cell"`
	Kind     string    `json:"kind"`
	Server   string    `json:"server,omitempty"`
	Tool     string    `json:"tool,omitempty"`
	Command  string    `json:"command,omitempty"`
	Why      string    `json:"why,omitempty"`
	Message  string    `json:"message"`
	Answers  []string  `json:"answers"`
	Titles   []string  `json:"titles"`
	Rule     string    `json:"rule,omitempty"`
	Deadline time.Time `json:"deadline"`
}

// pendingOf returns the open approvals of x's cells.
func (s *Server) pendingOf(x *session) []uiPending {
	s.runs.mu.Lock()
	cells := slices.Clone(s.runs.cells[x])
	s.runs.mu.Unlock()
	var out []uiPending
	now := time.Now()
	for _, c := range cells {
		c.mu.Lock()
		asks, _ := c.openAsks(now)
		for _, a := range asks {
			p := uiPending{ID: c.id + "/" + a.id, Session: x.id, Cell: c.id, Kind: a.r.Kind, Why: pageText(a.r.Why),
				Message: pageText(a.question.Message), Answers: append([]string{}, a.form.answers...), Titles: append([]string{}, a.form.titles...),
				Rule: pageText(a.form.rule), Deadline: a.r.Deadline}
			if a.r.Kind == "shell" {
				p.Command = pageText(a.r.Command)
			} else {
				p.Server, p.Tool = pageText(a.r.Server), pageText(a.r.Tool)
			}
			p.Answers = append(p.Answers, answerDeny)
			p.Titles = append(p.Titles, "Refuse this call, once")
			out = append(out, p)
		}
		c.mu.Unlock()
	}
	return out
}

func (s *Server) uiApprovals(w http.ResponseWriter, r *http.Request, l *uiLogin) {
	out := []uiPending{}
	for _, h := range s.ui.histories(l.principal) {
		out = append(out, s.pendingOf(h.x)...)
	}
	uiJSON(w, out)
}

// answerDeny is the page's refusal, once (the client's is its decline).
const answerDeny = "deny"

// errNoApproval answers an answer to an approval that is not open for the
// principal: unknown, another principal's, already answered, or expired.
var errNoApproval = errors.New("no such open approval: it was answered (by the client or another page), it timed out, or it is not yours")

func (s *Server) uiAnswer(w http.ResponseWriter, r *http.Request, l *uiLogin) {
	var in struct {
		ID     string `json:"id"`
		Answer string `json:"answer"`
		Rule   string `json:"rule"`
	}
	if err := uiReadJSON(r, &in); err != nil {
		http.Error(w, "answer: want a JSON body {\"id\": ..., \"answer\": ...}", http.StatusBadRequest)
		return
	}
	if err := s.answerWeb(l.principal, in.ID, in.Answer, in.Rule); err != nil {
		code := http.StatusConflict
		if !errors.Is(err, errNoApproval) {
			code = http.StatusBadRequest
		}
		http.Error(w, err.Error(), code)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// answerWeb answers principal p's open approval id ("cell/ask") from the
// page. The first channel to answer wins: the ask leaves the cell's open
// asks, and a client's later answer to it finds the request decided.
func (s *Server) answerWeb(p, id, choice, rule string) error {
	cellID, askID, _ := strings.Cut(id, "/")
	c := s.runs.cellByID(p, cellID)
	if c == nil {
		return errNoApproval
	}
	c.mu.Lock()
	var a *ask
	var asking *round
	for i, x := range c.asks {
		if x.id == askID {
			if choice != answerDeny && !slices.Contains(x.form.answers, choice) {
				c.mu.Unlock()
				return errors.New("answer " + strconv.Quote(escape.Text(choice)) + " is not one this approval offers")
			}
			a = x
			c.asks = append(c.asks[:i:i], c.asks[i+1:]...)
			c.changedLocked()
			if c.legacyHeld && !x.webOnly {
				asking = c.round
			}
			break
		}
	}
	c.mu.Unlock()
	if a == nil || !time.Now().Before(a.r.Deadline) {
		return errNoApproval
	}
	if asking != nil {
		// A 2025-11-25 client is being asked this question (an
		// elicitation request of the go-sdk's bridge): once it is
		// decided here, end that round, so that the call goes on
		// (legacyRounds asks again what is still open) instead of
		// waiting for the client's answer to a question already
		// answered.
		defer asking.cancel()
	}
	er := &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": choice}}
	if rule != "" {
		er.Content["rule"] = rule
	}
	if choice == answerDeny {
		er = &mcp.ElicitResult{Action: "decline", Meta: mcp.Meta{reasonMetaKey: "refused on the web page by " + p}}
	}
	ans, err := settleAs(a.r, a.form, er, "web:"+p, "web page", p)
	if errors.Is(err, ipybox.ErrNotPending) {
		return errNoApproval
	}
	c.ui.decided(a.r, ans)
	return err
}

// cellByID returns principal p's cell with the given id, or nil.
func (t *runTable) cellByID(p, id string) *cellRun {
	t.mu.Lock()
	defer t.mu.Unlock()
	for x, list := range t.cells {
		if !samePrincipal(x.principal, p) {
			continue
		}
		for _, c := range list {
			if c.id == id {
				return c
			}
		}
	}
	return nil
}

// uiAuditRow is an audit row as the page shows it: its text escaped,
// with the page's name of its session.
type uiAuditRow struct {
	policy.Entry
	PageSession string `json:"page_session,omitempty"`
}

// maxUIAuditRows bounds the rows of an audit answer.
const maxUIAuditRows = 500

// uiReadTurns is how many heavy reads (a session's cells, its notebook,
// the audit log) of one principal run at once: each copies up to a
// session's history (16 MiB) or scans the audit log, so that a client
// that asks for them again and again, at once, holds a few copies, not
// one a request (TestAttackUIReadFlood, TestAttackUIAuditFlood). The
// others wait their turn; another principal's never wait for them.
const uiReadTurns = 2

// readTurn waits for a turn of principal p's heavy reads, or for ctx's
// end; it returns the function that gives the turn back.
func (u *uiState) readTurn(ctx context.Context, p string) (func(), error) {
	u.mu.Lock()
	turns := u.reads[p]
	if turns == nil {
		turns = make(chan struct{}, uiReadTurns)
		u.reads[p] = turns
	}
	u.mu.Unlock()
	select {
	case turns <- struct{}{}:
		return func() { <-turns }, nil // bound: at once: this turn was put in above
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// uiReadDeadline bounds the write of a heavy read's answer: a client
// that does not read it gives its turn back then.
const uiReadDeadline = time.Minute

// uiTurn is readTurn for a request of the page, whose answer must then be
// written within the read deadline: false when the request ended while it
// waited.
func (s *Server) uiTurn(w http.ResponseWriter, r *http.Request, l *uiLogin) (func(), bool) {
	done, err := s.ui.readTurn(r.Context(), l.principal)
	if err != nil {
		return nil, false
	}
	s.ui.mu.Lock()
	d := s.ui.readDeadline
	s.ui.mu.Unlock()
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
	return done, true
}

// uiAudit answers principal p's rows of the audit log, newest first,
// filtered by session (the page's name or the log's), tool (or command)
// and decision: at most maxUIAuditRows.
func (s *Server) uiAudit(w http.ResponseWriter, r *http.Request, l *uiLogin) {
	if d := r.URL.Query().Get("decision"); d != "" && !slices.Contains(policy.Decisions, d) {
		http.Error(w, fmt.Sprintf("decision %q: want one of %s, or none for all", d, strings.Join(policy.Decisions, ", ")), http.StatusBadRequest)
		return
	}
	if s.ui.auditLog == "" {
		uiJSON(w, map[string]any{"rows": []uiAuditRow{}, "note": "this server keeps no audit log (no --approval-policy or --approval-log)"})
		return
	}
	done, ok := s.uiTurn(w, r, l)
	if !ok {
		return
	}
	defer done()
	s.ui.mu.Lock()
	names := map[string]string{}
	for k, x := range s.ui.auditIDs {
		names[k] = x.id
	}
	s.ui.mu.Unlock()
	q := r.URL.Query()
	sess, tool, decision := q.Get("session"), q.Get("tool"), q.Get("decision")
	// The newest maxUIAuditRows matching rows, in a ring.
	ring := make([]policy.Entry, 0, 16)
	next := 0
	_, err := policy.ScanLog(s.ui.auditLog, func(e *policy.Entry) {
		if !samePrincipal(e.Principal, l.principal) {
			return
		}
		what := e.Server + "." + e.Tool + " " + e.Command
		page := names[e.Session]
		if sess != "" && !strings.Contains(e.Session, sess) && !strings.Contains(page, sess) || tool != "" && !strings.Contains(what, tool) || decision != "" && e.Decision != decision {
			return
		}
		if len(ring) < maxUIAuditRows {
			ring = append(ring, *e)
			return
		}
		ring[next] = *e
		next = (next + 1) % maxUIAuditRows
	})
	if err != nil {
		uiJSON(w, map[string]any{"rows": []uiAuditRow{}, "note": pageText(err.Error())})
		return
	}
	rows := make([]uiAuditRow, 0, len(ring))
	for i := range ring {
		e := ring[(next+len(ring)-1-i)%len(ring)]
		args := e.Args
		e.Command, e.Tool, e.Server, e.Reason, e.By, e.Channel = pageText(e.Command), pageText(e.Tool), pageText(e.Server), pageText(e.Reason), pageText(e.By), pageText(e.Channel)
		e.Args = nil
		if e.ArgsNote == "" {
			e.ArgsNote = pageText(string(args))
		}
		rows = append(rows, uiAuditRow{Entry: e, PageSession: names[e.Session]})
	}
	uiJSON(w, map[string]any{"rows": rows})
}
