package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/ipybox/ipybox/internal/defaults"
	"github.com/ipybox/ipybox/internal/sandbox"
	"github.com/ipybox/ipybox/mcpserver"
)

// durableFlags are mcp's flags of durable sessions (docs/durable.md).
type durableFlags struct {
	hibernateAfter, expiry time.Duration
	checkpoint             string
	stateDir               string
	budget, wsBudget       string
	rewindDepth            int
}

func (f *durableFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&f.hibernateAfter, "hibernate-after", defaults.HibernateAfter, "hibernate a session of create_session after this long without a call: its kernel saves its variables and stops, and the next call restores them (docs/durable.md)")
	fs.DurationVar(&f.expiry, "session-expiry", defaults.SessionExpiry, "end a session of create_session, with its saved state, after this long without a call")
	fs.StringVar(&f.checkpoint, "checkpoint", string(mcpserver.CheckpointNone), "when a session's variables are saved besides hibernation and SIGTERM: none, or cell (after every cell that completes, in the kernel, behind the result; a SIGKILL then loses only the cell that ran)")
	fs.StringVar(&f.stateDir, "state-dir", "", "`DIR` that keeps the sessions of create_session across restarts (default <workspace>/.ipybox/sessions; any other must be outside the workspace)")
	fs.StringVar(&f.budget, "snapshot-budget", sandbox.FormatSize(defaults.SnapshotBytes), "most disk one session's saved state takes (`SIZE`: 512m, 2g, unlimited); values past it are not saved, and the restore names them")
	fs.IntVar(&f.rewindDepth, "rewind-depth", 0, "cell boundaries each session keeps for rewind_session (0 to 3): for an unsandboxed kernel a stopped copy-on-write copy of the kernel (a fork per cell, and the memory the kernel changes since); for a sandboxed or container kernel a snapshot of its namespace saved before each cell, on disk within --snapshot-budget (a save per cell); docs/fork.md")
	fs.StringVar(&f.wsBudget, "snapshot-workspace-budget", sandbox.FormatSize(defaults.SnapshotWorkspaceBytes), "most disk the saved states of all sessions of the workspace take together (`SIZE`)")
}

// apply sets the durable sessions' options of o.
func (f *durableFlags) apply(o *mcpserver.Options) error {
	if f.hibernateAfter <= 0 {
		return fmt.Errorf("--hibernate-after %v: want a positive duration", f.hibernateAfter)
	}
	if f.expiry <= 0 {
		return fmt.Errorf("--session-expiry %v: want a positive duration", f.expiry)
	}
	switch c := mcpserver.CheckpointMode(f.checkpoint); c {
	case mcpserver.CheckpointNone, mcpserver.CheckpointCell:
		o.Durability.Checkpoint = c
	default:
		return fmt.Errorf("--checkpoint %q: want none or cell", f.checkpoint)
	}
	if f.rewindDepth < 0 || f.rewindDepth > defaults.MaxRewindDepth {
		return fmt.Errorf("--rewind-depth %d: want 0 (none) to %d", f.rewindDepth, defaults.MaxRewindDepth)
	}
	o.RewindDepth = f.rewindDepth
	var err error
	if o.Durability.SnapshotBytes, err = sandbox.ParseSize(f.budget); err != nil {
		return fmt.Errorf("--snapshot-budget: %w", err)
	}
	if o.Durability.SnapshotWorkspaceBytes, err = sandbox.ParseSize(f.wsBudget); err != nil {
		return fmt.Errorf("--snapshot-workspace-budget: %w", err)
	}
	o.Durability.HibernateAfter, o.Durability.SessionExpiry, o.Durability.StateDir = f.hibernateAfter, f.expiry, f.stateDir
	return nil
}
