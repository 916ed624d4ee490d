package sandbox

import (
	"fmt"

	"github.com/ipybox/ipybox/internal/hostpaths"
	"github.com/ipybox/ipybox/internal/seccomp"
)

func protections() []string {
	var out []string
	if seccomp.Supported() {
		out = append(out, "no setuid or setgid file: the seccomp filter refuses the mode bits, for sandboxed, container, fork-server and unsandboxed kernels alike")
	} else {
		out = append(out, "MISSING: no seccomp filter for this CPU architecture (the sandbox does not run)")
	}
	if err := seccomp.GuardSupported(); err == nil {
		out = append(out, fmt.Sprintf("workspace guard: %d kinds of host-read paths (git, hooks, agents' and editors' settings, shell rc files...) refused at any depth", len(hostpaths.Entries)))
	} else {
		out = append(out, "MISSING: workspace guard: "+err.Error())
	}
	out = append(out, "host paths mounted nosuid,nodev inside; /proc, /sys knobs read-only; no network but the egress proxy")
	out = append(out, "secrets masked: .env, .env.*, files that server configs name, the OAuth token folder, unreadable /etc files")
	if abi := landlockABI(); abi > 0 {
		out = append(out, fmt.Sprintf("Landlock ABI %d available (settings key landlock)", abi))
	} else {
		out = append(out, "no Landlock on this kernel (optional)")
	}
	return out
}
