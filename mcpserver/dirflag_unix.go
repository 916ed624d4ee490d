//go:build unix

package mcpserver

import "syscall"

// oDirectory makes an open fail on anything but a directory, so that a
// FIFO that kernel code put in its place cannot block it.
const oDirectory = syscall.O_DIRECTORY
