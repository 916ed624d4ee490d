package mcpserver

import (
	"strings"
	"testing"
)

// TestAttackTaskResultsMemory: a client makes tasks of cells that print
// much, with a large max_output_chars (up to 10,000,000), and never
// fetches them: each finished task keeps its cell's text (up to 8 times
// max_output_chars) for 30 minutes, and a token may keep 64 of them
// (5 GB). What a principal's finished tasks keep is bounded together: past
// the bound a call makes no task (its cell runs as without the
// extension, and the result says why) until some expire; the kept ones
// still answer.
func TestAttackTaskResultsMemory(t *testing.T) {
	t.Parallel()
	srv := noQuick(newServer(t, &Options{Workspace: sharedWorkspace(t)}))
	srv.tasks.mu.Lock()
	srv.tasks.maxBytes = 2 << 20
	srv.tasks.mu.Unlock()
	c := stdioTaskClient(t, srv, withTasks())
	const code = "print('x' * 1_500_000)"
	big := func() map[string]any {
		return c.tool("execute_ipython_cell", map[string]any{"code": code, "max_output_chars": 1_000_000})
	}
	var ids []string
	for i := range 4 {
		res := big()
		id, _ := res["taskId"].(string)
		if id == "" {
			if txt := resultText(res); i < 2 || res["isError"] == true || !strings.Contains(txt, "MiB of results, past the 2 MiB") || !strings.Contains(txt, "xxxx") {
				t.Fatalf("call %d: %v; want a task for the first two, then a plain result that names the bound", i, res)
			}
			break
		}
		ids = append(ids, id)
		c.await(id)
		if i == 3 {
			t.Fatalf("4 tasks of 1.5 MB each kept with a bound of 2 MiB")
		}
	}
	for _, id := range ids {
		if res := c.await(id); res["status"] != "completed" || !strings.Contains(resultText(res["result"]), "xxxx") {
			t.Errorf("a kept task %s: %v", id, res["status"])
		}
	}
}
