//go:build !windows

package mcpconn

import (
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/trusted/trustedtest"
)

// TestAttackTokenStoreNotOurs is the attack of issue 34.5 on the OAuth
// token store: a store that another user owns, or that group or others
// can write (or a folder above it), is refused when it is read (ipybox
// auth status) and when a sign-in is saved, naming the path and the fix.
// One that others can read was refused already (its tokens may have
// leaked).
func TestAttackTokenStoreNotOurs(t *testing.T) {
	t.Parallel()
	for _, v := range trustedtest.Variants(t, false, true, []byte(`{"version":1,"servers":{}}`+"\n")) {
		fix := v.Fix
		if v.Want == trustedtest.Warn {
			v.Want, fix = trustedtest.Refuse, "chmod 600"
		}
		_, err := ListTokens(v.Path)
		_, rerr := DeleteToken(v.Path, "", "srv", "https://example.com/mcp")
		for _, e := range []error{err, rerr} {
			switch {
			case v.Want == trustedtest.Refuse && (e == nil || !strings.Contains(e.Error(), v.Path) || !strings.Contains(e.Error(), fix)):
				t.Errorf("%s: %v; want a refusal that names %s and %q", v.Name, e, v.Path, fix)
			case v.Want != trustedtest.Refuse && e != nil:
				t.Errorf("%s: %v; want it accepted", v.Name, e)
			}
		}
	}
}
