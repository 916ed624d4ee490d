package mcpserver

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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

// TestVenvStoppedMakeLeavesNoDebris: a server stopped while it makes the
// venv (claude mcp list, an Inspector tools/list) used to leave an empty
// .ipybox/venv that the next start moved aside as venv.broken-*, with a
// warning. Now the venv is made aside and renamed into place: a stopped
// make leaves no .ipybox/venv, and its folder is removed by the next.
func TestVenvStoppedMakeLeavesNoDebris(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	ws := t.TempDir()
	// A make stopped at several points, the last one by a kill (its
	// folder stays, as after a SIGKILL).
	for _, d := range []time.Duration{time.Millisecond, 30 * time.Millisecond, 150 * time.Millisecond} {
		s := newServer(t, &Options{Workspace: ws})
		ctx, cancel := context.WithTimeout(context.Background(), d)
		s.tenant(localPrincipal).venvPython(ctx)
		cancel()
		if _, err := os.Lstat(venvDir(ws)); err == nil {
			if _, err := os.Stat(filepath.Join(venvDir(ws), "bin", "python")); err != nil {
				t.Fatalf("a make stopped after %v left a venv without bin/python", d)
			}
		}
	}
	killed := filepath.Join(ws, ".ipybox", venvBuildPrefix+"KILLED")
	if err := os.MkdirAll(filepath.Join(killed, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newServer(t, &Options{Workspace: ws})
	py, err := s.tenant(localPrincipal).venvPython(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(py, "-c", "import sys; print(sys.prefix)").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != venvDir(ws) {
		t.Errorf("the venv's interpreter: prefix %q, %v; want %s", out, err, venvDir(ws))
	}
	for _, pat := range []string{"venv.broken-*", venvBuildPrefix + "*"} {
		if left, _ := filepath.Glob(filepath.Join(ws, ".ipybox", pat)); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	}
	if b, err := os.ReadFile(filepath.Join(venvDir(ws), "bin", "pip")); err == nil && !strings.Contains(string(b), venvDir(ws)+"/bin/python") {
		t.Errorf("bin/pip does not run the venv's interpreter at its final place:\n%s", b)
	}
}

// TestVenvWarnsOtherBase: the workspace's venv is kept across servers;
// one asked for another interpreter says that its kernels run on the
// first, and how to change that. The same interpreter by another name
// (a link) is not another.
func TestVenvWarnsOtherBase(t *testing.T) {
	first := testenv.NeedsPython(t)
	other, _ := testenv.PyPIPython(t)
	ws := t.TempDir()
	venv := func(py string) string {
		t.Helper()
		logs := &testenv.Buffer{}
		s := newServer(t, &Options{Workspace: ws, Python: py, Logger: slog.New(slog.NewTextHandler(logs, nil))})
		if _, err := s.tenant(localPrincipal).venvPython(context.Background()); err != nil {
			t.Fatal(err)
		}
		return logs.String()
	}
	venv(first)
	if b, err := os.ReadFile(filepath.Join(venvDir(ws), venvBaseRecord)); err != nil || strings.TrimSpace(string(b)) != first {
		t.Fatalf("the venv's record of its base: %q, %v; want %s", b, err, first)
	}
	if logs := venv(first); strings.Contains(logs, "was made from") {
		t.Errorf("the same interpreter warned:\n%s", logs)
	}
	link := filepath.Join(t.TempDir(), "python3")
	if err := os.Symlink(first, link); err != nil {
		t.Fatal(err)
	}
	if logs := venv(link); strings.Contains(logs, "was made from") {
		t.Errorf("the same interpreter through a link warned:\n%s", logs)
	}
	logs := venv(other)
	for _, want := range []string{"was made from " + first, "not from --python " + other, "remove the folder"} {
		if !strings.Contains(logs, want) {
			t.Errorf("another interpreter: the log lacks %q:\n%s", want, logs)
		}
	}
}
