package main

import (
	"flag"
	"fmt"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/sandbox"
)

// sandboxFlags are the sandbox flags of exec (and mcp).
type sandboxFlags struct {
	on      bool
	config  string
	domains stringList
}

func (f *sandboxFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.on, "sandbox", false, "run the kernel in a bubblewrap sandbox (Linux): minimal read-only root, writable workspace, no network; fails if the sandbox cannot run")
	fs.StringVar(&f.config, "sandbox-config", "", "sandbox settings `FILE` in sandbox-runtime's JSON format (implies --sandbox)")
	fs.Var(&f.domains, "allowed-domain", "let the sandboxed kernel reach `DOMAIN` through the egress proxy (exact name or *.suffix; repeatable; implies --sandbox)")
}

// policy returns the sandbox policy the flags ask for, or nil for none.
func (f *sandboxFlags) policy() (*ipybox.SandboxConfig, error) {
	if !f.on && f.config == "" && len(f.domains) == 0 {
		return nil, nil
	}
	cfg := sandbox.DefaultConfig()
	if f.config != "" {
		var err error
		if cfg, err = sandbox.LoadConfig(f.config); err != nil {
			return nil, fmt.Errorf("--sandbox-config: %w", err)
		}
	}
	if err := cfg.AllowDomains(f.domains...); err != nil {
		return nil, fmt.Errorf("--allowed-domain: %w", err)
	}
	return cfg, nil
}
