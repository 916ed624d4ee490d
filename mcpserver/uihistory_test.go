package mcpserver

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
)

// TestUIHistoryMemory: whatever kernel code prints, one session's history
// holds at most maxUIBytes of finished cells and maxUICellBytes of the
// cell that runs, measured on the heap (not only as counted): many cells
// with text and images, a running cell that alternates one-byte chunks of
// stdout and stderr (an item each) and shows large images, one that
// writes a byte at a time, and many small cells of many items.
func TestUIHistoryMemory(t *testing.T) {
	line := strings.Repeat("x", 1000) + "\n"
	cases := []struct {
		name string
		fill func(u *uiState, x *session)
	}{
		{"cells with text and images", func(u *uiState, x *session) {
			for i := range 1200 {
				c := u.cellStart(x, "cell_"+strconv.Itoa(i), "print('x')", "")
				for range 40 {
					c.output(&ipybox.Output{Stream: "stdout", Text: line})
				}
				c.add(&uiItem{Kind: "image", Mime: "image/png", Data: strings.Repeat("A", 100<<10)})
				c.end(&ipybox.Result{ExecutionCount: i + 1}, nil)
			}
		}},
		{"one running cell of tiny items and big images", func(u *uiState, x *session) {
			c := u.cellStart(x, "cell_run", "while True: ...", "")
			for i := range 300_000 {
				c.output(&ipybox.Output{Stream: [2]string{"stdout", "stderr"}[i%2], Text: "y"})
			}
			for range 20 {
				c.add(&uiItem{Kind: "image", Mime: "image/png", Data: strings.Repeat("B", maxUIImage)})
			}
		}},
		{"one running cell of one-byte writes", func(u *uiState, x *session) {
			c := u.cellStart(x, "cell_run", "while True: print(end='y', flush=True)", "")
			for range maxUICellText + 1000 {
				c.output(&ipybox.Output{Stream: "stdout", Text: "y"})
			}
		}},
		{"finished cells, then a running one", func(u *uiState, x *session) {
			for i := range 5000 {
				c := u.cellStart(x, "cell_"+strconv.Itoa(i), strings.Repeat("#", 2000), "")
				for j := range 50 {
					c.output(&ipybox.Output{Stream: [2]string{"stdout", "stderr"}[j%2], Text: "z"})
				}
				c.add(&uiItem{Kind: "html", Text: strings.Repeat("<b>h</b>", 100)})
				c.end(nil, fmt.Errorf("failed %d", i))
			}
			c := u.cellStart(x, "cell_last", "print('last')", "")
			for range 20 {
				c.add(&uiItem{Kind: "image", Mime: "image/png", Data: strings.Repeat("C", maxUIImage)})
			}
		}},
	}
	bound := maxUIBytes + maxUICellBytes
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := newUIState(nil, "")
			x := &session{id: "sess", principal: "p"}
			before := heapInUse()
			start := time.Now()
			tc.fill(u, x)
			took := time.Since(start)
			grew := heapInUse() - before
			h := u.history(x)
			h.mu.Lock()
			counted, cells := h.bytes, len(h.cells)
			h.mu.Unlock()
			t.Logf("%d cells kept: heap +%.1f MiB, counted %.1f MiB (bound %.0f MiB), filled in %v", cells, mib(grew), mib(int64(counted)), mib(int64(bound)), took.Round(time.Millisecond))
			if counted > bound || grew > int64(bound)+1<<20 {
				t.Errorf("the history holds %.1f MiB on the heap, counted %.1f MiB; want at most %.0f MiB", mib(grew), mib(int64(counted)), mib(int64(bound)))
			}
			// The count covers the heap, give or take the heap's own
			// noise: it is what the bounds apply to.
			if grew > int64(counted)+int64(counted)/16+1<<20 {
				t.Errorf("the heap grew %.1f MiB, more than the %.1f MiB counted: raise uiItemCost or uiCellCost", mib(grew), mib(int64(counted)))
			}
			// Appending to a stream is linear: 256 Ki one-byte writes
			// took seconds when each copied the text so far.
			if took > 10*time.Second {
				t.Errorf("filling took %v", took)
			}
			runtime.KeepAlive(u)
		})
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// TestUIHistoryThousandCells: a session of 1,000 cells and 100 plots
// stays whole in its history, and the page reads it in pages: the newest
// page, every older one, and the notebook, each timed.
func TestUIHistoryThousandCells(t *testing.T) {
	srv, base := uiServer(t, nil)
	x := &session{id: "sess_big", principal: "alice", created: time.Now()}
	plot := strings.Repeat("P", 40<<10) // a matplotlib PNG is 20-40 KB
	for i := range 1000 {
		c := srv.ui.cellStart(x, "cell_"+strconv.Itoa(i), fmt.Sprintf("x = %d\nprint(x * 2)", i), "")
		c.output(&ipybox.Output{Stream: "stdout", Text: strconv.Itoa(2*i) + "\n"})
		if i%10 == 0 {
			c.add(&uiItem{Kind: "image", Mime: "image/png", Data: plot})
		}
		c.end(&ipybox.Result{ExecutionCount: i + 1}, nil)
	}
	t.Cleanup(func() { srv.ui.forget(x) })
	p := newUIClient(t, base)
	p.signIn(uiTokens["alice"])
	var sessions []uiSessionView
	p.getJSON("/ui/api/sessions", &sessions)
	if len(sessions) != 1 || sessions[0].Cells != 1000 || sessions[0].Dropped != 0 {
		t.Fatalf("sessions: %+v", sessions)
	}
	type page struct {
		Cells []uiCellView
		More  bool
	}
	var first time.Duration
	var slowest time.Duration
	cells, images, pages := 0, 0, 0
	for before := 0; ; pages++ {
		var pg page
		start := time.Now()
		if code := p.getJSON("/ui/api/cells?session=sess_big&limit=100&before="+strconv.Itoa(before), &pg); code != 200 {
			t.Fatalf("page before %d: %d", before, code)
		}
		took := time.Since(start)
		if pages == 0 {
			first = took
		}
		slowest = max(slowest, took)
		cells += len(pg.Cells)
		for _, c := range pg.Cells {
			for _, it := range c.Items {
				if it.Kind == "image" {
					images++
				}
			}
		}
		if !pg.More {
			break
		}
		before = pg.Cells[0].N
	}
	start := time.Now()
	code, nb := p.do("GET", "/ui/api/notebook?session=sess_big", "", nil)
	nbTook := time.Since(start)
	t.Logf("1,000 cells, 100 images: newest page %v, slowest of %d pages %v; notebook %.1f MiB in %v",
		first.Round(time.Microsecond), pages+1, slowest.Round(time.Microsecond), mib(int64(len(nb))), nbTook.Round(time.Millisecond))
	if cells != 1000 || images != 100 || code != 200 {
		t.Errorf("read %d cells and %d images in %d pages, notebook %d; want 1000 and 100", cells, images, pages+1, code)
	}
	if first > 300*time.Millisecond {
		t.Errorf("the newest page took %v, want < 300 ms", first)
	}
}

// TestUISubBounded: a page that reads nothing of its event stream while
// a cell shows images loses the stream once its queue holds
// maxUISubQueued bytes, not 1,024 images; a page that reads keeps it.
func TestUISubBounded(t *testing.T) {
	u := newUIState(nil, "")
	x := &session{id: "sess", principal: "p"}
	stuck := u.subscribe("p")
	t.Cleanup(func() { u.unsubscribe(stuck) })
	img := strings.Repeat("I", maxUIImage)
	var queued, events int
	for i := range 100 {
		c := u.cellStart(x, "cell_"+strconv.Itoa(i), "show()", "")
		c.add(&uiItem{Kind: "image", Mime: "image/png", Data: img})
		c.end(nil, nil)
		u.mu.Lock()
		closed := stuck.closed
		if !closed {
			queued, events = stuck.queued, len(stuck.ch)
		}
		u.mu.Unlock()
		if closed {
			break
		}
	}
	if !stuck.closed || queued > maxUISubQueued {
		t.Errorf("the stuck page's stream: closed %v after %d events and %.1f MiB queued; want closed within %d MiB", stuck.closed, events, mib(int64(queued)), maxUISubQueued>>20)
	}
	t.Logf("the stuck page's stream closed after %d events, %.1f MiB queued", events, mib(int64(queued)))
}
