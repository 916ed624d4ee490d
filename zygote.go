package ipybox

import (
	"context"
	"log/slog"

	"github.com/ipybox/ipybox/internal/kernel"
)

// Zygote is a fork server for kernels: one Python process that has already
// imported ipykernel and forks a fresh kernel per start, in about a fifth
// of a cold start. Kernels it forks share nothing after the fork. It serves
// unsandboxed Executors only (Options.Zygote); Close stops it and the
// kernels it forked.
type Zygote = kernel.Zygote

// NewZygote starts a fork server with python (empty means discovery, as for
// Options.Python). log receives its own output; nil discards it.
func NewZygote(ctx context.Context, python string, log *slog.Logger) (*Zygote, error) {
	return kernel.NewZygote(ctx, python, nil, log)
}
