package mcpserver

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ipybox/ipybox/internal/testenv"
)

// TestVenvMadeOnceByTwoServers: two servers on one fresh workspace (two
// clients' stdio servers, say) make its venv at once. One makes it, the
// other waits for the lock and uses it; neither takes the other's
// half-made venv for a broken one and moves it aside.
func TestVenvMadeOnceByTwoServers(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	for range 3 { // the race was lost most of the time; three rounds make a pass mean something
		ws := t.TempDir()
		servers := []*Server{newServer(t, &Options{Workspace: ws}), newServer(t, &Options{Workspace: ws})}
		pys := make([]string, len(servers))
		errs := make([]error, len(servers))
		var wg sync.WaitGroup
		for i, s := range servers {
			wg.Go(func() { pys[i], errs[i] = s.only.venvPython(context.Background()) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("server %d: %v", i, err)
			}
		}
		want := filepath.Join(ws, ".ipybox", "venv", "bin", "python")
		if pys[0] != want || pys[1] != want {
			t.Errorf("interpreters %q, want both %s", pys, want)
		}
		if _, err := os.Stat(want); err != nil {
			t.Errorf("the venv's interpreter: %v", err)
		}
		if aside, _ := filepath.Glob(filepath.Join(ws, ".ipybox", "venv.broken-*")); len(aside) > 0 {
			t.Fatalf("a server moved the other's venv aside as broken: %v", aside)
		}
	}
}
