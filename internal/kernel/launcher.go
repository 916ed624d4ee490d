package kernel

import (
	"context"
	"io"
	"os/exec"
	"slices"
	"syscall"

	"github.com/ipybox/ipybox/internal/defaults"
	"github.com/ipybox/ipybox/internal/jupyter"
	"github.com/ipybox/ipybox/internal/lifeline"
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
	// InitCode is Options.InitCode, which the kernel package runs once the
	// process is ready, unless the process is Prepared (it ran it itself).
	InitCode string
}

// Prepared is implemented by a Process that is a copy of a live kernel
// (ipybox's forks and kept cell boundaries) and sets itself up: it ran
// Spec.InitCode itself, so the start does not send it (a round trip, and a
// compile, off a fork's first result), and it may be bound already to a
// connection of its own (Kernel.PrepareSpec), which the start then dials
// instead of the Spec's.
type Prepared interface {
	Process
	// Connection is the connection the process binds; nil means the
	// Spec's.
	Connection() *jupyter.ConnectionInfo
}

// Process is a started kernel process as a Launcher returns it. Each
// method is bounded by its context, and none waits past it; the kernel
// package passes contexts with deadlines (see Options.ShutdownGrace).
type Process interface {
	// ID names the process in logs and errors: a host pid, a container's
	// name, a gateway kernel's id.
	ID() string
	// Signal delivers sig to the kernel. For SIGINT it must reach the Python
	// interpreter, so that a running cell raises KeyboardInterrupt. It
	// returns os.ErrProcessDone once the process is gone.
	Signal(ctx context.Context, sig syscall.Signal) error
	// Kill ends the kernel and everything it started, at once. It may be
	// called any number of times, also after the exit, to end what the
	// kernel left behind.
	Kill(ctx context.Context) error
	// Wait waits for the process to exit, or for ctx to end (it then
	// returns ctx's error, and a later Wait can still see the exit). Any
	// number of callers may wait.
	Wait(ctx context.Context) error
}

// HostProcess is a Process that is a process of this host, with a pid
// that host tools can signal and inspect (Kernel.Pid).
type HostProcess interface {
	Process
	Pid() int
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

// DirectLauncher runs the kernel as a child of this process, with a
// lifeline (see internal/lifeline): the kernel ends when this process
// does, however it ends, on every system. On Unix the kernel leads its own
// process group, so an interrupt and a kill reach what it started too; on
// Windows it runs in a job object, and an interrupt sets ipykernel's
// interrupt event.
type DirectLauncher struct{}

// Start implements Launcher.
func (DirectLauncher) Start(ctx context.Context, spec *Spec) (Process, error) {
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = slices.Clip(spec.Env)
	cmd.Dir = spec.Dir
	cmd.Stdout = spec.Stdout
	cmd.Stderr = spec.Stderr
	// The exit is the kernel's, not its output's end: a process that left
	// the kernel's group with the output pipe must not hold Wait (and the
	// kernel's Close) after the kernel exited.
	cmd.WaitDelay = defaults.ShutdownGrace
	p, err := lifeline.Start(cmd, startFiltered)
	if err != nil {
		return nil, err
	}
	return p, nil
}
