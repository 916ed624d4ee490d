//go:build unix

package testenv

import "syscall"

// Signal sends sig to process pid (syscall.Kill), so that tests that kill
// or probe a kernel compile everywhere.
func Signal(pid int, sig syscall.Signal) error { return syscall.Kill(pid, sig) }

// Mkfifo makes a named pipe at path.
func Mkfifo(path string) error { return syscall.Mkfifo(path, 0o600) }

// Suspend stops process pid (SIGSTOP): it keeps its sockets and answers
// nothing.
func Suspend(pid int) error { return syscall.Kill(pid, syscall.SIGSTOP) }
