package mcpserver

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ipybox/ipybox"
)

// TestTenantFolders: with one principal (or none) the one tenant's
// folder is the workspace, as before principals were tenants; with
// several, each principal's is <workspace>/<name>, made at first use
// with the workspace's mode and without following a link planted there;
// a name that starts with a dot is refused.
func TestTenantFolders(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	for _, o := range []*Options{{Workspace: ws}, {Workspace: ws, HTTP: HTTPOptions{NoAuth: true, Principals: map[string]string{"ci": "ci-token-0123456789"}}}} {
		s := newServer(t, o)
		for _, p := range []string{"default", "ci", localPrincipal} {
			if tn := s.tenant(p); tn != s.only || tn.dir != s.Workspace() {
				t.Errorf("one principal: %s's folder is %q", p, tn.dir)
			}
		}
	}

	os.Chmod(ws, 0o750)
	s := newServer(t, &Options{Workspace: ws, HTTP: HTTPOptions{Principals: map[string]string{"alice": "alice-token-0123456789", "bob": "bob-token-0123456789"}}})
	a := s.tenant("alice")
	if a != s.tenant("alice") || a == s.tenant("bob") || a.dir != filepath.Join(s.Workspace(), "alice") {
		t.Fatalf("alice's tenant: %q", a.dir)
	}
	if _, err := os.Stat(a.dir); err == nil {
		t.Error("alice's folder was made before its first use")
	}
	if err := a.ensure(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(a.dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o750 {
		t.Errorf("alice's folder: %v %v", fi.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(a.dir, ".ipybox")); err != nil {
		t.Errorf("alice's .ipybox: %v", err)
	}
	// A link planted where bob's folder goes is not followed.
	target := t.TempDir()
	os.Symlink(target, filepath.Join(s.Workspace(), "bob"))
	if err := s.tenant("bob").ensure(); err == nil {
		t.Error("bob's folder, a link, was accepted")
	}
	if ents, _ := os.ReadDir(target); len(ents) != 0 {
		t.Errorf("the link's target was written: %v", ents)
	}

	for _, bad := range []string{".ipybox", "..", ".x"} {
		if _, err := New(&Options{Workspace: ws, HTTP: HTTPOptions{Principals: map[string]string{bad: "x-token-0123456789", "b": "b-token-0123456789"}}}); err == nil || !strings.Contains(err.Error(), "starts with '.'") {
			t.Errorf("principal %q: %v", bad, err)
		}
	}
	if _, err := New(&Options{Workspace: ws, HTTP: HTTPOptions{Principals: map[string]string{"Alice": "x-token-0123456789", "alice": "b-token-0123456789"}}}); err == nil || !strings.Contains(err.Error(), "only in case") {
		t.Errorf("Alice and alice: %v", err)
	}
}

// TestTenantFileTransfers: a principal's upload_file and download_file
// reach no other principal's folder, nor the workspace's .ipybox, even
// when the operator allowed the whole workspace; by default they reach
// the principal's own folder and the temporary folder.
func TestTenantFileTransfers(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	two := map[string]string{"alice": "alice-token-0123456789", "bob": "bob-token-0123456789"}
	s := newServer(t, &Options{Workspace: ws, AllowedDirs: []string{ws}, HTTP: HTTPOptions{Principals: two}})
	a, b := s.tenant("alice"), s.tenant("bob")
	for _, tn := range []*tenant{a, b} {
		if err := tn.ensure(); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{filepath.Join(b.dir, "x"), filepath.Join(b.dir, ".ipybox", "venv", "x.pth"), filepath.Join(s.Workspace(), ".ipybox", "sessions", "x")} {
		if _, _, err := a.allowedRoot(p); err == nil {
			t.Errorf("alice may transfer %s", p)
		}
	}
	if _, _, err := a.allowedRoot(filepath.Join(a.dir, "x")); err != nil {
		t.Errorf("alice's own folder: %v", err)
	}
	d := newServer(t, &Options{Workspace: t.TempDir(), HTTP: HTTPOptions{Principals: two}})
	if dirs := d.tenant("alice").allowedDirs(); len(dirs) != 2 || dirs[0] != d.tenant("alice").dir {
		t.Errorf("alice's default allowed folders: %v", dirs)
	}
}

// TestConfinementOrder: a snapshot is used by a kernel as confined as
// the one that wrote it, or more; other settings of the same backend
// are not ordered, and an unrecorded confinement is used by none.
func TestConfinementOrder(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	none := newServer(t, &Options{Workspace: ws}).factory.confinement()
	sb := newServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox()}).factory.confinement()
	other := ipybox.DefaultSandbox()
	other.Filesystem.AllowWrite = append(other.Filesystem.AllowWrite, "/tmp")
	sb2 := newServer(t, &Options{Workspace: ws, Sandbox: other}).factory.confinement()
	ct := newServer(t, &Options{Workspace: ws, Container: &ipybox.ContainerConfig{}}).factory.confinement()
	if none != "none" || !strings.HasPrefix(sb, "sandbox/") || !strings.HasPrefix(ct, "container/") || sb == sb2 {
		t.Fatalf("confinements: %q %q %q %q", none, sb, sb2, ct)
	}
	for _, c := range []struct {
		from, to string
		ok       bool
	}{
		{none, none, true}, {none, sb, true}, {none, ct, true}, {sb, sb, true}, {ct, ct, true},
		{sb, none, false}, {ct, none, false}, {sb, sb2, false}, {sb, ct, false}, {ct, sb, false},
		{"", none, false}, {"", sb, false},
	} {
		if got := mayRestore(c.from, c.to); got != c.ok {
			t.Errorf("mayRestore(%q, %q) = %v", c.from, c.to, got)
		}
	}
}

// TestTenantsConcurrently: sessions of several principals that start at
// once get one tenant per principal, each folder made once.
func TestTenantsConcurrently(t *testing.T) {
	t.Parallel()
	ps := map[string]string{}
	for i := range 4 {
		ps[fmt.Sprintf("p%d", i)] = fmt.Sprintf("p%d-token-0123456789", i)
	}
	s := newServer(t, &Options{Workspace: t.TempDir(), HTTP: HTTPOptions{Principals: ps}})
	got := make([][]*tenant, 16)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			for p := range 4 {
				tn := s.tenant(fmt.Sprintf("p%d", p))
				if err := tn.ensure(); err != nil {
					t.Error(err)
				}
				got[i] = append(got[i], tn)
			}
		})
	}
	wg.Wait()
	for i := range got {
		for p := range got[i] {
			if got[i][p] != got[0][p] {
				t.Fatalf("principal p%d has two tenants", p)
			}
		}
	}
	if n := len(s.allTenants()); n != 4 {
		t.Errorf("%d tenants, want 4", n)
	}
}
