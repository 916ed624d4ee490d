package mcpserver

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// retry returns a call of tool with args and requestState state, from the
// local principal.
func retry(tool, args, state string) *mcp.CallToolRequest {
	return &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: tool, Arguments: json.RawMessage(args), RequestState: state}}
}

// TestRunTableTakeRunMatchesTheCall: a suspended cell is continued only
// by a retry of the same principal, tool and arguments, once; rearm moves
// it to another call.
func TestRunTableTakeRunMatchesTheCall(t *testing.T) {
	t.Parallel()
	tab := newRunTable()
	x := &session{}
	c := &cellRun{x: x, principal: localPrincipal, tool: "execute_ipython_cell", args: argsDigest("execute_ipython_cell", json.RawMessage(`{"code":"1"}`)), state: handleKey("st")}
	tab.addCell(x, c)
	tab.suspend(c)
	for _, bad := range []*mcp.CallToolRequest{
		retry("execute_ipython_cell", `{"code":"2"}`, "st"),
		retry("collect_cell", `{"code":"1"}`, "st"),
		retry("execute_ipython_cell", `{"code":"1"}`, "other"),
	} {
		if got := tab.takeRun(bad); got != nil {
			t.Errorf("a retry of %s %s under %q took the cell", bad.Params.Name, bad.Params.Arguments, bad.Params.RequestState)
		}
	}
	bob := retry("execute_ipython_cell", `{"code":"1"}`, "st")
	bob.Extra = &mcp.RequestExtra{TokenInfo: &auth.TokenInfo{UserID: "bob"}}
	if got := tab.takeRun(bob); got != nil {
		t.Error("another principal's retry took the cell")
	}
	if got := tab.takeRun(retry("execute_ipython_cell", `{"code":"1"}`, "st")); got != c {
		t.Fatal("the matching retry did not take the cell")
	}
	if got := tab.takeRun(retry("execute_ipython_cell", `{"code":"1"}`, "st")); got != nil {
		t.Error("a second retry took the cell again")
	}
	tab.suspend(c)
	tab.rearm(c, retry("collect_cell", `{"wait":1}`, ""))
	if got := tab.takeRun(retry("execute_ipython_cell", `{"code":"1"}`, "st")); got != nil {
		t.Error("after rearm, the earlier call's retry took the cell")
	}
	c.state = handleKey("st2")
	tab.suspend(c)
	if got := tab.takeRun(retry("collect_cell", `{"wait":1}`, "st2")); got != c {
		t.Error("after rearm, the new call's retry did not take the cell")
	}
}

// TestRunTableCellsOfASession: a session's cells are kept oldest first;
// oldestCell with running skips those that ended; forgetCell, dropRun and
// dropRuns forget them; cancelRun ends a suspended cell once.
func TestRunTableCellsOfASession(t *testing.T) {
	t.Parallel()
	tab := newRunTable()
	x, y := &session{}, &session{}
	ended := &cellRun{x: x, done: true}
	running := &cellRun{x: x, state: handleKey("r")}
	theirs := &cellRun{x: y, state: handleKey("y")}
	for _, c := range []*cellRun{ended, running, theirs} {
		tab.addCell(c.x, c)
	}
	if got := tab.oldestCell(x, false); got != ended {
		t.Error("oldestCell: not the oldest")
	}
	if got := tab.oldestCell(x, true); got != running {
		t.Error("oldestCell(running): not the oldest that runs")
	}
	tab.forgetCell(ended)
	if got := tab.oldestCell(x, false); got != running {
		t.Error("after forgetCell, oldestCell is not the next")
	}
	tab.suspend(running)
	tab.dropRun(running)
	if tab.oldestCell(x, false) != nil || len(tab.runs) != 0 {
		t.Error("dropRun left the cell")
	}
	tab.suspend(theirs)
	ctx, cancel := context.WithCancel(t.Context())
	theirs.cancel = cancel
	tab.cancelRun("y")
	if ctx.Err() == nil {
		t.Error("cancelRun did not end the suspended cell")
	}
	if len(tab.runs) != 0 {
		t.Error("cancelRun left the cell suspended")
	}
	tab.suspend(theirs)
	tab.dropRuns(y)
	if tab.oldestCell(y, false) != nil || len(tab.runs) != 0 {
		t.Error("dropRuns left the session's cells")
	}
}

// TestRunTableNoteCancelled: the note of a cell its client cancelled goes
// to the cell queued behind it, or else to its session's next result.
func TestRunTableNoteCancelled(t *testing.T) {
	t.Parallel()
	tab := newRunTable()
	x := &session{}
	c := &cellRun{x: x, id: "cell_a", interrupted: byCancel}
	next := &cellRun{x: x}
	tab.addCell(x, c)
	tab.addCell(x, next)
	tab.noteCancelled(c, nil, nil)
	if len(next.warnings) != 1 || len(x.warnings) != 0 {
		t.Errorf("with a cell behind it: its warnings %q, the session's %q; want the note on the cell behind", next.warnings, x.warnings)
	}
	tab.forgetCell(next)
	tab.noteCancelled(c, nil, nil)
	if len(x.warnings) != 1 {
		t.Errorf("alone: the session's warnings %q; want the note", x.warnings)
	}
	c.interrupted = byInterruptTool
	tab.noteCancelled(c, nil, nil)
	if len(x.warnings) != 1 {
		t.Error("a cell interrupted by the interrupt tool got a cancellation note")
	}
}
