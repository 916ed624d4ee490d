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

// TestPipNetworkHint: pip's "502 Bad Gateway" or "403 Forbidden" from the
// sandbox's egress proxy is explained: which it was, the hosts pip tried,
// and what to do.
func TestPipNetworkHint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ out, want, not string }{
		{"WARNING: Retrying (Retry(total=4)) after connection broken by 'ProxyError('Unable to connect to proxy', OSError('Tunnel connection failed: 502 Bad Gateway'))': /simple/requests/\nERROR: Could not find a version that satisfies the requirement requests\nLooking in indexes: https://pypi.org/simple",
			"could not reach pypi.org (502 Bad Gateway", "refused"},
		{"ERROR: HTTP error 403 while getting https://files.pythonhosted.org/packages/x.whl\nipybox sandbox proxy: refused: files.pythonhosted.org is not an allowed domain",
			"refused files.pythonhosted.org (403: not an allowed domain); allow it with --allowed-domain files.pythonhosted.org", "502"},
		{"ERROR: No matching distribution found for nothere", "", ""},
	} {
		got := pipNetworkHint([]byte(tc.out))
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) || tc.not != "" && strings.Contains(got, tc.not) {
			t.Errorf("pip output %.60q:\n got %q\nwant %q", tc.out, got, tc.want)
		}
	}
}
