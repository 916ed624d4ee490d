package sandbox

import (
	"log/slog"
	"net"

	"github.com/ipybox/ipybox/internal/sandboxhook"
)

func init() {
	sandboxhook.ServeEgress = serveEgress
	sandboxhook.NewGuard = newGuard
}

// serveEgress is sandboxhook.ServeEgress: the same proxy, rules and SSRF
// guard as a sandbox's, for a kernel container with no network of its own.
func serveEgress(ln net.Listener, allowed, denied []string, log *slog.Logger) (func() error, error) {
	r, err := newRules(NetworkConfig{AllowedDomains: allowed, DeniedDomains: denied})
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := newProxy(r, nil, log)
	p.serve(ln)
	return p.close, nil
}

// guard is sandboxhook.Guard: a Sandbox that never runs bwrap, used for
// its workspace protection (placeholders, the git snapshot and
// quarantine, secret masks).
type guard struct{ s *Sandbox }

func newGuard(ws string, secrets func() []string, log *slog.Logger) (sandboxhook.Guard, error) {
	s, err := New(DefaultConfig(), &Options{Workspace: ws, Secrets: secrets, Logger: log})
	if err != nil {
		return nil, err
	}
	return guard{s}, nil
}

func (g guard) Protect() (*sandboxhook.Protection, error) {
	p, err := g.s.protectWorkspace()
	if err != nil {
		return nil, err
	}
	return &sandboxhook.Protection{ReadOnly: p.readOnly, Masks: p.masks, MaskDirs: p.maskDirs}, nil
}

func (g guard) Close() error { return g.s.Close() }
