//go:build unix

package lifeline

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

type sysProcess struct{}

func (*sysProcess) release() {}

func (p *Process) start(r *os.File) error {
	// ExtraFiles[0] is fd 3 in the child; Go clears its close-on-exec
	// there, and only there: the write end stays close-on-exec, so no
	// other child of this process holds it.
	p.cmd.ExtraFiles = append(p.cmd.ExtraFiles, r)
	fd := 2 + len(p.cmd.ExtraFiles)
	p.cmd.Env = append(p.cmd.Env, fmt.Sprintf("%s=%d", EnvVar, fd))
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.starter(p.cmd); err != nil {
		return fmt.Errorf("start %s: %w", p.cmd.Path, err)
	}
	return nil
}

// signal delivers sig to the child's process group.
func (p *Process) signal(sig syscall.Signal) error {
	err := syscall.Kill(-p.cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}
