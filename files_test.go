package ipybox_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// transferSuite moves files between the host and the kernel's working
// directory (dir, as the host sees it) over the kernel's channel: binary
// data over several chunks, an exact chunk, an empty file, a kernel that
// changed its directory, and each wrong input with its error.
func transferSuite(t *testing.T, ex *ipybox.Executor, dir string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, size := range []int{9<<20 + 7, 4 << 20, 0} {
		data := make([]byte, size)
		rand.Read(data)
		rel := "data/sub/in.bin"
		n, err := ex.UploadFile(ctx, rel, bytes.NewReader(data))
		if err != nil || n != int64(size) {
			t.Fatalf("upload %d bytes: n=%d err=%v", size, n, err)
		}
		if got, err := os.ReadFile(filepath.Join(dir, rel)); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("upload %d bytes: the kernel's file has %d bytes (%v)", size, len(got), err)
		}
		if _, err := os.Stat(filepath.Join(dir, rel+".ipybox-part")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the part file was left: %v", err)
		}
		var buf bytes.Buffer
		n, err = ex.DownloadFile(ctx, rel, &buf)
		if err != nil || n != int64(size) || !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("download %d bytes: n=%d err=%v equal=%v", size, n, err, bytes.Equal(buf.Bytes(), data))
		}
	}
	// A read that fails halfway leaves the kernel's file as it was.
	if _, err := ex.UploadFile(ctx, "keep.txt", strings.NewReader("old")); err != nil {
		t.Fatal(err)
	}
	failing := io.MultiReader(bytes.NewReader(make([]byte, 5<<20)), iotest.ErrReader(errors.New("disk on fire")))
	if _, err := ex.UploadFile(ctx, "keep.txt", failing); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("a failing read: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "keep.txt")); string(got) != "old" {
		t.Errorf("after a failed upload the file holds %d bytes", len(got))
	}
	if _, err := os.Stat(filepath.Join(dir, "keep.txt.ipybox-part")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed upload left its part file: %v", err)
	}
	// Paths stay relative to where the kernel started.
	run(t, ex, "import os, tempfile\nos.chdir(tempfile.gettempdir())")
	if _, err := ex.UploadFile(ctx, "after-chdir.txt", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "after-chdir.txt")); err != nil {
		t.Errorf("after a chdir, the upload went elsewhere: %v", err)
	}
	for _, tc := range []struct{ rel, want string }{
		{"no/such/file", "no such file"},
		{"data", "directory"},
		{"../escape", `".."`},
		{"/etc/passwd", "absolute"},
		{"", "empty"},
	} {
		_, err := ex.DownloadFile(ctx, tc.rel, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("download %q: err = %v, want %q", tc.rel, err, tc.want)
		}
	}
	if _, err := ex.UploadFile(ctx, "data", strings.NewReader("x")); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("upload onto a directory: %v", err)
	}
	// The kernel's state is untouched by the transfers.
	run(t, ex, "marker = 7")
	if got := run(t, ex, "marker").Text; got != "7" {
		t.Errorf("state: %q", got)
	}
}

// hostileChunks: kernel code that replaces the runtime's get cannot make
// the host take more than the size it announced, nor more than
// the 1 GiB bound, nor accept malformed chunks.
func hostileChunks(t *testing.T, ex *ipybox.Executor) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	patch := func(body string) {
		run(t, ex, "import ipybox_runtime._remote as _r\nfrom IPython.display import publish_display_data as _p\n"+
			"def _get(rel, offset, n, root=None):\n    "+body+"\n_r.get = _get")
	}
	patch("_p({_r.CHUNK_MIME: {'size': 2**40, 'data': ''}})")
	if _, err := ex.DownloadFile(ctx, "x", &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("a 1 TiB announcement: %v", err)
	}
	patch("_p({_r.CHUNK_MIME: {'size': 3, 'data': __import__('base64').b64encode(b'abcdef' * 1000).decode()}})")
	var buf bytes.Buffer
	if n, err := ex.DownloadFile(ctx, "x", &buf); err != nil || n != 3 || buf.String() != "abc" {
		t.Errorf("more bytes than announced: n=%d err=%v %q", n, err, buf.String())
	}
	patch("_p({_r.CHUNK_MIME: {'size': 3, 'data': '!!not base64'}})")
	if _, err := ex.DownloadFile(ctx, "x", &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Errorf("malformed chunk: %v", err)
	}
	patch("pass")
	if _, err := ex.DownloadFile(ctx, "x", &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "no chunk") {
		t.Errorf("no chunk: %v", err)
	}
}

func TestTransferLocal(t *testing.T) {
	t.Parallel()
	ex := start(t, nil)
	transferSuite(t, ex, ex.Workspace())
	hostileChunks(t, ex)
}

// TestGatewayTransferAndModules: a gateway kernel whose disk is not the
// host's workspace gets files over its channel and imports the generated
// tool modules from the host's tool server, after a reset too; the module
// endpoint serves nothing but mcptools, and follows no link.
func TestGatewayTransferAndModules(t *testing.T) {
	t.Parallel()
	j := testenv.JupyterServer(t, nil)
	ex := start(t, &ipybox.Options{Gateway: &ipybox.GatewayConfig{URL: j.URL, Token: j.Token}})
	transferSuite(t, ex, j.Dir)

	register(t, ex, "go", testmcpStdio(t))
	check := "import mcptools.go.tool_1 as m\nprint(m.__spec__.origin, m.Params.__name__)"
	if got := run(t, ex, check).Text; got != "ipybox-tool-server Params" {
		t.Errorf("import: %q", got)
	}
	if _, err := os.Stat(filepath.Join(j.Dir, "mcptools")); err == nil {
		t.Error("mcptools was written to the gateway's directory")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ex.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if got := run(t, ex, check).Text; got != "ipybox-tool-server Params" {
		t.Errorf("import after Reset: %q", got)
	}
	// Registered after the kernel started: the next import sees it.
	register(t, ex, "go2", testmcpStdio(t))
	if got := run(t, ex, "from mcptools.go2.tool_1 import Params\nprint(Params.__name__)").Text; got != "Params" {
		t.Errorf("a later registration: %q", got)
	}

	// A link planted in the workspace's mcptools, and names that are not
	// generated modules, are not served.
	secret := filepath.Join(t.TempDir(), "secret.py")
	os.WriteFile(secret, []byte("SECRET = 'hunter2'\n"), 0o600)
	if err := os.Symlink(secret, filepath.Join(ex.Workspace(), "mcptools", "evil.py")); err != nil {
		t.Fatal(err)
	}
	_, err := ex.Execute(ctx, "import mcptools.evil", nil)
	var pe *ipybox.PythonError
	if !errors.As(err, &pe) || strings.Contains(pe.Error(), "hunter2") {
		t.Errorf("a planted link: %v", err)
	}
	for _, name := range []string{"mcptools.evil", "mcptools.go/../../x", "mcptools.go.__init__", ".ipybox.servers", "os", "mcptools.go.tool_1.x.y"} {
		res := run(t, ex, "import ipybox_runtime\ntry:\n    print(ipybox_runtime._post('/v1/modules/get', {'name': "+pyQuote(name)+"}))\nexcept Exception as e:\n    print(type(e).__name__, getattr(e, 'status', None))")
		if strings.Contains(res.Text, "hunter2") || !strings.Contains(res.Text, "404") {
			t.Errorf("module %q: %q", name, res.Text)
		}
	}
}

func pyQuote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}
