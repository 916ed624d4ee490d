package pyruntime_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/pyruntime"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestInstallCodeCleansUp: the runtime InstallCode writes (for a kernel on
// another machine) is importable, and its directory goes when the
// interpreter exits.
func TestInstallCodeCleansUp(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-c", pyruntime.InstallCode()+"\nimport ipybox_runtime\nprint(ipybox_runtime.__file__)")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output() // bound: ctx's 60 s, then WaitDelay
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	file := strings.TrimSpace(string(out))
	if !strings.HasPrefix(file, filepath.Join(tmp, "ipybox-runtime-")) {
		t.Fatalf("ipybox_runtime was imported from %s, not from the directory InstallCode made in %s", file, tmp)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("left in the temporary directory after the exit: %v", ents)
	}
}
