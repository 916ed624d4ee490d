//go:build !linux

package mcpconn

import (
	"syscall"
	"time"
)

// procAttr returns nil: only Linux gets a process group and a death signal.
func procAttr() *syscall.SysProcAttr { return nil }

// killGroup does nothing outside Linux; the server itself is still stopped.
func killGroup(pgid int, grace time.Duration) {}

// groupOf returns 0: process groups are managed only on Linux.
func groupOf(attr *syscall.SysProcAttr, pid int) int { return 0 }
