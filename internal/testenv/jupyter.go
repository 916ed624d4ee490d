package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/procattr"
)

// JupyterServerOptions configures JupyterServer.
type JupyterServerOptions struct {
	// Legacy forces the legacy websocket protocol
	// (ServerApp.kernel_ws_protocol=""): the server does not pick the v1
	// subprotocol when a client offers it.
	Legacy bool
}

// Jupyter is a Jupyter Server a test started.
type Jupyter struct {
	URL   string // http://127.0.0.1:PORT
	Token string
	Dir   string // the server's root directory
	Log   *Buffer
	cmd   *exec.Cmd
	once  sync.Once
}

// Stop kills the server (its process group) and waits for it.
func (j *Jupyter) Stop() {
	j.once.Do(func() {
		procattr.SignalGroup(j.cmd.Process.Pid, syscall.SIGKILL)
		j.cmd.Wait()
	})
}

// JupyterServer starts Debian's Jupyter Server (python3-jupyter-server) on
// 127.0.0.1, a free port and a random token, with the interpreter the
// kernel discovery finds, and stops it when t ends. It skips locally and
// fails in CI when it is missing.
func JupyterServer(t testing.TB, opts *JupyterServerOptions) *Jupyter {
	t.Helper()
	py := NeedsPython(t)
	if err := exec.Command(py, "-c", "import jupyter_server").Run(); err != nil {
		Missing(t, "%s cannot import jupyter_server (%v); run scripts/setup.sh", py, err)
	}
	var o JupyterServerOptions
	if opts != nil {
		o = *opts
	}
	var tb [16]byte
	rand.Read(tb[:])
	j := &Jupyter{Token: hex.EncodeToString(tb[:]), Dir: t.TempDir(), Log: &Buffer{}}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	j.URL = "http://127.0.0.1:" + strconv.Itoa(port)
	state := t.TempDir()
	// The kernels' sockets live in the runtime folder, named after the
	// connection file: a short path keeps them under the 107 bytes of a
	// socket address whatever the test's name.
	runtime, err := os.MkdirTemp("", "jr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(runtime) })
	args := []string{"-m", "jupyter_server",
		"--ServerApp.ip=127.0.0.1",
		"--ServerApp.port=" + strconv.Itoa(port),
		"--ServerApp.port_retries=0",
		"--ServerApp.token=" + j.Token,
		"--ServerApp.root_dir=" + j.Dir,
		"--ServerApp.open_browser=False",
		"--ServerApp.allow_root=True",
		// The tests print megabytes; the default limit drops output.
		// Jupyter Server 1.x (Debian's) reads ServerApp's settings; 2.x
		// (PyPI's) reads ZMQChannelsWebsocketConnection's and ignores
		// ServerApp's, deprecated, when it sets up its websockets, so
		// both are given (each version ignores the class it lacks).
		"--ServerApp.iopub_data_rate_limit=0",
		"--ServerApp.iopub_msg_rate_limit=0",
		"--ZMQChannelsWebsocketConnection.iopub_data_rate_limit=0",
		"--ZMQChannelsWebsocketConnection.iopub_msg_rate_limit=0",
		// The server's kernels talk to it over Unix sockets, not TCP
		// ports. Over TCP, jupyter_client picks a free port, closes it
		// and has the kernel bind it; under go test's parallel packages
		// another process took it in between, and the kernel died with
		// "Address already in use" while the server waited 60 s for it
		// (TestGatewayKernel in CI). ipybox talks to the server only
		// through its REST and websocket API, so what the tests cover is
		// unchanged.
		"--KernelManager.transport=ipc",
	}
	if o.Legacy {
		args = append(args, "--ServerApp.kernel_ws_protocol=", "--ZMQChannelsWebsocketConnection.kernel_ws_protocol=")
	}
	j.cmd = exec.Command(py, args...)
	j.cmd.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + state,
		"LANG=C.UTF-8",
		"JUPYTER_CONFIG_DIR=" + filepath.Join(state, "config"),
		"JUPYTER_DATA_DIR=" + filepath.Join(state, "data"),
		"JUPYTER_RUNTIME_DIR=" + runtime,
		"IPYTHONDIR=" + filepath.Join(state, "ipython"),
	}
	j.run(t, "jupyter server", "/api/status")
	return j
}

// run starts j.cmd (its Env set) in j.Dir, stops it when t ends, and
// waits until GET ready (a path) answers 200.
func (j *Jupyter) run(t testing.TB, what, ready string) {
	t.Helper()
	j.cmd.Dir = j.Dir
	j.cmd.Stdout, j.cmd.Stderr = j.Log, j.Log
	j.cmd.SysProcAttr = procattr.Group() // its kernels die with it
	if err := j.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", what, err)
	}
	t.Cleanup(func() {
		j.Stop()
		if t.Failed() {
			t.Logf("the %s's log:\n%s", what, j.Log)
		}
	})
	exited := make(chan struct{})
	go func() {
		// Wait is Stop's; watch the process through its pid instead.
		for Alive(j.cmd.Process.Pid) {
			time.Sleep(50 * time.Millisecond)
		}
		close(exited)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", j.URL+ready, nil)
		req.Header.Set("Authorization", "token "+j.Token)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		select {
		case <-exited:
			t.Fatalf("%s exited before it was ready:\n%s", what, j.Log)
		case <-ctx.Done():
			t.Fatalf("%s not ready within 60s:\n%s", what, j.Log)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
