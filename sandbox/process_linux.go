package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
)

// readLine reads one line (without the newline) from the init's control
// socket; it returns what it has at EOF.
func readLine(r io.Reader) string {
	var b []byte
	one := make([]byte, 1)
	for len(b) < 4096 {
		n, err := r.Read(one)
		if n == 1 {
			if one[0] == '\n' {
				break
			}
			b = append(b, one[0])
		}
		if err != nil {
			break
		}
	}
	return string(b)
}

// process is a sandboxed process: bwrap, and inside, the init (pid 1) and
// the program. Signals travel to the init over the control socket, because
// the program runs in another session and pid namespace; the init sends
// them to the program's process group.
type process struct {
	cmd *exec.Cmd
	mu  sync.Mutex
	ctl *os.File // nil after Wait
}

func (p *process) Pid() int { return p.cmd.Process.Pid }

// Signal delivers sig to the program's process group inside the sandbox.
// SIGKILL kills the whole sandbox (see Kill).
func (p *process) Signal(sig syscall.Signal) error {
	if sig == syscall.SIGKILL {
		return p.Kill()
	}
	if sig <= 0 || sig > 64 {
		return fmt.Errorf("sandbox: cannot forward signal %d", int(sig))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctl == nil {
		return os.ErrProcessDone
	}
	if _, err := p.ctl.Write([]byte{byte(sig)}); err != nil {
		if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			return os.ErrProcessDone
		}
		return fmt.Errorf("sandbox: signal: %w", err)
	}
	return nil
}

// Kill kills bwrap. The init, its child and the sandbox's pid 1, dies with
// it (--die-with-parent), and the kernel then kills every process in the
// sandbox's pid namespace.
func (p *process) Kill() error {
	err := p.cmd.Process.Kill()
	if errors.Is(err, os.ErrProcessDone) {
		return os.ErrProcessDone
	}
	return err
}

func (p *process) Wait() error {
	err := p.cmd.Wait()
	p.mu.Lock()
	if p.ctl != nil {
		p.ctl.Close()
		p.ctl = nil
	}
	p.mu.Unlock()
	return err
}
