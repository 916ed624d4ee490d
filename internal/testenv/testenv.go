// Package testenv gates tests on the tools they need and checks that
// lifecycle tests leave no goroutine behind.
//
// A test that needs a real tool (ipykernel, bwrap, node, an npm server)
// calls one of the Needs functions. Locally a missing tool skips the test;
// with CI=true it fails it, so CI never passes by skipping.
package testenv

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/testenv/ci"
)

// InCI reports whether the tests run in CI, where missing tools are fatal.
func InCI() bool { return ci.InCI() }

// Missing skips t locally and fails it in CI.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	ci.Missing(t, format, args...)
}

// NeedsTool returns the path of the named program or skips/fails.
func NeedsTool(t testing.TB, name string) string {
	t.Helper()
	return ci.NeedsTool(t, name)
}

// NeedsPython returns an interpreter that can import ipykernel.
func NeedsPython(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("tier 3 test: skipped with -short")
	}
	p, err := kernel.FindPython(context.Background(), "")
	if err != nil {
		Missing(t, "%v", err)
	}
	return p
}

// RepoRoot returns the module root (the folder with go.mod).
func RepoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// NPMBin returns the path of an installed npm test server's entry point
// (tools/npm/node_modules/.bin/NAME), or skips/fails.
func NPMBin(t testing.TB, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("tier 3 test: skipped with -short")
	}
	NeedsTool(t, "node")
	p := filepath.Join(RepoRoot(t), "tools", "npm", "node_modules", ".bin", name)
	if _, err := os.Stat(p); err != nil {
		Missing(t, "%s not installed; run scripts/setup.sh", p)
	}
	return p
}

// CheckGoroutines registers a cleanup that fails t if goroutines started
// during the test are still running shortly after it ends. Call it first,
// so that it runs after every other cleanup.
func CheckGoroutines(t testing.TB) {
	t.Helper()
	before := goroutineSet()
	t.Cleanup(func() {
		var leaked []string
		deadline := time.Now().Add(5 * time.Second)
		for {
			leaked = leaked[:0]
			for id, stack := range goroutineSet() {
				if _, ok := before[id]; !ok && !benign(stack) {
					leaked = append(leaked, stack)
				}
			}
			if len(leaked) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(leaked) > 0 {
			sort.Strings(leaked)
			t.Errorf("%d goroutine(s) leaked:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
	})
}

func benign(stack string) bool {
	if strings.Contains(stack, "internal/seccomp.forkerLoop") {
		return true // the one forker thread, started at the first filtered start, lives as long as the process
	}
	for _, s := range []string{
		"testing.(*T).Run", "testing.tRunner.func1", "runtime.goexit\n", // test framework
		"os/signal.signal_recv", "os/signal.loop",
		"internal/poll.runtime_pollWait\nnet/http.(*persistConn)", // idle keep-alive pools of http.DefaultTransport
	} {
		if strings.Contains(stack, s) && !strings.Contains(stack, "ipybox") {
			return true
		}
	}
	return strings.Contains(stack, "created by testing.") && !strings.Contains(stack, "ipybox/")
}

func goroutineSet() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		head, _, _ := strings.Cut(g, "\n")
		// "goroutine 12 [running]:" -> "12"
		f := strings.Fields(head)
		if len(f) >= 2 {
			out[f[1]] = g
		}
	}
	return out
}
