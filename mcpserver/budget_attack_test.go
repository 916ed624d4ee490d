package mcpserver

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAttackSnapshotBudgetOthersFolders: a session's kernel can write its
// own snapshot folder between saves. A sparse file (a truncate to 4 GiB,
// no disk) and a dense file past the session's budget must not take the
// other sessions' room in the workspace's budget: the first counts as
// the disk it takes, the second as at most one session's budget.
func TestAttackSnapshotBudgetOthersFolders(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	srv := newServer(t, &Options{Workspace: ws, Durability: DurabilityOptions{SnapshotBytes: 1 << 20, SnapshotWorkspaceBytes: 8 << 20}})
	root := filepath.Join(ws, ".ipybox", "snapshots")
	for _, d := range []string{"sparse", "dense"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Create(filepath.Join(root, "sparse", "namespace"))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(4 << 30)
	f.Close()
	if err := os.WriteFile(filepath.Join(root, "dense", "namespace"), make([]byte, 3<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	used, err := srv.durability.budget.snapshotsSize(filepath.Join(root, "mine"))
	if err != nil {
		t.Fatal(err)
	}
	if used > (1<<20)+(64<<10) {
		t.Errorf("the other folders count %d bytes; want at most one session's budget (%d) and the sparse file's few blocks", used, 1<<20)
	}
	want, release, err := srv.durability.budget.reserve(t.Context(), filepath.Join(root, "mine"))
	if err != nil {
		t.Fatalf("a save beside them: %v", err)
	}
	release()
	if want != 1<<20 {
		t.Errorf("room for a save: %d, want the session's budget %d", want, 1<<20)
	}
}
