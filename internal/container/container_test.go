package container

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/docker"
	"github.com/ipybox/ipybox/internal/testenv"
)

func TestCheckBind(t *testing.T) {
	for _, tc := range []struct {
		b    Bind
		want string // "" for valid
	}{
		{Bind{"/data", "data"}, ""},
		{Bind{"/data", "a/b"}, ""},
		{Bind{"/data", "data/"}, ""},
		{Bind{"data", "data"}, "must be absolute"},
		{Bind{"/data", "/abs"}, "must be relative"},
		{Bind{"/data", ""}, "must be relative"},
		{Bind{"/data", ".."}, "stay under /app/"},
		{Bind{"/data", "a/../../x"}, "stay under /app/"},
		{Bind{"/data", "a//b"}, "must be clean"},
		{Bind{"/data", "."}, "must be clean"},
		{Bind{"/data", "a:b"}, "must not contain"},
		{Bind{"/data", "workspace"}, "is the workspace"},
		{Bind{"/data", "workspace/x"}, "is the workspace"},
	} {
		err := CheckBind(tc.b)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.b, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want %q", tc.b, err, tc.want)
		}
	}
}

func TestEnvMapsPaths(t *testing.T) {
	l := &Launcher{cfg: Config{Workspace: "/home/u/proj", Env: []string{"A=1"}}}
	got := l.env([]string{"PATH=/home/u/.pyenv/bin:/usr/bin", "HOME=/home/u", "PYTHONPATH=/run/x/py:/home/u/proj", "X=/home/u/project", "Y=/home/u/proj/sub"})
	want := []string{"A=1", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp",
		"PYTHONPATH=/run/x/py:/app/workspace", "X=/home/u/project", "Y=/app/workspace/sub"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("env:\n got %q\nwant %q", got, want)
	}
}

func TestOrphaned(t *testing.T) {
	host, _ := os.Hostname()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	me := ownerLabel(os.Getpid())
	for _, tc := range []struct {
		owner string
		want  bool
	}{
		{me, false},
		{fmt.Sprintf("%s/%d/%s", host, os.Getpid(), "1"), true}, // pid reused: another start time
		{fmt.Sprintf("%s/%d/x", host, dead), true},
		{fmt.Sprintf("otherhost/%d/x", dead), false}, // not ours to judge
		{"garbage", false},
		{"", false},
	} {
		if got := Orphaned(tc.owner, host); got != tc.want {
			t.Errorf("Orphaned(%q) = %v, want %v", tc.owner, got, tc.want)
		}
	}
}

// hungDaemon serves a unix socket that accepts connections and never
// answers: a Docker daemon that has stopped responding. It returns the
// address for docker.New.
func hungDaemon(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "docker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // read nothing, answer nothing
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "unix://" + sock
}

// hungProcess returns a kernel container's process whose daemon never
// answers, its stop calls bounded by bound. The test calls follow, as
// Start would, once it has set the stage.
func hungProcess(t *testing.T, bound time.Duration) *process {
	t.Helper()
	c, err := docker.New(hungDaemon(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	p := newProcess(c, "0123456789ab", "ipybox-test-hung", bound, slog.New(slog.DiscardHandler))
	return p
}

// TestStopBoundedOnHungDaemon: a kernel container's Signal, Kill and Wait
// (which the kernel's Close makes) return within their bounds when the
// daemon never answers, and the first timeout spares the later calls
// their wait.
func TestStopBoundedOnHungDaemon(t *testing.T) {
	testenv.CheckGoroutines(t)
	const bound = 300 * time.Millisecond
	p := hungProcess(t, bound)
	p.follow(io.Discard, io.Discard)
	waited := make(chan error, 1)
	go func() { waited <- p.Wait(context.Background()) }() // as the kernel does, from the start

	timed := func(what string, max time.Duration, f func() error) error {
		t.Helper()
		t0 := time.Now()
		err := f()
		if d := time.Since(t0); d > max {
			t.Errorf("%s took %v, want at most %v", what, d, max)
		}
		return err
	}
	if err := timed("SIGTERM", bound+time.Second, func() error { return p.Signal(context.Background(), syscall.SIGTERM) }); !errors.Is(err, errDaemonHung) {
		t.Errorf("SIGTERM: %v, want errDaemonHung", err)
	}
	if err := timed("kill", bound+time.Second, func() error { return p.Kill(context.Background()) }); !errors.Is(err, errDaemonHung) {
		t.Errorf("kill: %v, want errDaemonHung", err)
	}
	// Known to hang now: no second wait.
	if err := timed("second kill", 100*time.Millisecond, func() error { return p.Kill(context.Background()) }); err == nil {
		t.Error("second kill: no error")
	}
	select {
	case err := <-waited:
		if !errors.Is(err, errDaemonHung) || !strings.Contains(err.Error(), "next start to reap") {
			t.Errorf("Wait: %v", err)
		}
	case <-time.After(2*bound + 3*time.Second):
		t.Fatal("Wait did not return after the kill on a hung daemon")
	}
}

// TestWaitBoundedAfterKill: once killed, Wait gives up after its bound
// even when the daemon answered the kill (here: nothing at all answers,
// and the kill is never sent).
func TestWaitBoundedAfterKill(t *testing.T) {
	testenv.CheckGoroutines(t)
	const bound = 300 * time.Millisecond
	p := hungProcess(t, bound)
	p.killedOnce.Do(func() { close(p.killed) })
	t0 := time.Now()
	p.follow(io.Discard, io.Discard)
	if err := p.Wait(context.Background()); !errors.Is(err, errDaemonHung) {
		t.Errorf("Wait: %v", err)
	}
	if d := time.Since(t0); d > bound+3*time.Second {
		t.Errorf("Wait took %v after a kill", d)
	}
}

// TestStopCallerContext: a caller's context that ends before the stop
// bound ends that call, with the caller's error, and does not count
// against the daemon: it is not marked unresponsive for it.
func TestStopCallerContext(t *testing.T) {
	testenv.CheckGoroutines(t)
	p := hungProcess(t, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	err := p.Signal(ctx, syscall.SIGTERM)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errDaemonHung) {
		t.Errorf("signal with a 100ms context: %v, want the context's deadline", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("signal took %v, past its caller's 100ms", d)
	}
	if p.isHung() {
		t.Error("the caller's deadline marked the daemon unresponsive")
	}
}
