//go:build !linux

package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"

	"github.com/ipybox/ipybox/kernel"
)

// The sandbox is bubblewrap, Linux namespaces and seccomp: elsewhere every
// entry point fails closed.

func platformSupported() error {
	return &ProbeError{Cause: "the sandbox needs Linux (bubblewrap, namespaces, seccomp)",
		Fix: "run ipybox without the sandbox on this system, or on Linux"}
}

func (s *Sandbox) logFeatures() {}

// Probe reports that the sandbox is unavailable on this system.
func (s *Sandbox) Probe(ctx context.Context) error { return platformSupported() }

// Start implements kernel.Launcher; it always fails on this system.
func (s *Sandbox) Start(ctx context.Context, spec *kernel.Spec) (kernel.Process, error) {
	return nil, platformSupported()
}

// Command always fails on this system.
func (s *Sandbox) Command(ctx context.Context, path string, args, env []string, dir string) (*exec.Cmd, error) {
	return nil, platformSupported()
}

// InitMain fails on this system.
func InitMain(args []string) int {
	fmt.Fprintln(os.Stderr, "ipybox sandbox init:", platformSupported())
	return 125
}

// placeholders is a no-op here: nothing is protected without a sandbox.
var placeholders noPlaceholders

type noPlaceholders struct{}

func (noPlaceholders) acquire(string) {}
func (noPlaceholders) release(string) {}

// gitSnapshot exists on Linux only (see gitplant.go): no sandbox runs here.
type gitSnapshot struct{}

func (s *Sandbox) snapshotGit()            {}
func (s *Sandbox) quarantineGit() []string { return nil }

func runsAsRoot() bool                 { return false }
func scanEtc(root string) []secretPath { return nil }
