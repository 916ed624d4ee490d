package mcpserver

import (
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
)

// TestFactorySandboxHasTheBinds: the kernels' sandbox is the policy with
// every bound host directory writable, and the caller's policy is left as
// it was; the confinement it names changes with the binds, and a gateway
// names none.
func TestFactorySandboxHasTheBinds(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	policy := ipybox.DefaultSandbox()
	before := slices.Clone(policy.Filesystem.AllowWrite)
	plain := newKernelFactory(&Options{Sandbox: policy}, log)
	bound := newKernelFactory(&Options{Sandbox: policy, Binds: []Bind{{HostPath: "/srv/data", RelPath: "data"}}}, log)
	if !slices.Contains(bound.sandbox.Filesystem.AllowWrite, "/srv/data") {
		t.Errorf("the bound folder is not writable in the sandbox: %q", bound.sandbox.Filesystem.AllowWrite)
	}
	if !slices.Equal(policy.Filesystem.AllowWrite, before) || slices.Contains(plain.sandbox.Filesystem.AllowWrite, "/srv/data") {
		t.Errorf("the caller's policy changed: %q", policy.Filesystem.AllowWrite)
	}
	a, b := plain.confinement(), bound.confinement()
	if !strings.HasPrefix(a, "sandbox/") || !strings.HasPrefix(b, "sandbox/") || a == b {
		t.Errorf("confinements without and with a bind: %q, %q; want two sandbox digests", a, b)
	}
	if c := newKernelFactory(&Options{}, log).confinement(); c != "none" || newKernelFactory(&Options{}, log).sandbox != nil {
		t.Errorf("without a sandbox: %q", c)
	}
	if c := newKernelFactory(&Options{Gateway: &ipybox.GatewayConfig{}}, log).confinement(); c != "" {
		t.Errorf("a gateway: %q, want none named", c)
	}
}
