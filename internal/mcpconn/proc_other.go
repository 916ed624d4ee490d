//go:build !unix

package mcpconn

import (
	"syscall"
	"time"
)

// procAttr returns nil: process groups are a Unix matter.
func procAttr() *syscall.SysProcAttr { return nil }

// killGroup does nothing here; the server itself is still stopped.
func killGroup(pgid int, grace time.Duration) {}

// groupOf returns 0: there are no process groups here.
func groupOf(attr *syscall.SysProcAttr, pid int) int { return 0 }
