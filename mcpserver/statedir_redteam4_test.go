package mcpserver

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRedteam4StateDirOwnership (issue 34.5): a state folder that another
// local user owns, or that group or others can write, or whose parent
// they can write (they could swap it for a link), lets that user plant
// or delete session records; New must refuse each. Another user is uid
// 65534 (nobody), so this runs as root.
func TestRedteam4StateDirOwnership(t *testing.T) {
	t.Skip("BREAK: --state-dir owned by another user, or writable by group or others, is used as it is (issue 34.5 not implemented on main); see /work/notes/attack.md")
	if os.Getuid() != 0 {
		t.Skip("needs root to make folders another user owns")
	}
	base := t.TempDir()
	mk := func(name string, mode os.FileMode, uid int) string {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	open := mk("open", 0o777, 0)
	group := mk("group", 0o770, 0)
	nobodys := mk("nobodys", 0o700, 65534)
	parent := mk("parent", 0o777, 0)
	inOpen := filepath.Join(parent, "state")
	if err := os.Mkdir(inOpen, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(nobodys, link); err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]string{"mode 0777": open, "mode 0770": group, "owned by nobody": nobodys,
		"parent mode 0777": inOpen, "a link to nobody's": link} {
		srv, err := New(&Options{Workspace: t.TempDir(), HTTP: HTTPOptions{AuthToken: testToken}, Durability: DurabilityOptions{StateDir: dir}})
		if err == nil {
			srv.Close()
			t.Errorf("%s: the state folder %s was accepted", name, dir)
		}
	}
}
