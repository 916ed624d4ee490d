package mcpconn

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestStdioBareNameNotFromWorkspace (the class of acc3 attack 17): a
// stdio server named by a bare command runs on the host, and is found on
// PATH only outside the folders kernel code can write. With an activated
// workspace venv first on PATH, where kernel code planted a program of
// that name, the server still starts, from the next PATH entry, and the
// planted one never runs.
func TestStdioBareNameNotFromWorkspace(t *testing.T) {
	real := testmcpStdio(t)
	ws, good := t.TempDir(), t.TempDir()
	bin := filepath.Join(ws, ".venv", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(t.TempDir(), "ran")
	planted := fmt.Sprintf("#!/bin/sh\ntouch %s\nexec %s \"$@\"\n", mark, real.Command)
	if err := os.WriteFile(filepath.Join(bin, "acc3-srv"), []byte(planted), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real.Command, filepath.Join(good, "acc3-srv")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+good+string(os.PathListSeparator)+os.Getenv("PATH"))
	cfg := real
	cfg.Command = "acc3-srv"
	m := newManager(t, map[string]Config{"srv": cfg}, &Options{Writable: []string{ws}})
	if _, err := m.ListTools(ctxT(t), "srv"); err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Errorf("the program kernel code planted in the workspace's venv ran on the host")
	}
}
