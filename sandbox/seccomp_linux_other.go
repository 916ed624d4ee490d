//go:build linux && !amd64 && !arm64

package sandbox

// The seccomp filter is implemented for amd64 and arm64 only; elsewhere the
// sandbox reports itself unavailable rather than run without it.
const (
	auditArch = 0
	hasX32    = false
)
