package mcpserver

import (
	"encoding/base64"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/safefs"
)

// The history of each session's cells, for the web page and for
// export_notebook: recorded where cells run (startCell), and bounded per
// session, since kernel code chooses how much it prints:
//   - at most maxUICells cells and maxUIBytes bytes (code, text, images,
//     and the cost of each cell and item) per session: past either, the
//     oldest finished cells are dropped;
//   - a cell keeps at most maxUICellBytes bytes, of which at most
//     maxUICellText bytes of text; the rest is counted (the tool result
//     and the spill file keep the whole output), so that the cell that
//     runs, which is never dropped, is bounded too;
//   - an image is kept up to maxUIImage bytes, HTML and SVG up to
//     maxUIMarkup.
const (
	maxUICells = 1000
	// maxUIPrincipalBytes bounds a principal's histories together: a
	// hibernated session keeps its history but holds no kernel, and a
	// token may hold maxHandlesPerPrincipal sessions.
	maxUIPrincipalBytes = 64 << 20
	maxUIBytes          = 16 << 20
	maxUICellText       = 256 << 10
	maxUIImage          = 2 << 20
	maxUIMarkup         = 1 << 20
	maxUICode           = 64 << 10
	// maxUICellBytes bounds one cell; with maxUIBytes it bounds a session:
	// its finished cells, and the one that prints.
	maxUICellBytes = 8 << 20
	// uiCellCost and uiItemCost are what a cell and an item hold beside
	// their strings (structs, map, slice slots, allocation rounding):
	// TestUIHistoryMemory checks that the count covers the heap.
	uiCellCost = 512
	uiItemCost = 192
)

// uiHistory is one session's cells. Its mu is taken before uiState.mu,
// never after: a cell's events are published under it, so that a page
// gets them in the order of their change counts (uiCell.V).
type uiHistory struct {
	u *uiState
	x *session

	mu      sync.Mutex
	cells   []*uiCell
	bytes   int
	seq     int
	dropped int    // cells dropped to stay within the bounds
	from    string // the id of the session it was forked from
	gone    bool   // forgotten: its bytes no longer count
}

// uiCell is one cell of a history. Its fields are guarded by its
// history's mu.
type uiCell struct {
	h         *uiHistory
	ID        string
	N         int
	Code      string
	Start     time.Time
	End       time.Time
	State     string // running, ok, error
	Count     int
	Items     []*uiItem
	text      int
	bytes     int // what the cell holds, as counted in its history's bytes
	Truncated int64
	// V counts the cell's changes: each event of the cell carries the
	// count after it, so that the page applies only what its snapshot
	// (uiCellView.V) lacks.
	V         int
	approvals map[*ipybox.ApprovalRequest]*uiItem
}

// uiItem is one output of a cell: text of a stream, a result, an error,
// an image, HTML or SVG, or an approval with its state.
type uiItem struct {
	Kind  string   `json:"kind"` // stdout stderr result display error image html svg approval note
	Text  string   `json:"text,omitempty"`
	Mime  string   `json:"mime,omitempty"`
	Data  string   `json:"data,omitempty"` // an image's base64
	Name  string   `json:"name,omitempty"` // an error's class
	Trace []string `json:"trace,omitempty"`
	// An approval's id (for the answer), its state and who decided.
	ID    string `json:"id,omitempty"`
	State string `json:"state,omitempty"`
	By    string `json:"by,omitempty"`
	// buf holds a stream's text once it is extended: Text is its String.
	buf *strings.Builder
}

// extend appends text to a stream item, in a buffer that grows by
// doubling (a cell of many small writes costs linear time, not
// quadratic), and returns how much more the item holds.
func (it *uiItem) extend(text string) int {
	before := it.size()
	if it.buf == nil {
		it.buf = &strings.Builder{}
		it.buf.WriteString(it.Text)
	}
	it.buf.WriteString(text)
	it.Text = it.buf.String()
	return it.size() - before
}

func (it *uiItem) size() int {
	text := len(it.Text)
	if it.buf != nil {
		text = it.buf.Cap()
	}
	n := text + len(it.Data) + len(it.Name) + len(it.Mime) + len(it.ID) + len(it.State) + len(it.By) + uiItemCost
	for _, l := range it.Trace {
		n += len(l) + 16
	}
	return n
}

// history returns x's history, made at its first cell (for a session
// that ended, an empty one that is not kept). Nil when the page is off.
func (u *uiState) history(x *session) *uiHistory {
	if u == nil {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	h := u.hist[x]
	if h == nil && x.uiGone {
		// Ended: a call that found it just before gets an empty
		// history that nothing keeps or counts.
		return &uiHistory{u: u, x: x, gone: true}
	}
	if h == nil {
		h = &uiHistory{u: u, x: x}
		u.hist[x] = h
	}
	return h
}

// forget drops x's history: the session ended.
func (u *uiState) forget(x *session) {
	if u == nil {
		return
	}
	u.mu.Lock()
	h, had := u.hist[x]
	delete(u.hist, x)
	x.uiGone = true
	for k, y := range u.auditIDs {
		if y == x {
			delete(u.auditIDs, k)
		}
	}
	u.mu.Unlock()
	if had {
		// Its bytes leave the principal's count; a cell that still
		// ends in it counts no more (gone).
		h.mu.Lock()
		h.gone = true
		n := h.bytes
		h.mu.Unlock()
		u.count(x.principal, -n)
		u.publish(x.principal, uiEvent{T: "sessions"})
	}
}

// cellStart records a cell that starts in x. It returns nil when the page
// is off; every method of a nil *uiCell does nothing.
// auditID is the session's name in the audit log (its executor's
// SessionID).
func (u *uiState) cellStart(x *session, id, code, auditID string) *uiCell {
	h := u.history(x)
	if h == nil {
		return nil
	}
	if auditID != "" {
		u.mu.Lock()
		u.auditIDs[auditID] = x
		u.mu.Unlock()
	}
	if len(code) > maxUICode {
		code = code[:maxUICode] + "\n# ... (ipybox: the rest of the cell's code is not kept for the page)"
	}
	h.mu.Lock()
	h.seq++
	c := &uiCell{h: h, ID: id, N: h.seq, Code: code, Start: time.Now(), State: "running", V: 1, bytes: len(code) + len(id) + uiCellCost,
		approvals: map[*ipybox.ApprovalRequest]*uiItem{}}
	h.cells = append(h.cells, c)
	over := h.growLocked(c.bytes)
	h.trimLocked()
	if u.watched(x.principal) {
		u.publish(x.principal, uiEvent{T: "cell", S: x.id, C: id, V: c.V, Cell: c.viewLocked()})
	}
	h.mu.Unlock()
	if over {
		u.trimPrincipal(x.principal)
	}
	return c
}

// growLocked adds d bytes to h and to its principal's count, and reports
// whether the principal holds more than maxUIPrincipalBytes. Called with
// h.mu held.
func (h *uiHistory) growLocked(d int) bool {
	h.bytes += d
	if h.gone {
		return false
	}
	return h.u.count(h.x.principal, d) > maxUIPrincipalBytes
}

// count adds d to what principal p's histories hold, and returns the sum.
func (u *uiState) count(p string, d int) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := u.bytes[p] + d
	if n <= 0 {
		delete(u.bytes, p)
		return 0
	}
	u.bytes[p] = n
	return n
}

// trimPrincipal drops principal p's oldest finished cells, whichever of
// its sessions they are in, until its histories hold at most
// maxUIPrincipalBytes (its running cells, one a session, are never
// dropped: each is bounded by maxUICellBytes). It takes one history's mu
// at a time.
func (u *uiState) trimPrincipal(p string) {
	for {
		u.mu.Lock()
		over := u.bytes[p] > maxUIPrincipalBytes
		u.mu.Unlock()
		if !over {
			return
		}
		var victim *uiHistory
		var at time.Time
		for _, h := range u.histories(p) {
			h.mu.Lock()
			if c := h.oldestFinishedLocked(); c != nil && (victim == nil || c.Start.Before(at)) {
				victim, at = h, c.Start
			}
			h.mu.Unlock()
		}
		if victim == nil {
			return
		}
		victim.mu.Lock()
		if c := victim.oldestFinishedLocked(); c != nil {
			victim.dropLocked(c)
		}
		victim.mu.Unlock()
	}
}

// oldestFinishedLocked returns h's oldest cell that is not running, or
// nil. Called with h.mu held.
func (h *uiHistory) oldestFinishedLocked() *uiCell {
	for _, c := range h.cells {
		if c.State != "running" {
			return c
		}
	}
	return nil
}

// dropLocked drops cell c from h, and counts it dropped. Called with h.mu
// held.
func (h *uiHistory) dropLocked(c *uiCell) {
	i := slices.Index(h.cells, c)
	if i < 0 {
		return
	}
	h.growLocked(-c.bytes)
	h.cells = append(h.cells[:i:i], h.cells[i+1:]...)
	h.dropped++
}

// trimLocked drops the oldest finished cells past the bounds. Called with
// h.mu held.
func (h *uiHistory) trimLocked() {
	for len(h.cells) > 1 && (len(h.cells) > maxUICells || h.bytes > maxUIBytes) {
		i := 0
		for i < len(h.cells)-1 && h.cells[i].State == "running" {
			i++
		}
		h.dropLocked(h.cells[i])
	}
}

// add appends an item to the cell, or, for text of the stream of its last
// item, extends that one; it publishes the change. Past the cell's
// bounds, the item (or the text past them) is only counted.
func (c *uiCell) add(it *uiItem) {
	if c == nil {
		return
	}
	h := c.h
	h.mu.Lock()
	over := c.addLocked(it)
	h.mu.Unlock()
	if over {
		h.u.trimPrincipal(h.x.principal)
	}
}

// addLocked is add with c's history's mu held; it reports whether the
// principal's histories hold more than maxUIPrincipalBytes.
func (c *uiCell) addLocked(it *uiItem) bool {
	h := c.h
	cost, last := it.size(), -1
	if it.Kind == "stdout" || it.Kind == "stderr" {
		room := min(maxUICellText-c.text, maxUICellBytes-c.bytes-uiItemCost)
		if room <= 0 {
			c.Truncated += int64(len(it.Text))
			return false
		}
		if len(it.Text) > room {
			c.Truncated += int64(len(it.Text) - room)
			it.Text = strings.Clone(it.Text[:room]) // not the whole chunk
		}
		c.text += len(it.Text)
		cost = it.size()
		if n := len(c.Items); n > 0 && c.Items[n-1].Kind == it.Kind {
			last = n - 1
		}
	} else if c.bytes+cost > maxUICellBytes {
		c.Truncated += int64(len(it.Text) + len(it.Data))
		return false
	}
	c.V++
	ev := uiEvent{T: "append", S: h.x.id, C: c.ID, V: c.V, I: last}
	if last >= 0 {
		cost = c.Items[last].extend(it.Text)
	} else {
		c.Items = append(c.Items, it)
		ev.T, ev.I = "item", len(c.Items)-1
	}
	c.bytes += cost
	over := h.growLocked(cost)
	h.trimLocked()
	if !h.u.watched(h.x.principal) {
		return over
	}
	if ev.T == "item" {
		ev.Item = it.view()
	} else {
		ev.Text = pageText(it.Text)
	}
	h.u.publish(h.x.principal, ev)
	return over
}

// output records a chunk of a stream.
func (c *uiCell) output(o *ipybox.Output) {
	if c == nil || o.Text == "" {
		return
	}
	kind := "stdout"
	if o.Stream == "stderr" {
		kind = "stderr"
	}
	c.add(&uiItem{Kind: kind, Text: o.Text})
}

// display records a rich output: its images (read from the files the
// executor saved them to, without following links), its HTML, and its
// text.
func (c *uiCell) display(d *ipybox.Display, base []string) {
	if c == nil {
		return
	}
	shown := false
	for _, p := range d.Images {
		if it := readImage(p, base); it != nil {
			c.add(it)
			shown = true
		}
	}
	if html, ok := d.Data["text/html"].(string); ok && html != "" && len(html) <= maxUIMarkup {
		c.add(&uiItem{Kind: "html", Text: html})
		shown = true
	}
	switch {
	case d.Result && d.Text != "":
		c.add(&uiItem{Kind: "result", Text: d.Text})
	case !shown && d.Text != "":
		c.add(&uiItem{Kind: "display", Text: d.Text})
	}
}

// readImage reads an image file beneath one of the folders base, refusing
// links: kernel code can write there.
func readImage(p string, base []string) *uiItem {
	mime := map[string]string{".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".svg": "image/svg+xml"}[strings.ToLower(filepath.Ext(p))]
	if mime == "" {
		return nil
	}
	for _, b := range base {
		rel, err := filepath.Rel(b, p)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
			continue
		}
		limit := int64(maxUIImage)
		if mime == "image/svg+xml" {
			limit = maxUIMarkup
		}
		data, err := safefs.ReadFile(b, rel, limit)
		if err != nil {
			return &uiItem{Kind: "note", Text: fmt.Sprintf("[image %s not shown: %v]", filepath.Base(p), err)}
		}
		if mime == "image/svg+xml" {
			return &uiItem{Kind: "svg", Text: string(data)}
		}
		return &uiItem{Kind: "image", Mime: mime, Data: base64.StdEncoding.EncodeToString(data)}
	}
	return nil
}

// approval records a tool call or shell command that asks for approval.
func (c *uiCell) approval(r *ipybox.ApprovalRequest, id, message string) {
	if c == nil {
		return
	}
	it := &uiItem{Kind: "approval", ID: id, Text: message, State: "pending"}
	c.h.mu.Lock()
	c.approvals[r] = it
	c.h.mu.Unlock()
	c.add(it)
	c.h.u.publish(c.h.x.principal, uiEvent{T: "approvals"})
}

// decided records how r was decided, and by whom.
func (c *uiCell) decided(r *ipybox.ApprovalRequest, a ipybox.Answer) {
	if c == nil {
		return
	}
	h := c.h
	h.mu.Lock()
	it := c.approvals[r]
	if it == nil {
		h.mu.Unlock()
		return
	}
	delete(c.approvals, r)
	it.State = "refused"
	if a.Accept {
		it.State = "allowed"
	}
	if a.Remember != "" && a.Remember != ipybox.RememberOnce {
		it.State += " (" + string(a.Remember) + ")"
	}
	it.By = a.By
	if a.Channel != "" {
		it.By += " through " + a.Channel
	}
	idx := -1
	for i, x := range c.Items {
		if x == it {
			idx = i
		}
	}
	c.V++
	if idx >= 0 {
		h.u.publish(h.x.principal, uiEvent{T: "item", S: h.x.id, C: c.ID, V: c.V, I: idx, Item: it.view()})
	}
	h.mu.Unlock()
	h.u.publish(h.x.principal, uiEvent{T: "approvals"})
}

// end records the cell's end.
func (c *uiCell) end(res *ipybox.Result, err error) {
	if c == nil {
		return
	}
	var pe *ipybox.PythonError
	switch {
	case errors.As(err, &pe):
		c.add(&uiItem{Kind: "error", Name: pe.Name, Text: pe.Value, Trace: pe.Traceback})
	case err != nil:
		c.add(&uiItem{Kind: "error", Name: "ipybox", Text: err.Error()})
	}
	h := c.h
	h.mu.Lock()
	c.End = time.Now()
	c.V++
	c.State = "ok"
	if err != nil {
		c.State = "error"
	}
	if res != nil {
		c.Count = res.ExecutionCount
	}
	for r, it := range c.approvals {
		if it.State == "pending" {
			it.State = "not answered"
		}
		delete(c.approvals, r)
	}
	if h.u.watched(h.x.principal) {
		h.u.publish(h.x.principal, uiEvent{T: "end", S: h.x.id, C: c.ID, V: c.V, Cell: c.viewLocked()})
	}
	h.mu.Unlock()
}

// changed tells x's pages that its state changed (a cell began or
// ended): they load the list of sessions again.
func (u *uiState) changed(x *session) {
	if u.watched(x.principal) {
		u.publish(x.principal, uiEvent{T: "sessions"})
	}
}

// forked records that y was forked from x.
func (u *uiState) forked(y, x *session) {
	h := u.history(y)
	if h == nil {
		return
	}
	h.mu.Lock()
	h.from = x.id
	h.mu.Unlock()
	u.publish(y.principal, uiEvent{T: "sessions"})
}

// imageBases are the folders a session's images are read beneath: the
// principal's images folder, and its workspace (never another
// principal's).
func (s *Server) imageBases(x *session) []string {
	var out []string
	if d := x.t.imagesDir(); d != "" {
		out = append(out, d)
	}
	return append(out, x.t.dir)
}
