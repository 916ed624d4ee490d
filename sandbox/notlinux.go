//go:build !linux

package sandbox

import "log/slog"

// placeholders is a no-op off Linux: on macOS Seatbelt denies by pattern,
// so a missing protected name is protected without a placeholder file, and
// elsewhere no sandbox runs.
var placeholders noPlaceholders

type noPlaceholders struct{}

func (noPlaceholders) acquire(string, *slog.Logger) {}
func (noPlaceholders) release(string)               {}

// gitSnapshot exists on Linux only (see gitplant.go): on macOS .git is
// write-protected by the profile.
type gitSnapshot struct{}

func (s *Sandbox) snapshotGit()            {}
func (s *Sandbox) quarantineGit() []string { return nil }

func runsAsRoot() bool                 { return false }
func scanEtc(root string) []secretPath { return nil }
