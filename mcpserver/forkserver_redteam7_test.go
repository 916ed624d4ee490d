package mcpserver

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestAttackForkServerPerPrincipal: with --sandbox-fork-server and two
// principals, each principal's kernels are forked by a fork server of
// its own: no fork server is the parent of both a kernel of Alice's and
// one of Bob's, so a kernel's siblings (what shares its fork server's
// pages, address layout and hash seed) are its own principal's. Kernel
// code of each sees no process of the other.
func TestAttackForkServerPerPrincipal(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	const aliceTok, bobTok = "alice-token-0123456789", "bob-token-0123456789"
	ws := t.TempDir()
	srv := newServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox(), Sessions: SessionOptions{SandboxZygote: true},
		HTTP: HTTPOptions{Principals: map[string]string{"alice": aliceTok, "bob": bobTok}}})
	url := serveHTTP(t, srv)
	const probe = `import os; print(sorted(int(p) for p in os.listdir("/proc") if p.isdigit()) == [1, os.getpid()], os.getppid())`
	for _, tok := range []string{aliceTok, bobTok, aliceTok} {
		cs := connectHTTPAs(t, url, tok, newVersion, nil)
		if got := runIn(t, cs, createSession(t, cs), probe); got != "True 0" {
			t.Errorf("a forked kernel sees %q; want only itself and its init, and no parent", got)
		}
	}
	// Seen from the host: the fork servers' children, by principal.
	owners := map[int]map[string]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd")
		if err != nil {
			continue
		}
		for _, p := range []string{"alice", "bob"} {
			if cwd != filepath.Join(ws, p) && !strings.HasPrefix(cwd, filepath.Join(ws, p)+"/") {
				continue
			}
			ppid := ppidOf(pid)
			cl, _ := os.ReadFile("/proc/" + strconv.Itoa(ppid) + "/cmdline")
			if !strings.Contains(string(cl), kernel.ZygoteMarker) {
				continue
			}
			if owners[ppid] == nil {
				owners[ppid] = map[string]int{}
			}
			owners[ppid][p]++
		}
	}
	seen := map[string]int{}
	for z, ps := range owners {
		if len(ps) > 1 {
			t.Errorf("fork server %d forked kernels of several principals: %v", z, ps)
		}
		for p, n := range ps {
			seen[p] += n
		}
	}
	if seen["alice"] != 2 || seen["bob"] != 1 {
		t.Errorf("forked kernels found by principal: %v; want alice 2, bob 1 (fork servers: %v)", seen, owners)
	}
}

// ppidOf is pid's parent (0: unknown).
func ppidOf(pid int) int {
	st, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for l := range strings.Lines(string(st)) {
		if v, ok := strings.CutPrefix(l, "PPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
