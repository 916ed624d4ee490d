package seccomp

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_AARCH64
	hasX32    = false
)

// legacyCalls: arm64 has only the *at path system calls.
var legacyCalls []call
