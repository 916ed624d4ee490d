package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Binary builds this module's cmd/ipybox as users get it, without the race
// detector or coverage whatever flags the test binary has, into a folder
// of t's, and returns its path. Tests that measure the product (its
// memory, say) run it rather than the test binary. Go's build cache makes
// a second build a link only.
func Binary(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		t.Fatalf("go env GOMOD = %q, %v: the tests must run inside the ipybox module", mod, err)
	}
	p := filepath.Join(t.TempDir(), "ipybox")
	cmd := exec.Command("go", "build", "-o", p, "./cmd/ipybox")
	cmd.Dir = filepath.Dir(mod)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/ipybox: %v\n%s", err, out)
	}
	return p
}
