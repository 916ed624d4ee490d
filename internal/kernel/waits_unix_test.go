//go:build unix

package kernel_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/testenv/ci"
)

// lockedBuffer is a bytes.Buffer that a process's stdout and stderr may
// share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestDirectWaitIgnoresHeldOutput: a process that left the kernel's group
// and keeps its output pipe open does not hold the exit's Wait (and with
// it the kernel's exit watcher, which Close waits for) once the kernel
// itself has exited.
func TestDirectWaitIgnoresHeldOutput(t *testing.T) {
	t.Parallel()
	setsid := ci.NeedsTool(t, "setsid")
	out := &lockedBuffer{}
	p, err := kernel.DirectLauncher{}.Start(context.Background(), &kernel.Spec{
		Path: "/bin/sh", Args: []string{"-c", setsid + " sleep 30 & echo $!"},
		Env: []string{"PATH=" + os.Getenv("PATH")}, Dir: t.TempDir(), Stdout: out, Stderr: out,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if pid, err := strconv.Atoi(strings.TrimSpace(out.String())); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p.Wait(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Wait still waits after %v for a pipe the kernel no longer holds", time.Since(start))
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Wait took %v", d)
	}
}

// TestProbeIgnoresHeldOutput: an interpreter killed at the probe's
// deadline whose child keeps the output pipe open (a wrapper script) does
// not hold the probe past the deadline.
func TestProbeIgnoresHeldOutput(t *testing.T) {
	t.Parallel()
	py := filepath.Join(t.TempDir(), "python3")
	if err := os.WriteFile(py, []byte("#!/bin/sh\nsleep 5\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := kernel.CheckPython(ctx, py, "test"); err == nil {
		t.Fatal("CheckPython accepted a script that sleeps")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("CheckPython returned %v after it was called, for a deadline of 300ms", d)
	}
}

// deafLauncher starts kernels as DirectLauncher does, but their Wait does
// not see the exit until release is closed: to the kernel, a process that
// outlives SIGKILL (in uninterruptible sleep), or a Launcher whose Wait
// ignores the kill.
type deafLauncher struct{ release chan struct{} }

func (l deafLauncher) Start(ctx context.Context, spec *kernel.Spec) (kernel.Process, error) {
	p, err := kernel.DirectLauncher{}.Start(ctx, spec)
	if err != nil {
		return nil, err
	}
	return deafProcess{p, l.release}, nil
}

type deafProcess struct {
	kernel.Process
	release chan struct{}
}

func (p deafProcess) Wait(ctx context.Context) error {
	select {
	case <-p.release:
		return p.Process.Wait(ctx)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestCloseGivesUpOnUndeadProcess: Close returns, with an error, when the
// kernel's process does not exit after its kill, within StartTimeout and
// three ShutdownGrace.
func TestCloseGivesUpOnUndeadProcess(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	o := kernel.Options{Launcher: deafLauncher{release}, StartTimeout: 10 * time.Second, ShutdownGrace: 100 * time.Millisecond}
	k := startKernel(t, &o)
	closed := make(chan error, 1)
	start := time.Now()
	go func() { closed <- k.Close() }()
	select {
	case err := <-closed:
		if err == nil {
			t.Error("Close returned no error, with the process's exit unseen")
		}
		t.Logf("Close after %v: %v", time.Since(start), err)
	case <-time.After(30 * time.Second):
		t.Fatal("Close still waits after 30s for a process that does not exit")
	}
}
