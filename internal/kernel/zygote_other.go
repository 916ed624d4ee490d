//go:build !linux

package kernel

import (
	"context"
	"errors"
	"log/slog"
)

// A Zygote is a fork server for kernels (see zygote.go); it needs Linux.
type Zygote struct{}

var errNoZygote = errors.New("kernel: the fork server (zygote) needs Linux; start kernels cold (leave Options.Zygote nil)")

// NewZygote fails on this system.
func NewZygote(ctx context.Context, python string, env []string, log *slog.Logger) (*Zygote, error) {
	return nil, errNoZygote
}

// Python returns "".
func (z *Zygote) Python() string { return "" }

// Start fails on this system.
func (z *Zygote) Start(ctx context.Context, spec *Spec) (Process, error) { return nil, errNoZygote }

// Close does nothing.
func (z *Zygote) Close() error { return nil }

// NewSandboxZygote fails on this system.
func NewSandboxZygote(ctx context.Context, python string, env []string, log *slog.Logger) (*Zygote, error) {
	return nil, errNoZygote
}

// Join fails on this system.
func (z *Zygote) Join(ctx context.Context, req *JoinRequest) error { return errNoZygote }
