package sandbox

import (
	"log/slog"
	"net"

	"github.com/ipybox/ipybox/internal/sandboxhook"
)

func init() {
	sandboxhook.ServeEgress = serveEgress
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
