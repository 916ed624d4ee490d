package mcpserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/ipybox/ipybox/internal/escape"
)

// uiEvent is one change the page is told of, through its event stream
// (Server-Sent Events): a cell started (cell) or ended (end), an item was
// added or changed (item), text was appended to an item (append), or the
// approvals or sessions changed (approvals, sessions: the page asks for
// them again). Every text in it was escaped by pageText.
type uiEvent struct {
	T    string      `json:"t"`
	S    string      `json:"s,omitempty"` // the session's id
	C    string      `json:"c,omitempty"` // the cell's id
	V    int         `json:"v,omitempty"` // the cell's change count after this one
	I    int         `json:"i,omitempty"`
	Text string      `json:"text,omitempty"`
	Item *uiItem     `json:"item,omitempty"`
	Cell *uiCellView `json:"cell,omitempty"`
}

// uiSub is one open event stream of a principal's page. Its queue is
// bounded in events and in bytes (an event may carry an image): a page
// that does not keep up loses its stream (closed), and reloads what it
// shows when it reconnects.
type uiSub struct {
	principal string
	ch        chan []byte
	seq       uint64 // its place among the streams: the oldest goes first
	// login is the sign-in it was opened with (its cookie's digest): the
	// stream ends with it (endLoginLocked). Zero for none (tests).
	login  [32]byte
	closed bool // guarded by uiState.mu
	queued int  // bytes in ch, guarded by uiState.mu
}

const (
	uiSubQueue     = 1024
	maxUISubQueued = 16 << 20
	// maxUISubs bounds a principal's open streams (a page opens one per
	// tab): a new one closes its oldest.
	maxUISubs = 8
)

// watched reports whether a page of the principal has its event stream
// open: events are made only then (the history is kept either way, for
// export_notebook).
func (u *uiState) watched(principal string) bool {
	if u == nil {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for sub := range u.subs {
		if sub.principal == principal {
			return true
		}
	}
	return false
}

// publish sends ev to the principal's open streams. An empty ev (made
// while nobody watched) is not sent.
func (u *uiState) publish(principal string, ev uiEvent) {
	if u == nil || ev.T == "" {
		return
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	for sub := range u.subs {
		if sub.principal != principal || sub.closed {
			continue
		}
		if sub.queued+len(b) <= maxUISubQueued {
			select {
			case sub.ch <- b:
				sub.queued += len(b)
				continue
			default:
			}
		}
		sub.closed = true
		close(sub.ch)
		delete(u.subs, sub)
	}
}

// subscribe opens a stream of the principal's events; past maxUISubs
// streams of the principal, its oldest closes, so that a client that
// opens streams and reads none pins at most maxUISubs queues.
func (u *uiState) subscribe(principal string) *uiSub {
	return u.subscribeLogin(principal, [32]byte{})
}

// subscribeLogin is subscribe for the sign-in login: the stream ends with
// it, and is closed at once if it ended already.
func (u *uiState) subscribeLogin(principal string, login [32]byte) *uiSub {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.subSeq++
	sub := &uiSub{principal: principal, seq: u.subSeq, login: login, ch: make(chan []byte, uiSubQueue)}
	if l := u.logins[login]; login != ([32]byte{}) && (l == nil || time.Now().After(l.expires)) {
		sub.closed = true
		close(sub.ch)
		return sub
	}
	for {
		var oldest *uiSub
		n := 0
		for s := range u.subs {
			if s.principal != principal {
				continue
			}
			n++
			if oldest == nil || s.seq < oldest.seq {
				oldest = s
			}
		}
		if n < maxUISubs {
			break
		}
		oldest.closed = true
		close(oldest.ch)
		delete(u.subs, oldest)
	}
	u.subs[sub] = struct{}{}
	return sub
}

// endLoginLocked ends the sign-in k (signed out, pushed out, or
// expired), and the event streams opened with it: a stream is read with
// the sign-in it was opened with, no longer. Called with mu held.
func (u *uiState) endLoginLocked(k [32]byte) {
	delete(u.logins, k)
	for sub := range u.subs {
		if sub.login == k && !sub.closed {
			sub.closed = true
			close(sub.ch)
			delete(u.subs, sub)
		}
	}
}

func (u *uiState) unsubscribe(sub *uiSub) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !sub.closed {
		sub.closed = true
		close(sub.ch)
		delete(u.subs, sub)
	}
}

// uiEvents streams the principal's events until the page goes away, the
// stream falls behind, or the server closes.
func (s *Server) uiEvents(w http.ResponseWriter, r *http.Request, l *uiLogin) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	_, k, _ := s.ui.login(r)
	sub := s.ui.subscribeLogin(l.principal, k)
	defer s.ui.unsubscribe(sub)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	fmt.Fprint(w, "retry: 1000\n: ready\n\n")
	fl.Flush()
	ping := time.NewTicker(15 * time.Second)
	defer ping.Stop()
	for {
		select {
		case b, ok := <-sub.ch:
			if !ok {
				return
			}
			s.ui.mu.Lock()
			sub.queued -= len(b)
			s.ui.mu.Unlock()
			fmt.Fprintf(w, "data: %s\n\n", b)
			fl.Flush()
		case <-ping.C:
			// A sign-in that expired ends its streams here (one that
			// ends otherwise closes them: endLoginLocked).
			if _, _, ok := s.ui.login(r); !ok {
				return
			}
			fmt.Fprint(w, ": ping\n\n")
			fl.Flush()
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// pageText is kernel text as the page gets it: every character that could
// hide or reorder what is shown (control characters but newline and tab,
// bidi overrides, zero-width characters) spelled as a visible escape.
// The page sets it as textContent, never as markup.
func pageText(s string) string { return escape.Text(s) }

// uiCellView is a cell as the page gets it: escaped.
type uiCellView struct {
	ID        string    `json:"id"`
	N         int       `json:"n"`
	Code      string    `json:"code"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end,omitzero"`
	State     string    `json:"state"`
	Count     int       `json:"count,omitempty"`
	Items     []*uiItem `json:"items"`
	Truncated int64     `json:"truncated,omitempty"`
	V         int       `json:"v"`
}

// viewLocked is c as the page gets it. Called with its history's mu held.
func (c *uiCell) viewLocked() *uiCellView {
	v := &uiCellView{ID: c.ID, N: c.N, Code: pageText(c.Code), Start: c.Start, End: c.End, State: c.State, Count: c.Count, Truncated: c.Truncated, V: c.V}
	v.Items = make([]*uiItem, len(c.Items))
	for i, it := range c.Items {
		v.Items[i] = it.view()
	}
	return v
}

// view is the item as the page gets it: text escaped, but for HTML and
// SVG, which the page shows only in a frame sandboxed without scripts.
func (it *uiItem) view() *uiItem {
	v := *it
	if it.Kind != "html" && it.Kind != "svg" {
		v.Text = pageText(it.Text)
	}
	v.Name = pageText(it.Name)
	v.By = pageText(it.By)
	if it.Trace != nil {
		v.Trace = make([]string, len(it.Trace))
		for i, l := range it.Trace {
			v.Trace[i] = pageText(l)
		}
	}
	return &v
}
