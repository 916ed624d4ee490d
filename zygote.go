package ipybox

import (
	"context"
	"log/slog"

	"github.com/ipybox/ipybox/internal/kernel"
)

// Zygote is a fork server for kernels: one Python process that has already
// imported ipykernel and forks a fresh kernel per start, in about a fifth
// of a cold start. Kernels it forks share nothing after the fork. It serves
// unsandboxed Executors only ([Options].Zygote).
type Zygote struct {
	z         *kernel.Zygote
	sandboxed bool // from NewSandboxZygote
}

// NewZygote starts a fork server with python (empty means discovery, as for
// [Options].Python). log receives its own output; nil discards it.
func NewZygote(ctx context.Context, python string, log *slog.Logger) (*Zygote, error) {
	z, err := kernel.NewZygote(ctx, python, nil, log)
	if err != nil {
		return nil, err
	}
	return &Zygote{z: z}, nil
}

// Close stops the fork server and the kernels it forked. It is
// idempotent, and bounded: a start in progress gives up.
func (z *Zygote) Close() error { return z.z.Close() }

// NewSandboxZygote starts a fork server for sandboxed Executors (an
// opt-in; see docs/sandbox.md, "Forked kernels"): each kernel still gets
// a bwrap sandbox of its own, built as for a cold start, and is forked
// into it from this pre-imported Python, with every restriction a cold
// start gets. The fork server is never told anything of a session, so
// kernels forked from it share only the pages it had before any session
// existed. It serves only Executors with [Options].Sandbox on Linux;
// python is as for [Options].Python (empty means discovery). log receives
// its own output; nil discards it.
func NewSandboxZygote(ctx context.Context, python string, log *slog.Logger) (*Zygote, error) {
	z, err := kernel.NewSandboxZygote(ctx, python, nil, log)
	if err != nil {
		return nil, err
	}
	return &Zygote{z: z, sandboxed: true}, nil
}
