package ipybox

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/ipybox/ipybox/internal/mcpconn"
	"github.com/ipybox/ipybox/internal/statedir"
)

// ErrWorkspaceNotWritable is returned (wrapped) by CheckWorkspace for a
// workspace, or its .ipybox, that this process cannot write.
var ErrWorkspaceNotWritable = errors.New("not writable by this process")

// CheckWorkspace reports what would make every kernel start in workspace
// fail, so that a server can fail once, at its own start, instead of at
// each session: a directory this process cannot write (the workspace, or
// its .ipybox, which holds the registry of MCP servers and the
// virtualenv; ErrWorkspaceNotWritable), and a registry
// (.ipybox/servers.json) that does not load. It creates .ipybox when it
// is missing. Start does not call it: a kernel may well work in a
// directory it only reads.
func CheckWorkspace(workspace string) error {
	ws, err := filepath.Abs(workspace)
	if err != nil {
		return fmt.Errorf("ipybox: workspace: %w", err)
	}
	if err := checkWritable(ws); err != nil {
		return err
	}
	if _, err := statedir.Ensure(ws); err != nil {
		return fmt.Errorf("ipybox: %w", err)
	}
	if err := checkWritable(filepath.Join(ws, ".ipybox")); err != nil {
		return err
	}
	p := registryPath(ws)
	if _, err := mcpconn.LoadRegistry(p); err != nil {
		// The error names the file (loading PATH: why).
		return fmt.Errorf("ipybox: the registry of MCP servers does not load: %w; repair it, "+
			"or move it aside to start with no servers registered: mv %s %s.bad", err, p, p)
	}
	return nil
}
