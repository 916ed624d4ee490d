//go:build !linux && !darwin

package sandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"

	"github.com/ipybox/ipybox/internal/kernel"
)

// The sandbox is bubblewrap on Linux and sandbox-exec on macOS: elsewhere
// (Windows) there is none, and every entry point fails closed.

func platformSupported() error {
	return &ProbeError{Cause: "ipybox has no sandbox on " + runtime.GOOS + " (it sandboxes with bubblewrap on Linux and sandbox-exec on macOS)",
		Fix: "run exec without --sandbox, or ipybox mcp with --no-sandbox, knowing that kernel code then has your rights, or run ipybox on Linux or macOS"}
}

func forwardURL(f Forward) string { return "" }

// listenProxy is never reached: New fails first here.
func (s *Sandbox) listenProxy() (net.Listener, error) { return nil, platformSupported() }

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
