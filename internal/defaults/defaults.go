// Package defaults declares ipybox's default time bounds in one place, and
// the rule every options struct follows for a duration: zero means the
// default, which the field's doc names, and a negative value is an error
// that names the field and the fix. There is no "off": every wait ipybox
// makes has a bound, or lives only as long as what it watches, and says
// which on its line (internal/codecheck's TestEveryWaitIsMarked).
package defaults

import (
	"fmt"
	"time"
)

// The defaults. The exported Default* constants of the public packages
// and the docs of the options fields refer to these.
const (
	KernelStart       = 60 * time.Second // a kernel start or restart
	InterruptGrace    = 3 * time.Second  // an interrupted cell's time to stop
	IdleGrace         = 2 * time.Second  // the final status after the reply
	GatewayIdleGrace  = 10 * time.Second // the same through a gateway, which may relay iopub well behind the reply
	ShutdownGrace     = 2 * time.Second  // each step of a kernel's Close
	HeartbeatInterval = 2 * time.Second
	HeartbeatMisses   = 3
	Approval          = 5 * time.Minute  // one approval decision
	ToolCall          = 2 * time.Minute  // one MCP tool call
	MCPConnect        = 30 * time.Second // an MCP server's start and initialize
	MCPStopGrace      = 2 * time.Second  // each step of stopping a stdio server
	Authorize         = 5 * time.Minute  // a person signing in to an MCP server (OAuth)
	SignInRetry       = 30 * time.Second // after a failed or declined sign-in, before ipybox asks again
	Transfer          = 10 * time.Minute // one upload_file or download_file with a gateway kernel
	SessionIdle       = 30 * time.Minute // an idle HTTP session of ipybox mcp
	SessionStart      = 2 * time.Minute  // a session's venv and kernel start
	SnapshotSave      = 2 * time.Minute  // one save of a session's namespace (durable sessions)
	HibernateAfter    = 10 * time.Minute // a session of ipybox mcp with no call, before it hibernates
	SessionExpiry     = 7 * 24 * time.Hour
)

// Bounds of ipybox mcp and of forks, for the docs of the options fields and
// the CLI's flags.
const (
	MaxSessions            = 32      // kernels of an HTTP server: a kernel holds 60-100 MB
	SnapshotBytes          = 1 << 30 // one session's snapshot folder
	SnapshotWorkspaceBytes = 4 << 30 // a workspace's snapshot folders together
	MaxForks               = 8       // the forks one Fork call makes
	MaxRewindDepth         = 3       // cell boundaries a session keeps for rewind
)

// Duration is one duration field of an options struct.
type Duration struct {
	Name string // as the user writes it: "Options.ApprovalTimeout"
	V    *time.Duration
	Def  time.Duration
}

// Apply sets each zero field to its default, and returns an error for the
// first negative one. prefix starts the error ("ipybox", "kernel").
func Apply(prefix string, fields ...Duration) error {
	for _, f := range fields {
		switch {
		case *f.V < 0:
			return fmt.Errorf("%s: %s is %v; use a positive duration, or 0 for the default (%v)", prefix, f.Name, *f.V, f.Def)
		case *f.V == 0:
			*f.V = f.Def
		}
	}
	return nil
}
