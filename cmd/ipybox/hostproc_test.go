package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/testenv"
)

// TestAttackDoctorImportsWorkspace: ipybox doctor asked the kernel's
// Python for its modules' versions with python -c in the folder it was
// run in, the workspace often: -c put that folder first on sys.path, and
// a module kernel code wrote there (ipykernel.py, numpy/) ran on the host
// in place of the real one. Each planted module must stay unrun, and the
// real one's version be reported.
func TestAttackDoctorImportsWorkspace(t *testing.T) {
	py := testenv.NeedsPython(t)
	ws, marks := t.TempDir(), t.TempDir()
	bait := func(name string) string {
		return "open(" + quotePy(filepath.Join(marks, name)) + ", 'w').write('ran')\n__version__ = 'planted'\n"
	}
	if err := os.WriteFile(filepath.Join(ws, "ipykernel.py"), []byte(bait("ipykernel")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(ws, "json"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "json", "__init__.py"), []byte(bait("json")), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(ws)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := pythonModules(ctx, py, "ipykernel")
	for _, m := range []string{"ipykernel", "json"} {
		if _, err := os.Stat(filepath.Join(marks, m)); err == nil {
			t.Errorf("the planted %s ran on the host", m)
		}
	}
	if v := got["ipykernel"]; v == "" || v == "planted" {
		t.Errorf("ipykernel's version = %q, want the real one", v)
	}
}

func quotePy(s string) string { return "'" + s + "'" }
