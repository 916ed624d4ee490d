//go:build unix

package ipybox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// getModule asks the tool server at base for a module, as kernel code can,
// and returns the status and the answer (at most 1 MiB of it).
func getModule(t *testing.T, base, token, name string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body, _ := json.Marshal(map[string]string{"name": name})
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/modules/get", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(answer)
}

// TestGatewayAttackModules attacks POST /v1/modules/get as a kernel on the
// same host can, which can write the front end's workspace: a FIFO, a huge
// (sparse) file, a directory, a linked package folder, the mcptools folder
// itself replaced by a link, and names that are not modules. Each is
// refused promptly, with nothing from outside mcptools in the answer, and
// the executor still closes in time.
func TestGatewayAttackModules(t *testing.T) {
	t.Parallel()
	j := testenv.JupyterServer(t, nil)
	ex := start(t, &ipybox.Options{Gateway: &ipybox.GatewayConfig{URL: j.URL, Token: j.Token}})
	register(t, ex, "go", testmcpStdio(t))
	base := run(t, ex, "import os\nprint(os.environ['IPYBOX_TOOL_URL'])").Text
	token := run(t, ex, "print(os.environ['IPYBOX_TOOL_TOKEN'])").Text
	mcptools := filepath.Join(ex.Workspace(), "mcptools")

	if code, _ := getModule(t, base, token, "mcptools.go.tool_1"); code != 200 {
		t.Fatalf("a generated module: %d", code)
	}
	if code, _ := getModule(t, base, "", "mcptools.go.tool_1"); code != 401 {
		t.Errorf("without the token: %d", code)
	}

	secretDir := t.TempDir()
	os.WriteFile(filepath.Join(secretDir, "__init__.py"), []byte("SECRET = 'hunter2'\n"), 0o600)
	os.WriteFile(filepath.Join(secretDir, "x.py"), []byte("SECRET = 'hunter2'\n"), 0o600)

	// A FIFO: opening it for reading blocks until a writer comes.
	if err := syscall.Mkfifo(filepath.Join(mcptools, "fifo.py"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A sparse file far larger than any generated module.
	big, err := os.Create(filepath.Join(mcptools, "big.py"))
	if err != nil {
		t.Fatal(err)
	}
	big.Truncate(64 << 20)
	big.Close()
	os.Mkdir(filepath.Join(mcptools, "dir.py"), 0o700)
	// A package folder that is a link to a folder outside.
	os.Symlink(secretDir, filepath.Join(mcptools, "linked"))

	for _, name := range []string{
		"mcptools.fifo", "mcptools.big", "mcptools.dir",
		"mcptools.linked", "mcptools.linked.x",
		"mcptools.go.tool_1\x00", "mcptools..go", "mcptools.go.", "mcptools.go.tool_1 ",
		"mcptools.go.tool_1/../tool_1", "mcptools.go." + strings.Repeat("a", 5000),
	} {
		begin := time.Now()
		code, answer := getModule(t, base, token, name)
		// 404 for a name or a link; a FIFO, a directory or a file past
		// the limit is a 500 that names no content.
		if code < 400 || strings.Contains(answer, "hunter2") {
			t.Errorf("module %q: %d %.200q", name, code, answer)
		}
		if d := time.Since(begin); d > 5*time.Second {
			t.Errorf("module %q took %v", name, d)
		}
	}

	// The mcptools folder itself swapped for a link to a folder outside.
	if err := os.Rename(mcptools, mcptools+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secretDir, mcptools); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"mcptools", "mcptools.x"} {
		if code, answer := getModule(t, base, token, name); code != 404 || strings.Contains(answer, "hunter2") {
			t.Errorf("mcptools swapped for a link, module %q: %d %.200q", name, code, answer)
		}
	}
	os.Remove(mcptools)
	os.Rename(mcptools+".away", mcptools)

	done := make(chan error, 1)
	go func() { done <- ex.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close hangs after the attacks")
	}
}

// TestGatewayAttackDownload: kernel code that replaces the runtime's get
// cannot make DownloadFile loop without end (empty chunks), nor accept
// nonsense sizes, nor hold it past its context (a get that never answers);
// the kernel stays usable afterwards.
func TestGatewayAttackDownload(t *testing.T) {
	t.Parallel()
	j := testenv.JupyterServer(t, nil)
	ex := start(t, &ipybox.Options{Gateway: &ipybox.GatewayConfig{URL: j.URL, Token: j.Token}})
	patch := func(body string) {
		run(t, ex, "import ipybox_runtime._remote as _r\nfrom IPython.display import publish_display_data as _p\nimport base64 as _b\n"+
			"def _get(rel, offset, n, root=None):\n    "+body+"\n_r.get = _get")
	}
	for _, tc := range []struct{ name, body string }{
		{"empty chunks", "_p({_r.CHUNK_MIME: {'size': 10, 'data': ''}})"},
		{"negative size", "_p({_r.CHUNK_MIME: {'size': -1, 'data': 'YWJj'}})"},
		{"fractional size", "_p({_r.CHUNK_MIME: {'size': 2.5, 'data': 'YWJj'}})"},
		{"string size", "_p({_r.CHUNK_MIME: {'size': '3', 'data': 'YWJj'}})"},
		{"null data", "_p({_r.CHUNK_MIME: {'size': 3, 'data': None}})"},
		{"a list", "_p({_r.CHUNK_MIME: [1, 2, 3]})"},
		{"a byte per cell", "_p({_r.CHUNK_MIME: {'size': 1 << 30, 'data': 'YQ=='}})"},
		{"size then shrinks", "_p({_r.CHUNK_MIME: {'size': 10 if offset == 0 else 0, 'data': 'YWJj' if offset == 0 else ''}})"},
	} {
		patch(tc.body)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		begin := time.Now()
		var buf bytes.Buffer
		n, err := ex.DownloadFile(ctx, "x", &buf)
		cancel()
		if err == nil {
			t.Errorf("%s: no error, %d bytes %q", tc.name, n, buf.String())
		}
		if d := time.Since(begin); d > 20*time.Second {
			t.Errorf("%s: took %v (%v)", tc.name, d, err)
		}
	}

	// A get that never answers: the caller's context bounds it, and the
	// kernel is usable afterwards.
	patch("import time; time.sleep(3600)")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	begin := time.Now()
	_, err := ex.DownloadFile(ctx, "x", &bytes.Buffer{})
	cancel()
	if err == nil || time.Since(begin) > 20*time.Second {
		t.Errorf("a get that never answers: %v after %v", err, time.Since(begin))
	}
	if got := run(t, ex, "print(1 + 1)").Text; got != "2" {
		t.Errorf("after a stalled download: %q", got)
	}

	// An upload whose kernel side never reads: bounded by the context too.
	run(t, ex, "import ipybox_runtime._remote as _r\nimport time\nfor _n in dir(_r):\n    if callable(getattr(_r, _n)) and not _n.startswith('__'):\n        setattr(_r, _n, lambda *a, **k: time.sleep(3600))")
	ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
	begin = time.Now()
	_, err = ex.UploadFile(ctx, "y", strings.NewReader(strings.Repeat("x", 10<<20)))
	cancel()
	if err == nil || time.Since(begin) > 20*time.Second {
		t.Errorf("an upload that is never read: %v after %v", err, time.Since(begin))
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Logf("upload: %v", err)
	}
}

// peakHeap runs f and returns the largest heap it saw in use while f ran
// (sampled every 10 ms).
func peakHeap(f func()) uint64 {
	runtime.GC()
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	f()
	close(stop)
	<-done
	return peak.Load()
}

// TestGatewayAttackTransferFlood: kernel code that replaces the runtime's
// get and recv so that the transfer's silent cell prints and displays
// hundreds of MiB cannot make the host hold them: a transfer keeps what
// it needs, not every output of its cell, and saves none of its images.
// Each case measures the heap of a test process of its own (testenv.Alone),
// with a gateway and a kernel of its own, while the other tests run.
func TestGatewayAttackTransferFlood(t *testing.T) {
	t.Parallel()
	// The flood first leaves a file, so that the test knows it ran. (The
	// cases once shared a kernel: the download's flood ended the gateway's
	// connection, the kernel was replaced, and the upload ran the real
	// recv, flooding nothing, and passed.)
	const flood = "import sys\n    open('flood-ran', 'w').close()\n    _s = 'x' * (1 << 20)\n    for _i in range(384):\n        sys.stdout.write(_s); sys.stdout.flush()\n" +
		"    for _i in range(96):\n        _p({'text/plain': _s * 4})\n" +
		"    for _i in range(16):\n        _p({'image/png': __import__('base64').b64encode(b'\\x89PNG' * (1 << 20)).decode()})\n"
	const setup = "import ipybox_runtime._remote as _r\nfrom IPython.display import publish_display_data as _p\n" +
		"def _get(rel, offset, n, root=None):\n    " + flood + "    _p({_r.CHUNK_MIME: {'size': 3, 'data': 'YWJj'}})\n_r.get = _get\n" +
		"def _recv(rel, root=None):\n    " + flood + "_r.recv = _recv"
	// The flood is about 770 MiB; kept, it took 1.7 GiB of heap. Bounded,
	// the peak is the messages in flight and garbage not yet collected
	// (about 140 MiB).
	const bound = 400 << 20
	for _, tc := range []struct {
		name string
		f    func(ctx context.Context, ex *ipybox.Executor) error
	}{
		{"download", func(ctx context.Context, ex *ipybox.Executor) error {
			_, err := ex.DownloadFile(ctx, "x", io.Discard)
			return err
		}},
		{"upload", func(ctx context.Context, ex *ipybox.Executor) error {
			_, err := ex.UploadFile(ctx, "x", strings.NewReader("abc"))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testenv.Alone(t) {
				return
			}
			j := testenv.JupyterServer(t, nil)
			ex := start(t, &ipybox.Options{Gateway: &ipybox.GatewayConfig{URL: j.URL, Token: j.Token}})
			run(t, ex, setup)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			var err error
			begin := time.Now()
			peak := peakHeap(func() { err = tc.f(ctx, ex) })
			cancel()
			t.Logf("peak heap %d MiB after %v, err %v", peak>>20, time.Since(begin).Round(time.Second), err)
			if peak > bound {
				t.Errorf("the host's heap reached %d MiB while the kernel flooded (bound %d MiB)", peak>>20, bound>>20)
			}
			if ents, _ := os.ReadDir(filepath.Join(ex.Workspace(), "images")); len(ents) > 0 {
				t.Errorf("the kernel's images were saved on the host: %d files", len(ents))
			}
			if got := run(t, ex, "import os\nos.path.exists('flood-ran')").Text; got != "True" {
				t.Errorf("the kernel's flood did not run (%s): the case tested nothing", got)
			}
		})
	}
}
