package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInitBinaryPrivateCopy (acc3 attack 18): the init binary that runs
// on the host and is bound into sandboxes is a private copy, made once
// per process, in a 0700 folder, mode 0555, with this process's bytes: not
// the file at os.Executable(), which may lie in a workspace.
func TestInitBinaryPrivateCopy(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var copies []string
	for range 2 {
		s, err := New(nil, &Options{Workspace: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		copies = append(copies, s.initBinary)
		if s.initSource != self {
			t.Errorf("initSource = %s, want %s", s.initSource, self)
		}
		s.Close()
	}
	if copies[0] != copies[1] {
		t.Errorf("two sandboxes of one process made two copies: %s, %s", copies[0], copies[1])
	}
	cp := copies[0]
	if cp == self {
		t.Fatalf("the init binary is os.Executable() itself: %s", cp)
	}
	fi, err := os.Stat(cp)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o555 {
		t.Errorf("copy mode %v, want 0555", fi.Mode().Perm())
	}
	di, err := os.Stat(filepath.Dir(cp))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		t.Errorf("copy's folder mode %v, want 0700", di.Mode().Perm())
	}
	a, _ := os.ReadFile(cp)
	b, _ := os.ReadFile("/proc/self/exe")
	if !bytes.Equal(a, b) {
		t.Errorf("the copy differs from this process's binary")
	}
}

// TestBwrapNotFromWritablePath (acc3 attack 17): a bwrap in a folder that
// kernel code writes (the workspace, a kernel's run directory) and that
// comes first on PATH is passed over; a configured one there is refused
// with a ProbeError that says why. Neither runs.
func TestBwrapNotFromWritablePath(t *testing.T) {
	needSandbox(t)
	ws := t.TempDir()
	mark := filepath.Join(t.TempDir(), "ran")
	bin := filepath.Join(ws, ".venv", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(bin, "bwrap")
	writeFile(t, fake, fmt.Sprintf("#!/bin/sh\ntouch %s\nexit 1\n", mark))
	if err := os.Chmod(fake, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	ctx := context.Background()
	s, err := New(nil, &Options{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Probe(ctx); err != nil {
		t.Fatalf("Probe with a workspace bwrap first on PATH: %v", err)
	}
	if s.bwrap == fake {
		t.Errorf("the sandbox chose the workspace's bwrap %s", fake)
	}
	// Another sandbox of the process (another tenant's) finds none there
	// either: the workspace is recorded as writable for the process.
	other, err := New(nil, &Options{Workspace: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Probe(ctx); err != nil || other.bwrap == fake {
		t.Errorf("another sandbox's Probe = %v with bwrap %s", err, other.bwrap)
	}
	conf, err := New(nil, &Options{Workspace: ws, Bwrap: fake})
	if err != nil {
		t.Fatal(err)
	}
	defer conf.Close()
	var pe *ProbeError
	if err := conf.Probe(ctx); !errors.As(err, &pe) || !strings.Contains(err.Error(), "kernel code can write") {
		t.Errorf("Probe with Options.Bwrap in the workspace = %v, want a ProbeError saying kernel code can write it", err)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Errorf("the workspace's bwrap ran on the host")
	}
}
