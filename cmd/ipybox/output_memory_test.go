//go:build linux

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/testenv"
)

// print400MB prints 400 MiB, 1 KiB lines, in one cell.
const print400MB = "import sys\nchunk = 'x' * 1023 + '\\n'\nfor i in range(400 * 1024):\n    sys.stdout.write(chunk)"

const limitRSS = 300 << 20 // bytes

// TestExecOutputMemory: ipybox exec streams 400 MiB of output, byte-exact,
// with host memory under 300 MB.
func TestExecOutputMemory(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	// The product as users get it: the race detector alone would take
	// gigabytes.
	cmd := exec.Command(testenv.Binary(t), "exec", "--workspace", t.TempDir(), "-c", print400MB)
	var n countWriter
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &n, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The peak of ipybox's own memory, sampled while it runs: the
	// rusage of a waited process counts its children too (the kernel,
	// which buffers what the host has not read yet).
	stop, sampled := make(chan struct{}), make(chan int64)
	go func() {
		var peak int64
		for {
			if v, ok := readHWM(cmd.Process.Pid); ok {
				peak = max(peak, v)
			}
			select {
			case <-stop:
				sampled <- peak
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	err := cmd.Wait()
	close(stop)
	rss := <-sampled
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if n.n != 400<<20 || n.x != 400*1023*1024 {
		t.Errorf("stdout got %d bytes (%d x), want all %d", n.n, n.x, 400<<20)
	}
	if self := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10; self > rss {
		t.Logf("peak RSS with the kernel counted: %d MB", self>>20)
	}
	t.Logf("peak RSS of ipybox exec printing 400 MiB: %d MB", rss>>20)
	if rss > limitRSS {
		t.Errorf("peak RSS %d MB, want under %d MB", rss>>20, limitRSS>>20)
	}
}

type countWriter struct{ n, x int }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n += len(p)
	c.x += bytes.Count(p, []byte("x"))
	return len(p), nil
}

// TestMCPOutputMemory: the MCP server returns head and tail of 400 MiB,
// spills the first 32 MiB of it to a file the result names, says how much
// was dropped, with host memory under 300 MB; a link planted at the spill
// folder is not followed.
func TestMCPOutputMemory(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	ws := t.TempDir()
	cmd := exec.Command(testenv.Binary(t), "mcp", "--workspace", ws, "--no-sandbox")
	cs := goClient(t, &mcp.CommandTransport{Command: cmd}, nil)
	out, isErr := callText(t, cs, "execute_ipython_cell", map[string]any{"code": print400MB, "timeout": 300})
	if isErr {
		t.Fatalf("error result: %.500s", out)
	}
	if len(out) > 20000 {
		t.Errorf("result of %d characters; want the head and tail only", len(out))
	}
	// The file keeps the first 32 MiB (mcpserver's defaultSpillCellBytes),
	// and the result says what was dropped.
	const kept = 32 << 20
	m := regexp.MustCompile(`the output was (\d+) bytes \(stdout and stderr\); its first (\d+) bytes are in (\S+) in the workspace, and the (\d+) bytes after them were dropped`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the result names no spill file: %.500s", out)
	}
	fi, err := os.Stat(filepath.Join(ws, m[3]))
	if err != nil || fi.Size() != kept || m[1] != strconv.Itoa(400<<20) || m[2] != strconv.Itoa(kept) || m[4] != strconv.Itoa(400<<20-kept) {
		t.Errorf("spill file %s: %v %v, want %d bytes; note %q", m[3], fi, err, kept, m[0])
	}
	if !strings.Contains(out, "xxxxxxxx") {
		t.Errorf("no head or tail in the result: %.300s", out)
	}
	rss := vmHWM(t, cmd.Process.Pid)
	t.Logf("peak RSS of ipybox mcp returning 400 MiB: %d MB", rss>>20)
	if rss > limitRSS {
		t.Errorf("peak RSS %d MB, want under %d MB", rss>>20, limitRSS>>20)
	}

	// A link in place of the spill folder.
	outside := t.TempDir()
	os.Rename(filepath.Join(ws, "ipybox-outputs"), filepath.Join(ws, "old-outputs"))
	os.Symlink(outside, filepath.Join(ws, "ipybox-outputs"))
	out, _ = callText(t, cs, "execute_ipython_cell", map[string]any{"code": "print('y' * 300000)"})
	if !strings.Contains(out, "could not be kept in a file") {
		t.Errorf("want the note that the output could not be kept: %.300s", out)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("the spill followed the planted link: %v", ents)
	}
}

// vmHWM returns a process's peak resident set size, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	v, ok := readHWM(pid)
	if !ok {
		t.Fatalf("no VmHWM for pid %d", pid)
	}
	return v
}

// readHWM reads the peak resident memory of a live process.
func readHWM(pid int) (int64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, true
		}
	}
	return 0, false
}
