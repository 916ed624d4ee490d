//go:build !linux

package sandbox

import "context"

func runsAsRoot() bool                 { return false }
func scanEtc(root string) []secretPath { return nil }

// quickCheck is the full Probe off Linux: there is no start to explain
// a failure afterwards.
func (s *Sandbox) quickCheck(ctx context.Context) error { return s.Probe(ctx) }
