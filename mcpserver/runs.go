package mcpserver

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/kernel"
)

// runTable is the table of cells in flight: it owns runs, the cells
// suspended at an approval by their requestState (mrtr.go), and cells,
// each session's cells from their start until their result is taken
// (cells.go), under its lock mu. It guards memory only: no I/O happens
// under mu. Under mu it may take a cell's c.mu and a session's x.mu
// (noteCancelled, oldestCell), and nothing else; it calls nothing of the
// Server.
type runTable struct {
	mu    sync.Mutex
	runs  map[[32]byte]*cellRun
	cells map[*session][]*cellRun
}

func newRunTable() *runTable {
	return &runTable{runs: map[[32]byte]*cellRun{}, cells: map[*session][]*cellRun{}}
}

// suspend records c under its requestState.
func (t *runTable) suspend(c *cellRun) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c.mu.Lock()
	k := c.state
	c.mu.Unlock()
	t.runs[k] = c
}

// takeRun removes and returns the run suspended under state, if the
// retry req may continue it: the same principal, tool and arguments.
func (t *runTable) takeRun(req *mcp.CallToolRequest) *cellRun {
	state := req.Params.RequestState
	k := handleKey(state)
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.runs[k]
	if c == nil {
		return nil
	}
	d := argsDigest(req.Params.Name, req.Params.Arguments)
	if subtle.ConstantTimeCompare([]byte(c.principal), []byte(principalOf(req))) != 1 || c.tool != req.Params.Name || d != c.args {
		return nil
	}
	delete(t.runs, k)
	return c
}

// dropRun forgets c, wherever it is suspended.
func (t *runTable) dropRun(c *cellRun) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, r := range t.runs {
		if r == c {
			delete(t.runs, k)
		}
	}
	t.forgetCellLocked(c)
}

// dropRuns forgets the suspended runs of session x (which ends them: they
// run in its context).
func (t *runTable) dropRuns(x *session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, r := range t.runs {
		if r.x == x {
			delete(t.runs, k)
		}
	}
	delete(t.cells, x)
}

// cancelRun ends the cell suspended under state, if any: a client before
// 2026-07-28 cancelled the call while it was asked.
func (t *runTable) cancelRun(state string) {
	t.mu.Lock()
	c := t.runs[handleKey(state)]
	delete(t.runs, handleKey(state))
	t.mu.Unlock()
	if c != nil {
		c.interrupt(byCancel)
	}
}

// addCell records c as x's newest cell.
func (t *runTable) addCell(x *session, c *cellRun) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cells == nil {
		t.cells = map[*session][]*cellRun{}
	}
	t.cells[x] = append(t.cells[x], c)
}

// forgetCell removes c from its session's cells.
func (t *runTable) forgetCell(c *cellRun) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.forgetCellLocked(c)
}

func (t *runTable) forgetCellLocked(c *cellRun) {
	list := t.cells[c.x]
	for i, r := range list {
		if r == c {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(t.cells, c.x)
	} else {
		t.cells[c.x] = list
	}
}

// oldestCell returns x's oldest cell whose result no request has taken,
// or with running, its oldest that has not ended.
func (t *runTable) oldestCell(x *session, running bool) *cellRun {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.cells[x] {
		c.mu.Lock()
		done := c.done
		c.mu.Unlock()
		if !running || !done {
			return c
		}
	}
	return nil
}

// noteCancelled tells the session's next result that c was interrupted
// when its client cancelled the call (whose answer the client ignores).
func (t *runTable) noteCancelled(c *cellRun, res *ipybox.Result, cellErr error) {
	c.mu.Lock()
	why, at := c.interrupted, c.interruptedAt
	c.mu.Unlock()
	if why != byCancel {
		return
	}
	text := ""
	if res != nil {
		text = res.Text
	}
	if len(text) > 2000 {
		text = "..." + text[len(text)-2000:]
	}
	kept := "the kernel kept its state"
	if errors.Is(cellErr, kernel.ErrInterruptIgnored) {
		kept = "it ignored the interrupt, so the kernel was restarted and its state is lost"
	}
	w := fmt.Sprintf("[ipybox: the previous cell %s (started %s) was interrupted at %s because the client cancelled its call; %s. Its last output: %q]", c.id, c.start.Format("15:04:05"), at.Format("15:04:05"), kept, text)
	// A call that came meanwhile waits behind c, its warnings taken:
	// the note goes into its result.
	t.mu.Lock()
	defer t.mu.Unlock()
	list := t.cells[c.x]
	for i, r := range list {
		if r == c && i+1 < len(list) {
			next := list[i+1]
			next.mu.Lock()
			next.warnings = append(next.warnings, w)
			next.mu.Unlock()
			return
		}
	}
	c.x.mu.Lock()
	c.x.warnings = append(c.x.warnings, w)
	c.x.mu.Unlock()
}

// rearm makes req the call that a retry continues c from: a retry of req
// continues it (takeRun matches these), and no longer the earlier call's.
func (t *runTable) rearm(c *cellRun, req *mcp.CallToolRequest) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c.tool, c.args = req.Params.Name, argsDigest(req.Params.Name, req.Params.Arguments)
	for k, r := range t.runs {
		if r == c {
			delete(t.runs, k)
		}
	}
}
