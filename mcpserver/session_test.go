package mcpserver

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/testenv"
)

// TestSession drives one session through every tool with the go-sdk
// client, as an agent would: the subtests run in order in one kernel.
func TestSession(t *testing.T) {
	testenv.CheckGoroutines(t)
	// A workspace of its own: the session installs a package into the
	// workspace's virtualenv, which must not be there from an earlier run.
	testenv.NeedsPython(t)
	ws, _ := filepath.EvalSymlinks(t.TempDir())
	everything := testenv.NPMBin(t, "mcp-server-everything")
	srv := newServer(t, &Options{Workspace: ws, KernelEnv: map[string]string{"IPYBOX_TEST_KENV": "from-options"}})
	var progMu sync.Mutex
	var prog []*mcp.ProgressNotificationParams
	cs := connect(t, srv, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			progMu.Lock()
			prog = append(prog, r.Params)
			progMu.Unlock()
		},
	})

	t.Run("state persists", func(t *testing.T) {
		run(t, cs, "x = 41")
		if got := run(t, cs, "print(x + 1)"); got != "42" {
			t.Errorf("got %q", got)
		}
		if got := run(t, cs, "x * 2"); got != "82" {
			t.Errorf("last expression: got %q", got)
		}
	})

	t.Run("kernel env", func(t *testing.T) {
		if got := run(t, cs, "import os; print(os.environ.get('IPYBOX_TEST_KENV'), os.environ.get('HOSTNAME_NOT_SET_X'))"); got != "from-options None" {
			t.Errorf("got %q", got)
		}
	})

	t.Run("image", func(t *testing.T) {
		res := call(t, cs, "execute_ipython_cell", map[string]any{"code": "import matplotlib.pyplot as plt\nprint('plotting')\nplt.plot([1, 3, 2]); plt.show()"})
		if res.IsError {
			t.Fatal(text(res))
		}
		var imgs []*mcp.ImageContent
		for _, c := range res.Content {
			if ic, ok := c.(*mcp.ImageContent); ok {
				imgs = append(imgs, ic)
			}
		}
		if len(imgs) != 1 || imgs[0].MIMEType != "image/png" || !bytes.HasPrefix(imgs[0].Data, []byte("\x89PNG")) {
			t.Fatalf("image blocks = %d, content = %+v", len(imgs), res.Content)
		}
		m := regexp.MustCompile(`\[image saved: (\S+\.png)\]`).FindStringSubmatch(text(res))
		if m == nil || !strings.HasPrefix(text(res), "plotting") {
			t.Fatalf("text = %q", text(res))
		}
		if b, err := os.ReadFile(m[1]); err != nil || !bytes.Equal(b, imgs[0].Data) {
			t.Errorf("saved image %s does not match the block: %v", m[1], err)
		}
		if filepath.Dir(m[1]) != filepath.Join(ws, "images") {
			t.Errorf("image saved in %s, want the workspace's images/", m[1])
		}
	})

	t.Run("truncation keeps head and tail", func(t *testing.T) {
		res := call(t, cs, "execute_ipython_cell", map[string]any{
			"code":             "print('HEAD' + 'x' * 20000 + 'TAIL')",
			"max_output_chars": 1000,
		})
		got := text(res)
		if res.IsError || !strings.HasPrefix(got, "HEADxxx") || !strings.HasSuffix(got, "xxxTAIL") {
			t.Fatalf("result %q", short(got))
		}
		if !strings.Contains(got, "[... 19008 characters omitted") {
			t.Errorf("marker missing or wrong count: %q", got[480:560])
		}
		head, _, _ := strings.Cut(got, "\n\n[...")
		_, tail, _ := strings.Cut(got, "...]\n\n")
		if len(head) != 500 || len(tail) != 500 {
			t.Errorf("kept %d + %d characters, want 500 + 500", len(head), len(tail))
		}
	})

	t.Run("error carries earlier output", func(t *testing.T) {
		res := call(t, cs, "execute_ipython_cell", map[string]any{"code": "print('before the error')\ndef f():\n    return 1 / 0\nf()"})
		got := text(res)
		if !res.IsError {
			t.Fatalf("not an error result: %q", got)
		}
		i, j := strings.Index(got, "before the error"), strings.Index(got, "ZeroDivisionError")
		if i < 0 || j < i || !strings.Contains(got, "return 1 / 0") || strings.Contains(got, "\x1b[") {
			t.Errorf("text = %q", got)
		}
	})

	t.Run("progress during a 3s cell", func(t *testing.T) {
		progMu.Lock()
		prog = nil
		progMu.Unlock()
		params := &mcp.CallToolParams{Name: "execute_ipython_cell", Arguments: map[string]any{
			// A quiet 1.6 s at the end: a notification of the elapsed time.
			"code": "import time\nfor i in range(3):\n    print('step', i, flush=True)\n    time.sleep(1)\ntime.sleep(0.6)",
		}}
		params.SetProgressToken("tok-1")
		res, err := cs.CallTool(t.Context(), params)
		if err != nil || res.IsError {
			t.Fatalf("%v %v", err, res)
		}
		progMu.Lock()
		defer progMu.Unlock()
		if len(prog) < 3 {
			t.Fatalf("%d progress notifications, want at least 3", len(prog))
		}
		last, lines, elapsed := -1.0, "", false
		for _, p := range prog {
			if p.ProgressToken != "tok-1" || p.Progress <= last {
				t.Errorf("notification %+v (after %v)", p, last)
			}
			last = p.Progress
			if p.Meta[streamMetaKey] == "stdout" {
				lines += p.Message
			}
			elapsed = elapsed || strings.Contains(p.Message, "cell running for")
		}
		if lines != "step 0\nstep 1\nstep 2\n" || !elapsed {
			t.Errorf("messages do not show the output and the elapsed time: %+v", prog)
		}
	})

	t.Run("timeout interrupts and keeps state", func(t *testing.T) {
		run(t, cs, "kept = 'still here'")
		t0 := time.Now()
		res := call(t, cs, "execute_ipython_cell", map[string]any{"code": "print('sleeping', flush=True)\nimport time; time.sleep(60)", "timeout": 1})
		if !res.IsError || !strings.Contains(text(res), "timed out after 1s") || !strings.Contains(text(res), "sleeping") || time.Since(t0) > 20*time.Second {
			t.Fatalf("result %q after %v", text(res), time.Since(t0))
		}
		if got := run(t, cs, "print(kept)"); got != "still here" {
			t.Errorf("state after timeout: %q", got)
		}
	})

	t.Run("register then call", func(t *testing.T) {
		res := call(t, cs, "register_mcp_server", map[string]any{
			"server_name":   "everything",
			"server_params": map[string]any{"command": everything, "args": []string{"stdio"}},
		})
		got := text(res)
		if res.IsError {
			t.Fatal(got)
		}
		want := "from mcptools.everything.get_structured_content import Params, run  # run(Params(location: "
		if !strings.Contains(got, want) || !strings.Contains(got, ") -> Result\n") {
			t.Errorf("register result does not have %q:\n%s", want, got)
		}
		for _, line := range strings.Split(got, "\n") {
			if !strings.HasPrefix(line, "from mcptools.everything.") || !strings.Contains(line, " import Params, run  # run(") {
				t.Errorf("line %q is not an import with a signature", line)
			}
		}
		out := run(t, cs, "from mcptools.everything.get_structured_content import Params, run\nr = run(Params(location='Chicago'))\nprint(type(r).__name__, type(r.temperature).__name__, isinstance(r.conditions, str), r.humidity >= 0)")
		if out != "Result float True True" && out != "Result int True True" {
			t.Errorf("typed result: %q", out)
		}
	})

	t.Run("reset clears state, keeps registrations", func(t *testing.T) {
		res := call(t, cs, "reset", map[string]any{})
		if res.IsError {
			t.Fatal(text(res))
		}
		res = call(t, cs, "execute_ipython_cell", map[string]any{"code": "print(x)"})
		if !res.IsError || !strings.Contains(text(res), "NameError") {
			t.Errorf("x survived the reset: %q", text(res))
		}
		out := run(t, cs, "from mcptools.everything.echo import Params, run\nprint(run(Params(message='after reset')))")
		if !strings.Contains(out, "after reset") {
			t.Errorf("tool after reset: %q", out)
		}
	})

	t.Run("install_package from a local wheel", func(t *testing.T) {
		dist := filepath.Join(ws, "dist")
		os.MkdirAll(dist, 0o755)
		whl := buildWheel(t, dist)
		res := call(t, cs, "install_package", map[string]any{"package_name": "dist/" + whl})
		if res.IsError || !strings.Contains(text(res), "Successfully installed ipybox-testpkg-0.1") {
			t.Fatalf("install: %q", text(res))
		}
		if got := run(t, cs, "import ipybox_testpkg, sys\nprint(ipybox_testpkg.VALUE)\nprint(ipybox_testpkg.__file__.startswith(sys.prefix), sys.prefix)"); got != "installed from a local wheel\nTrue "+filepath.Join(ws, ".ipybox", "venv") {
			t.Errorf("import after install: %q", got)
		}
		// The system Python is untouched: the package is in the virtualenv.
		if _, err := os.Stat(filepath.Join(ws, ".ipybox", "venv", "lib")); err != nil {
			t.Error(err)
		}
		// A failing install is an error result with pip's output.
		res = call(t, cs, "install_package", map[string]any{"package_name": "dist/no-such-file.whl"})
		if !res.IsError || !strings.Contains(text(res), "no-such-file.whl") {
			t.Errorf("failed install: %q", text(res))
		}
	})

	t.Run("files", func(t *testing.T) {
		host := t.TempDir()
		data := make([]byte, 256*3)
		for i := range data {
			data[i] = byte(i)
		}
		src := filepath.Join(host, "in.bin")
		os.WriteFile(src, data, 0o600)
		res := call(t, cs, "upload_file", map[string]any{"relpath": "up/nested/in.bin", "local_path": src})
		if res.IsError {
			t.Fatal(text(res))
		}
		out := run(t, cs, "b = open('up/nested/in.bin', 'rb').read()\nprint(len(b), b[:3] == bytes([0, 1, 2]))\nimport os; os.makedirs('down', exist_ok=True)\nopen('down/out.bin', 'wb').write(bytes(reversed(b)))")
		if !strings.HasPrefix(out, "768 True") {
			t.Fatalf("kernel read: %q", out)
		}
		dst := filepath.Join(host, "new", "dir", "out.bin")
		res = call(t, cs, "download_file", map[string]any{"relpath": "down/out.bin", "local_path": dst})
		if res.IsError {
			t.Fatal(text(res))
		}
		got, err := os.ReadFile(dst)
		if err != nil || len(got) != len(data) || got[0] != 255 || got[767] != 0 {
			t.Errorf("downloaded %d bytes: %v", len(got), err)
		}
	})

	t.Run("denied paths", func(t *testing.T) {
		host := t.TempDir()
		os.WriteFile(filepath.Join(host, "ok.txt"), []byte("ok"), 0o600)
		os.Symlink("/etc/passwd", filepath.Join(host, "link-out"))
		os.Symlink("/etc", filepath.Join(ws, "escape-link"))
		defer os.Remove(filepath.Join(ws, "escape-link"))
		os.MkdirAll(filepath.Join(ws, "adir"), 0o755)
		// FIFOs, which kernel code can make, must not hang a call.
		testenv.Mkfifo(filepath.Join(ws, "fifo"))
		defer os.Remove(filepath.Join(ws, "fifo"))
		testenv.Mkfifo(filepath.Join(host, "fifo"))
		for _, tc := range []struct {
			tool, rel, local, want string
		}{
			{"upload_file", "a.txt", "/etc/passwd", "outside the allowed directories"},
			{"upload_file", "a.txt", filepath.Join(host, "link-out"), "really /etc/passwd"},
			{"upload_file", "a.txt", filepath.Join(host, "missing.txt"), "does not exist"},
			{"upload_file", "a.txt", host, "is a directory"},
			{"upload_file", "a.txt", "relative/path.txt", "not absolute"},
			{"upload_file", "../outside.txt", filepath.Join(host, "ok.txt"), `contains ".."`},
			{"upload_file", "/abs.txt", filepath.Join(host, "ok.txt"), "is absolute"},
			{"upload_file", "escape-link/evil", filepath.Join(host, "ok.txt"), "symbolic link"},
			{"upload_file", "adir", filepath.Join(host, "ok.txt"), "is a directory"},
			{"download_file", "escape-link/passwd", filepath.Join(host, "p"), "symbolic link"},
			{"download_file", "missing.txt", filepath.Join(host, "m"), "does not exist"},
			{"download_file", "adir", filepath.Join(host, "d"), "is a directory"},
			{"download_file", "down/out.bin", "/etc/ipybox-test-evil", "outside the allowed directories"},
			{"download_file", "down/out.bin", filepath.Join(host, "link-out"), "outside the allowed directories"},
			{"download_file", "down/out.bin", host, "is a directory"},
			{"download_file", "fifo", filepath.Join(host, "f"), "not a regular file"},
			{"download_file", "down/out.bin", filepath.Join(host, "fifo"), "not a regular file"},
			{"upload_file", "a.txt", filepath.Join(host, "fifo"), "not a regular file"},
			{"upload_file", "fifo", filepath.Join(host, "ok.txt"), "not a regular file"},
			{"upload_file", "a.txt", "/dev/zero", "outside the allowed directories"},
			// Names host programs act on: the agent could have the host
			// write a git hook or a Claude Code setting.
			{"upload_file", ".git/hooks/pre-commit", filepath.Join(host, "ok.txt"), "host programs read and act on"},
			{"upload_file", "sub/.claude/settings.json", filepath.Join(host, "ok.txt"), "host programs read and act on"},
			{"upload_file", ".mcp.json", filepath.Join(host, "ok.txt"), "host programs read and act on"},
			{"download_file", "a.txt", filepath.Join(host, ".git", "hooks", "post-checkout"), "host programs read and act on"},
			{"download_file", "a.txt", filepath.Join(host, ".bashrc"), "host programs read and act on"},
		} {
			res := call(t, cs, tc.tool, map[string]any{"relpath": tc.rel, "local_path": tc.local})
			if !res.IsError || !strings.Contains(text(res), tc.want) {
				t.Errorf("%s(%q, %q): %v %q, want an error with %q", tc.tool, tc.rel, tc.local, res.IsError, text(res), tc.want)
			}
		}
		if b, _ := os.ReadFile("/etc/passwd"); len(b) == 0 {
			t.Error("/etc/passwd is empty?")
		}
		if _, err := os.Stat("/etc/ipybox-test-evil"); err == nil {
			t.Error("a file was written to /etc")
		}
	})
}

// TestKernelStartsAtFirstCell checks that initialize is answered before
// the kernel is up, and that the first call starts it and waits for it.
func TestKernelStartsAtFirstCell(t *testing.T) {
	testenv.NeedsPython(t)
	testenv.CheckGoroutines(t)
	ws := t.TempDir() // a fresh workspace: the virtualenv must be created
	srv := newServer(t, &Options{Workspace: ws})
	t0 := time.Now()
	cs := connect(t, srv, nil)
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("initialize took %v", d)
	}
	if got := run(t, cs, "import sys; print(sys.prefix)"); got != filepath.Join(ws, ".ipybox", "venv") {
		t.Errorf("kernel's prefix %q, want the workspace's virtualenv", got)
	}
	// `!pip install` in a cell installs into the session's own package
	// folder (the shared virtualenv is install_package's).
	whl := buildWheel(t, ws)
	if got := run(t, cs, "!which pip\n!pip install --no-index "+whl); !strings.HasPrefix(got, filepath.Join(ws, ".ipybox", "venv", "bin", "pip")+"\n") || !strings.Contains(got, "Successfully installed ipybox-testpkg") {
		t.Errorf("!pip install: %q", got)
	}
	if got := run(t, cs, "import ipybox_testpkg; print(ipybox_testpkg.__file__)"); !strings.HasPrefix(got, filepath.Join(ws, ".ipybox", "packages")) {
		t.Errorf("installed at %q, want inside the session's package folder", got)
	}
}

// TestDeathBetweenCallsReported: a kernel that dies between calls is
// reported by the next call, which succeeds in a fresh kernel.
func TestDeathBetweenCallsReported(t *testing.T) {
	logs := &testenv.Buffer{}
	srv := newServer(t, &Options{Workspace: sharedWorkspace(t), Logger: slog.New(slog.NewTextHandler(logs, nil))})
	cs := connect(t, srv, nil)
	pid, _ := strconv.Atoi(run(t, cs, "x = 1\nimport os, signal, threading, time\n"+
		"threading.Thread(target=lambda: (time.sleep(0.3), os.kill(os.getpid(), signal.SIGKILL)), daemon=True).start()\n"+
		"print(os.getpid())"))
	// The host has seen the death once the process is reaped and the death
	// is logged.
	testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("kernel %d killing itself, seen by the host", pid), func() bool {
		return testenv.Signal(pid, 0) == syscall.ESRCH && strings.Contains(logs.String(), `msg="kernel died"`)
	})
	out := run(t, cs, "print('x' in globals())")
	if !strings.Contains(out, "the kernel died at ") || !strings.Contains(out, "signal: killed") || !strings.Contains(out, "its state was lost") || !strings.HasSuffix(out, "False") {
		t.Errorf("the call after the death: %q", out)
	}
	if out := run(t, cs, "print(1)"); out != "1" {
		t.Errorf("the call after that: %q", out)
	}
}
