package kernel

import (
	"context"
	"errors"
	"fmt"
	"github.com/ipybox/ipybox/internal/procattr"
	"io"
	"os"
	"os/exec"
	"syscall"
)

// Spec describes the kernel process a Launcher must start.
//
// Every path in a Spec is a host path. A Launcher that runs the process in a
// different file-system view (the sandbox) must make RunDir and Dir visible
// at the same paths, because the connection file and the ipc sockets are
// addressed by those paths on both sides.
type Spec struct {
	// Path is the interpreter to run (an absolute path).
	Path string
	// Args are the arguments after Path, for example
	// ["-m", "ipykernel_launcher", "-f", "<run dir>/kernel/kernel.json"].
	Args []string
	// Env is the complete environment of the process ("KEY=VALUE").
	// It is constructed by the kernel package; a Launcher must not add the
	// host's environment to it.
	Env []string
	// Dir is the working directory of the process.
	Dir string
	// RunDir is the per-kernel run directory: the runtime and the tool
	// socket, which the host makes, and SocketDir. A confining Launcher
	// shows it read-only.
	RunDir string
	// SocketDir is the directory, inside RunDir, of the kernel's own files:
	// its ipc sockets, its connection file (which ipykernel rewrites at
	// start) and its IPython directory. It is the only part of RunDir that
	// the process may write. Empty means RunDir (all of it writable).
	SocketDir string
	// Stdout and Stderr receive the process's own output (not cell output,
	// which travels over iopub). Nil discards.
	Stdout, Stderr io.Writer
}

// Process is a started kernel process as a Launcher returns it.
type Process interface {
	// Pid is the host pid of the process the Launcher started.
	Pid() int
	// Signal delivers sig to the kernel. For SIGINT it must reach the Python
	// interpreter, so that a running cell raises KeyboardInterrupt.
	Signal(sig syscall.Signal) error
	// Kill ends the kernel and everything it started, at once.
	Kill() error
	// Wait waits for the process to exit. It is called exactly once.
	Wait() error
}

// Launcher starts kernel processes. The zero configuration of the kernel
// package uses DirectLauncher; the sandbox package provides one that wraps
// the process in bwrap.
type Launcher interface {
	Start(ctx context.Context, spec *Spec) (Process, error)
}

// Interpreter is implemented by a Launcher that runs an interpreter of its
// own, one that does not exist on the host (a container image's python3).
// The kernel package then neither discovers nor checks an interpreter on
// the host: Spec.Path is Interpreter(), and the Launcher answers for it.
type Interpreter interface {
	Interpreter() string
}

// DirectLauncher runs the kernel as a child of this process, in its own
// process group, with SIGKILL as its parent-death signal.
type DirectLauncher struct{}

// Start implements Launcher.
func (DirectLauncher) Start(ctx context.Context, spec *Spec) (Process, error) {
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = spec.Env
	cmd.Dir = spec.Dir
	cmd.Stdout = spec.Stdout
	cmd.Stderr = spec.Stderr
	cmd.SysProcAttr = procattr.Group()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", spec.Path, err)
	}
	return &GroupProcess{Cmd: cmd}, nil
}

// GroupProcess is a Process for a command that leads its own process group
// (started with Setpgid). Signals go to the whole group, so that a shell
// command started from a cell is interrupted and killed with the kernel.
type GroupProcess struct {
	Cmd *exec.Cmd
}

// Pid implements Process.
func (p *GroupProcess) Pid() int { return p.Cmd.Process.Pid }

// Signal implements Process.
func (p *GroupProcess) Signal(sig syscall.Signal) error {
	err := syscall.Kill(-p.Cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// Kill implements Process.
func (p *GroupProcess) Kill() error { return p.Signal(syscall.SIGKILL) }

// Wait implements Process.
func (p *GroupProcess) Wait() error { return p.Cmd.Wait() }
