package ipybox_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/docker"
	"github.com/ipybox/ipybox/internal/testenv"
)

// freezingDaemon is a unix-socket HTTP proxy in front of the real Docker
// daemon that can be frozen: from then on it answers nothing, neither new
// requests nor the rest of those in flight (a wait, a log stream). That
// is a daemon that has stopped responding, which is the fault under test.
type freezingDaemon struct {
	addr   string
	frozen chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	ids    []string // containers started through it
}

func newFreezingDaemon(t *testing.T) *freezingDaemon {
	t.Helper()
	real := os.Getenv("DOCKER_HOST")
	if real == "" {
		real = docker.DefaultHost
	}
	network, address, _ := strings.Cut(real, "://")
	if network != "unix" && network != "tcp" {
		testenv.Missing(t, "DOCKER_HOST %s: the test proxies unix:// and tcp:// only", real)
	}
	sock := filepath.Join(t.TempDir(), "docker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f := &freezingDaemon{addr: "unix://" + sock, frozen: make(chan struct{}), done: make(chan struct{})}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, address)
	}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "docker"
		},
		Transport:     tr,
		FlushInterval: -1,
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.isFrozen() {
			<-f.done // never answer
			return
		}
		if id, ok := strings.CutSuffix(r.URL.Path, "/start"); ok {
			f.mu.Lock()
			f.ids = append(f.ids, id[strings.LastIndexByte(id, '/')+1:])
			f.mu.Unlock()
		}
		rp.ServeHTTP(&freezingWriter{ResponseWriter: w, f: f}, r)
	})}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		close(f.done)
		srv.Close()
		<-served
		tr.CloseIdleConnections()
		// What the frozen daemon left running.
		c, err := docker.New(real)
		if err != nil {
			return
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, id := range f.ids {
			c.Remove(ctx, id, true)
		}
	})
	return f
}

func (f *freezingDaemon) freeze() { close(f.frozen) }

func (f *freezingDaemon) isFrozen() bool {
	select {
	case <-f.frozen:
		return true
	default:
		return false
	}
}

// freezingWriter stops a response in flight once the daemon is frozen.
type freezingWriter struct {
	http.ResponseWriter
	f *freezingDaemon
}

func (w *freezingWriter) Write(p []byte) (int, error) {
	if w.f.isFrozen() {
		<-w.f.done
		return 0, http.ErrAbortHandler
	}
	return w.ResponseWriter.Write(p)
}

func (w *freezingWriter) Flush() {
	if !w.f.isFrozen() {
		http.NewResponseController(w.ResponseWriter).Flush()
	}
}

// TestContainerCloseHungDaemon: Executor.Close with the container backend
// returns within its bound when the Docker daemon stops answering in the
// middle of a session (the container is then left for the next start to
// reap), and leaves no goroutine behind.
func TestContainerCloseHungDaemon(t *testing.T) {
	testenv.CheckGoroutines(t)
	testenv.NeedsDocker(t)
	d := newFreezingDaemon(t)
	t.Setenv("DOCKER_HOST", d.addr)
	ex := startContainer(t, nil, nil)
	if res, err := ex.Execute(context.Background(), "print(6 * 7)", nil); err != nil || res.Text != "42" {
		t.Fatalf("cell: %v %+v", err, res)
	}
	d.freeze()
	closed := make(chan error, 1)
	t0 := time.Now()
	go func() { closed <- ex.Close() }()
	select {
	case <-closed:
	case <-time.After(60 * time.Second):
		t.Fatal("Executor.Close hangs on a Docker daemon that does not answer")
	}
	// One stop call's bound (container.DefaultStopTimeout), and the
	// kernel's own shutdown steps.
	el := time.Since(t0)
	t.Logf("Close took %v", el)
	if el > 15*time.Second {
		t.Errorf("Executor.Close took %v on a hung daemon", el)
	}
}
