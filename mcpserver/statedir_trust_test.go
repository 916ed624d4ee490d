//go:build !windows

package mcpserver

import (
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/trusted/trustedtest"
)

// TestAttackStateDirNotOurs is the attack of issue 34.5 on the server: a
// state folder that another user owns, or that group or others can write
// (or a folder above it), would let that user plant or remove session
// records; New refuses it, naming the folder and the fix.
func TestAttackStateDirNotOurs(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	for _, v := range trustedtest.Variants(t, true, false, nil) {
		s, err := New(&Options{Workspace: ws, Durability: DurabilityOptions{StateDir: v.Path}})
		if err == nil {
			s.Close()
		}
		switch {
		case v.Want == trustedtest.Refuse && (err == nil || !strings.Contains(err.Error(), v.Path) || !strings.Contains(err.Error(), v.Fix)):
			t.Errorf("%s: %v; want a refusal that names %s and %q", v.Name, err, v.Path, v.Fix)
		case v.Want != trustedtest.Refuse && err != nil:
			t.Errorf("%s: %v; want it accepted", v.Name, err)
		}
	}
}
