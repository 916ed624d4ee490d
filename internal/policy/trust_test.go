//go:build !windows

package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPolicyTurnedWritableStopsApplying: a policy file that becomes
// writable by others while in use (or whose folder does) is no longer
// trusted: Rules fails, and callers ask about every call, until it is
// fixed.
func TestPolicyTurnedWritableStopsApplying(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "cfg")
	os.Mkdir(dir, 0o700)
	p := filepath.Join(dir, "approvals.policy")
	os.WriteFile(p, []byte("allow tool a.b\n"), 0o600)
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Rules(); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, 0o666)
	if _, err := f.Rules(); err == nil || !strings.Contains(err.Error(), "chmod go-w") {
		t.Errorf("after chmod 666: %v; want a refusal", err)
	}
	os.Chmod(p, 0o600)
	if rs, err := f.Rules(); err != nil || len(rs.All()) != 1 {
		t.Errorf("after chmod 600: %v, %v", rs, err)
	}
	// The folder made writable, and the file rewritten.
	os.Chmod(dir, 0o777)
	os.WriteFile(p, []byte("allow tool a.b\nallow tool c.d\n"), 0o600)
	if _, err := f.Rules(); err == nil || !strings.Contains(err.Error(), "chmod go-w "+dir) {
		t.Errorf("in a folder others may write: %v; want a refusal", err)
	}
}
