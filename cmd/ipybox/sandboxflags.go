package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/sandbox"
)

// sandboxFlags are the sandbox flags of exec and mcp. exec runs unsandboxed
// unless asked; mcp runs sandboxed by default (onByDefault), with
// --no-sandbox as the way out.
type sandboxFlags struct {
	onByDefault bool

	on, off bool
	config  string
	domains stringList
	memory  string
	pids    int
}

func (f *sandboxFlags) register(fs *flag.FlagSet, onByDefault bool) {
	f.onByDefault = onByDefault
	if onByDefault {
		fs.BoolVar(&f.on, "sandbox", false, "run kernels in the bubblewrap sandbox with sandbox-runtime's strict semantics (no network unless --allowed-domain); fails if the sandbox cannot run")
		fs.BoolVar(&f.off, "no-sandbox", false, "run kernels without the sandbox (by default they run in it, with public network through the egress proxy, when the host supports it): kernel code then has your rights, and approvals are advice, not a boundary")
	} else {
		fs.BoolVar(&f.on, "sandbox", false, "run the kernel in a bubblewrap sandbox (Linux): minimal read-only root, writable workspace, no network; fails if the sandbox cannot run")
	}
	fs.StringVar(&f.config, "sandbox-config", "", "sandbox settings `FILE` in sandbox-runtime's JSON format (implies --sandbox)")
	fs.Var(&f.domains, "allowed-domain", "let the kernel reach `DOMAIN` through the egress proxy: a name, *.suffix, an IP address or a CIDR range (repeatable; implies --sandbox, or with --container-* gives the container no other network)")
	fs.StringVar(&f.memory, "memory", "", fmt.Sprintf("most memory each sandboxed process may map for data, as `SIZE` (512m, 4g, or unlimited; default %s)", sandbox.FormatSize(sandbox.DefaultMemory)))
	fs.IntVar(&f.pids, "pids", 0, fmt.Sprintf("most processes and threads the sandboxed kernel may run, `N` (-1: unlimited; default %d)", sandbox.DefaultPids))
}

// explicit reports whether a sandbox flag asked for the sandbox.
func (f *sandboxFlags) explicit() bool {
	return f.on || f.config != "" || len(f.domains) > 0
}

// explicitFlag names the flag that asked for the sandbox, for an error
// that says why it may not fall back to none: the plugin, for one, asks
// for it with --allowed-domain alone, and a "--sandbox:" error would name
// a flag its user never passed.
func (f *sandboxFlags) explicitFlag() string {
	switch {
	case f.on:
		return "--sandbox"
	case f.config != "":
		return "--sandbox-config"
	case len(f.domains) > 0:
		return "--allowed-domain (which implies --sandbox)"
	}
	return "--sandbox"
}

// policy returns the sandbox policy the flags ask for, or nil for none,
// and whether it was asked for explicitly. An explicit sandbox keeps
// sandbox-runtime's semantics (no network unless allowed) and fails when
// it cannot run; mcp's default one reaches public addresses through the
// egress proxy (loopback and private ranges are refused), so that pip and
// web APIs work, and gives way to running unsandboxed, with a warning,
// where the host cannot sandbox.
func (f *sandboxFlags) policy() (pub *ipybox.SandboxConfig, explicit bool, err error) {
	limits := f.memory != "" || f.pids != 0
	switch {
	case f.off && f.explicit():
		return nil, false, errors.New("--no-sandbox contradicts --sandbox, --sandbox-config and --allowed-domain; choose one")
	case f.off && limits:
		return nil, false, errors.New("--memory and --pids limit the sandboxed kernel; they mean nothing with --no-sandbox")
	case f.off:
		return nil, false, nil
	case !f.explicit() && !f.onByDefault:
		if limits {
			return nil, false, errors.New("--memory and --pids limit the sandboxed kernel; add --sandbox")
		}
		return nil, false, nil
	}
	cfg := sandbox.DefaultConfig()
	if f.config != "" {
		if cfg, err = sandbox.LoadConfig(f.config); err != nil {
			return nil, false, fmt.Errorf("--sandbox-config: %w", err)
		}
	}
	if err := cfg.AllowDomains(f.domains...); err != nil {
		return nil, false, fmt.Errorf("--allowed-domain: %w", err)
	}
	if !f.explicit() {
		if err := cfg.AllowDomains(sandbox.AnyPublicDomain); err != nil {
			return nil, false, err
		}
	}
	if f.memory != "" {
		n, err := sandbox.ParseSize(f.memory)
		if err != nil {
			return nil, false, fmt.Errorf("--memory: %w", err)
		}
		cfg.Limits.Memory = n
	}
	if f.pids != 0 {
		cfg.Limits.Pids = f.pids
	}
	if err := cfg.Validate(); err != nil {
		return nil, false, fmt.Errorf("sandbox: %w", err)
	}
	if pub, err = publicSandbox(cfg); err != nil {
		return nil, false, err
	}
	return pub, f.explicit(), nil
}

// publicSandbox converts a policy read by the sandbox package into the
// SDK's, through the settings format both read and write.
func publicSandbox(cfg *sandbox.Config) (*ipybox.SandboxConfig, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("sandbox policy: %w", err)
	}
	var pub ipybox.SandboxConfig
	if err := json.Unmarshal(b, &pub); err != nil {
		return nil, fmt.Errorf("sandbox policy: %w", err)
	}
	return &pub, nil
}
