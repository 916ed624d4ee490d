package lifeline

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"
)

// On Windows a child inherits only the handles listed in
// AdditionalInheritedHandles (Go passes an explicit handle list), so the
// write end of the pipe, though created inheritable, reaches no child.

type sysProcess struct {
	mu        sync.Mutex
	job       windows.Handle // kill-on-close job the child runs in
	interrupt windows.Handle // ipykernel's interrupt event
}

func (s *sysProcess) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.job != 0 {
		windows.CloseHandle(s.job) // kills what is left in the job
		s.job = 0
	}
	if s.interrupt != 0 {
		windows.CloseHandle(s.interrupt)
		s.interrupt = 0
	}
}

func (p *Process) start(r *os.File) error {
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return fmt.Errorf("kernel lifeline: job object: %w", err)
	}
	p.sys.job = job
	info := windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION{}
	info.BasicLimitInformation.LimitFlags = windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		p.sys.release()
		return fmt.Errorf("kernel lifeline: job object: %w", err)
	}
	// The interrupt event, inheritable, as jupyter_client makes it:
	// ipykernel waits on JPY_INTERRUPT_EVENT and raises KeyboardInterrupt
	// in the main thread when it is set.
	sa := &windows.SecurityAttributes{InheritHandle: 1}
	sa.Length = uint32(unsafe.Sizeof(*sa))
	ev, err := windows.CreateEvent(sa, 0, 0, nil)
	if err != nil {
		p.sys.release()
		return fmt.Errorf("kernel lifeline: interrupt event: %w", err)
	}
	p.sys.interrupt = ev
	p.cmd.Env = append(p.cmd.Env,
		EnvVar+"="+strconv.FormatUint(uint64(r.Fd()), 10),
		"JPY_INTERRUPT_EVENT="+strconv.FormatUint(uint64(ev), 10))
	p.cmd.SysProcAttr = &syscall.SysProcAttr{
		CreationFlags:              windows.CREATE_NEW_PROCESS_GROUP,
		AdditionalInheritedHandles: []syscall.Handle{syscall.Handle(r.Fd()), syscall.Handle(ev)},
	}
	if err := p.starter(p.cmd); err != nil {
		p.sys.release()
		return fmt.Errorf("start %s: %w", p.cmd.Path, err)
	}
	// The child runs a moment before it is in the job; it is still
	// importing Python then, and starts nothing of its own.
	h, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, uint32(p.cmd.Process.Pid))
	if err == nil {
		err = windows.AssignProcessToJobObject(job, h)
		windows.CloseHandle(h)
	}
	if err != nil {
		p.cmd.Process.Kill()
		p.cmd.Wait() // bound: killed above
		p.sys.release()
		return fmt.Errorf("kernel lifeline: put %s in its job object: %w", p.cmd.Path, err)
	}
	return nil
}

// signal delivers sig: SIGINT sets ipykernel's interrupt event; any other
// signal ends the job (the child and everything it started).
func (p *Process) signal(sig syscall.Signal) error {
	p.sys.mu.Lock()
	defer p.sys.mu.Unlock()
	if sig == syscall.SIGINT {
		if p.sys.interrupt == 0 {
			return os.ErrProcessDone
		}
		return windows.SetEvent(p.sys.interrupt)
	}
	if p.sys.job == 0 {
		return os.ErrProcessDone
	}
	err := windows.TerminateJobObject(p.sys.job, 1)
	if errors.Is(err, windows.ERROR_ACCESS_DENIED) {
		return os.ErrProcessDone
	}
	return err
}
