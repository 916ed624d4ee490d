//go:build linux && !amd64 && !arm64

package seccomp

// The filter is implemented for amd64 and arm64 only; elsewhere Program
// fails, and the sandbox reports itself unavailable rather than run
// without it.
const (
	auditArch = 0
	hasX32    = false
)

var legacyCalls []call
