package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestAskPythonIgnoresHeldOutput: an interpreter killed at the question's
// deadline whose child keeps stdout open (a wrapper script) does not hold
// the answer, nor pyMu, which every start waits behind, past the deadline.
func TestAskPythonIgnoresHeldOutput(t *testing.T) {
	t.Parallel()
	py := filepath.Join(t.TempDir(), "python3")
	if err := os.WriteFile(py, []byte("#!/bin/sh\nsleep 5\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := &Sandbox{py: map[string]*pyInfo{}}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if info := s.askPython(ctx, py); info.err == nil {
		t.Fatal("askPython has an answer from a script that sleeps")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("askPython returned %v after it was called, for a deadline of 300ms", d)
	}
}
