package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// silentTTY is a terminal nobody types on: a read waits, up to its
// deadline.
type silentTTY struct {
	*os.File // the read end of a pipe
	w        *os.File
	out      bytes.Buffer
}

func (s *silentTTY) Write(p []byte) (int, error) { return s.out.Write(p) }
func (s *silentTTY) Close() error                { s.w.Close(); return s.File.Close() }

// TestPromptEndsAtDeadline: the terminal prompt stops waiting for a person
// at the request's deadline, as the request does; the cell's events go on.
func TestPromptEndsAtDeadline(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.SetReadDeadline(time.Time{}); err != nil {
		testenv.Missing(t, "a pipe here takes no deadline: %v", err)
	}
	tty := &silentTTY{File: r, w: w}
	t.Cleanup(func() { tty.Close() })
	d := newDecider(approvalPrompt)
	d.openTTY = func() (io.ReadWriteCloser, error) { return tty, nil }
	req := &ipybox.ApprovalRequest{Kind: "shell", Command: "ls", Deadline: time.Now().Add(200 * time.Millisecond)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.decide(req)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		w.Close() // the read ends at EOF: the goroutine is not left behind
		<-done
		t.Fatal("the prompt still waits 10s after the request's deadline of 200ms")
	}
}

// TestDoctorModulesIgnoreHeldOutput: an interpreter killed at the
// deadline whose child keeps stdout open (a wrapper script) does not hold
// the doctor past the deadline.
func TestDoctorModulesIgnoreHeldOutput(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("the fake interpreter is a shell script")
	}
	py := filepath.Join(t.TempDir(), "python3")
	if err := os.WriteFile(py, []byte("#!/bin/sh\nsleep 5\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	pythonModules(ctx, py, "json")
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("pythonModules returned %v after it was called, for a deadline of 300ms", d)
	}
}
