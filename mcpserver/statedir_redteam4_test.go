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
	// Variants: a folder not made yet in an open parent (New makes it, and
	// must judge the parent); a link of ours in an open parent, to a
	// folder of ours (the other user swaps the link); the folder itself
	// sticky and open (others add entries to it); a link to a folder in
	// an open parent.
	good := mk("good", 0o700, 0)
	openLink := filepath.Join(parent, "tolink")
	if err := os.Symlink(good, openLink); err != nil {
		t.Fatal(err)
	}
	sticky := mk("sticky", 0o1777, 0)
	if err := os.Chmod(sticky, 0o1777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	linkToOpen := filepath.Join(base, "toopen")
	if err := os.Symlink(inOpen, linkToOpen); err != nil {
		t.Fatal(err)
	}
	for name, dir := range map[string]string{"mode 0777": open, "mode 0770": group, "owned by nobody": nobodys,
		"parent mode 0777": inOpen, "a link to nobody's": link,
		"not made yet, parent mode 0777": filepath.Join(parent, "new"), "a link in a parent of mode 0777": openLink,
		"sticky and open": sticky, "a link to a folder in an open parent": linkToOpen} {
		srv, err := New(&Options{Workspace: t.TempDir(), HTTP: HTTPOptions{AuthToken: testToken}, Durability: DurabilityOptions{StateDir: dir}})
		if err == nil {
			srv.Close()
			t.Errorf("%s: the state folder %s was accepted", name, dir)
		}
	}
	// Control: a folder of ours is accepted.
	srv, err := New(&Options{Workspace: t.TempDir(), HTTP: HTTPOptions{AuthToken: testToken}, Durability: DurabilityOptions{StateDir: good}})
	if err != nil {
		t.Fatalf("a folder of this user's own was refused: %v", err)
	}
	srv.Close()
}
