package main

import "golang.org/x/sys/unix"

// harden makes this process non-dumpable: its /proc files (environ, mem,
// fds) then belong to root, and processes of the same user, such as
// unsandboxed kernel code, can neither read its environment (a bearer
// token from $IPYBOX_MCP_AUTH_TOKEN, ${VAR} values) nor ptrace it. Kernels
// it starts are dumpable again after their exec.
func harden() error { return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }
