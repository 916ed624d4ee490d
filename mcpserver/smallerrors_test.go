package mcpserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSnapshotBudgetRefusalNamesItsFlag: a save refused by the session's
// budget (--snapshot-budget) says so, rather than blaming the workspace's
// budget and advising to close sessions; one refused by the workspace's
// still says that.
func TestSnapshotBudgetRefusalNamesItsFlag(t *testing.T) {
	t.Parallel()
	srv := newServer(t, &Options{Workspace: t.TempDir(), Durability: DurabilityOptions{SnapshotBytes: 1 << 10, SnapshotWorkspaceBytes: 8 << 20}})
	_, _, err := srv.durability.budget.reserve(t.Context(), filepath.Join(srv.Workspace(), ".ipybox", "snapshots", "mine"))
	if err == nil || !strings.Contains(err.Error(), "--snapshot-budget") || strings.Contains(err.Error(), "workspace") || strings.Contains(err.Error(), "close_session") {
		t.Errorf("the session's budget: %v", err)
	}
	ws := t.TempDir()
	srv = newServer(t, &Options{Workspace: ws, Durability: DurabilityOptions{SnapshotBytes: 1 << 20, SnapshotWorkspaceBytes: 2 << 20}})
	other := filepath.Join(ws, ".ipybox", "snapshots", "other")
	os.MkdirAll(other, 0o700)
	os.WriteFile(filepath.Join(other, "namespace"), make([]byte, 1<<20), 0o600)
	other2 := filepath.Join(ws, ".ipybox", "snapshots", "other2")
	os.MkdirAll(other2, 0o700)
	os.WriteFile(filepath.Join(other2, "namespace"), make([]byte, 1<<20), 0o600)
	_, _, err = srv.durability.budget.reserve(t.Context(), filepath.Join(ws, ".ipybox", "snapshots", "mine"))
	if err == nil || !strings.Contains(err.Error(), "--snapshot-workspace-budget") {
		t.Errorf("the workspace's budget: %v", err)
	}
}
