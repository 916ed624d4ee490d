//go:build linux

package kernel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ipybox/ipybox/internal/procexit"
)

// adopted is a kernel process that this process did not start: a fork of a
// live kernel (ipybox's Executor.Fork), made by the kernel itself and
// reparented away from it. It leads its own session and process group. Its
// exit is seen through a pidfd, opened as soon as its pid is known, so that
// a reused pid is never signalled after the exit; signals go to its group.
type adopted struct {
	pid   int
	pidfd int
	done  *procexit.Exit
}

// Adopt returns a Process for pid, a kernel process of this user that
// leads its own process group and that something other than this process
// started. It refuses this process, pid 1, a process of another user and
// one that does not lead its group: the pid comes from kernel code, and is
// not trusted to name a kernel.
func Adopt(pid int) (HostProcess, error) {
	if pid <= 1 || pid == os.Getpid() || pid == os.Getppid() {
		return nil, fmt.Errorf("kernel: adopt pid %d: not a kernel process", pid)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("kernel: adopt pid %d: %w", pid, err)
	}
	if err := checkAdoptable(pid); err != nil {
		unix.Close(fd)
		return nil, err
	}
	a := &adopted{pid: pid, pidfd: fd}
	a.done = procexit.Go(a.wait)
	return a, nil
}

// checkAdoptable checks that pid is this user's and leads its own group.
func checkAdoptable(pid int) error {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid), &st); err != nil {
		return fmt.Errorf("kernel: adopt pid %d: %w", pid, err)
	}
	if int(st.Uid) != os.Getuid() {
		return fmt.Errorf("kernel: adopt pid %d: it belongs to uid %d, not to this user", pid, st.Uid)
	}
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return fmt.Errorf("kernel: adopt pid %d: %w", pid, err)
	}
	// pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
	rest := string(raw[strings.LastIndexByte(string(raw), ')')+1:])
	f := strings.Fields(rest)
	if len(f) < 3 || f[2] != strconv.Itoa(pid) {
		return fmt.Errorf("kernel: adopt pid %d: it does not lead its own process group", pid)
	}
	return nil
}

// wait blocks until the pidfd is readable: the process has exited. Its
// status is its parent's to read, not ours.
func (a *adopted) wait() error {
	defer unix.Close(a.pidfd)
	fds := []unix.PollFd{{Fd: int32(a.pidfd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1) // lifetime: the adopted process's
		if err == nil && fds[0].Revents != 0 {
			return nil
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// ID implements Process: the pid.
func (a *adopted) ID() string { return strconv.Itoa(a.pid) }

// Pid implements HostProcess.
func (a *adopted) Pid() int { return a.pid }

// Signal implements Process: to the process group the kernel leads.
func (a *adopted) Signal(_ context.Context, sig syscall.Signal) error {
	select {
	case <-a.done.Done():
		return os.ErrProcessDone
	default:
	}
	if err := syscall.Kill(-a.pid, sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
	return nil
}

// Kill implements Process.
func (a *adopted) Kill(ctx context.Context) error {
	if err := a.Signal(ctx, syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// Wait implements Process.
func (a *adopted) Wait(ctx context.Context) error { return a.done.Wait(ctx) }
