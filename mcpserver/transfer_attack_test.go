package mcpserver

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/testenv"
)

// transferFolder is principal's transfer folder (transferDir), made by
// the server at the first file call of that principal.
func transferFolder(t *testing.T, principal string) string {
	t.Helper()
	d := filepath.Join(os.TempDir(), "ipybox-transfer-"+strconv.Itoa(os.Geteuid()), principal)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// TestAttackTenantTransfer: with several principals, upload_file and
// download_file reach, outside a principal's folder, only a transfer
// folder of its own. Before, the system's temporary folder was allowed to
// all: alice's download there was bob's upload (as named, and through a
// link bob made there), and a file bob left there under the name alice
// meant went into her folder. Each principal still transfers through its
// own folder (the test can fail).
func TestAttackTenantTransfer(t *testing.T) {
	testenv.NeedsPython(t)
	srv := newServer(t, &Options{Workspace: t.TempDir(), HTTP: HTTPOptions{Principals: twoPrincipals}, Sessions: SessionOptions{NoZygote: true}})
	url := serveHTTP(t, srv)
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	bob := connectHTTPAs(t, url, bobTok, newVersion, nil)
	ah, bh := createSession(t, alice), createSession(t, bob)
	aliceT, bobT := transferFolder(t, "alice"), transferFolder(t, "bob")
	runIn(t, alice, ah, "open('report.txt', 'w').write('alice-secret')")
	tmp := t.TempDir() // in the system's temporary folder
	shared := filepath.Join(tmp, "report.txt")
	// alice's download: to the shared temporary folder (refused), and to
	// her transfer folder.
	if res := call(t, alice, "download_file", map[string]any{"relpath": "report.txt", "local_path": shared, "session": ah}); !res.IsError {
		t.Errorf("alice's download into the shared temporary folder was allowed: %s", text(res))
	}
	mine := filepath.Join(aliceT, "report.txt")
	if res := call(t, alice, "download_file", map[string]any{"relpath": "report.txt", "local_path": mine, "session": ah}); res.IsError {
		t.Fatalf("alice's download into her transfer folder: %s", text(res))
	}
	if fi, err := os.Stat(aliceT); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("alice's transfer folder: %v %v, want mode 0700", fi, err)
	}
	// bob's uploads of it: by its path, by a climbing spelling from his
	// own transfer folder, and through a link in the shared folder.
	os.WriteFile(shared, []byte("alice-secret"), 0o644) // as if alice had put it there
	link := filepath.Join(tmp, "to-alice")
	os.Symlink(aliceT, link)
	for i, local := range []string{mine, bobT + "/../alice/report.txt", shared, filepath.Join(link, "report.txt")} {
		to := "stolen-" + strconv.Itoa(i)
		res := call(t, bob, "upload_file", map[string]any{"relpath": to, "local_path": local, "session": bh})
		b, _ := os.ReadFile(filepath.Join(srv.Workspace(), "bob", to))
		if !res.IsError || strings.Contains(string(b), "alice-secret") {
			t.Errorf("bob's upload of %s: error %v, %q: %s", local, res.IsError, b, text(res))
		}
	}
	// A file bob leaves where alice would look: the shared folder is not
	// hers to upload from.
	planted := filepath.Join(tmp, "input.csv")
	os.WriteFile(planted, []byte("bob's data"), 0o644)
	if res := call(t, alice, "upload_file", map[string]any{"relpath": "input.csv", "local_path": planted, "session": ah}); !res.IsError {
		t.Errorf("alice's upload from the shared temporary folder was allowed: %s", text(res))
	}
	// bob's own transfer folder works.
	os.WriteFile(filepath.Join(bobT, "in.txt"), []byte("bob"), 0o600)
	if res := call(t, bob, "upload_file", map[string]any{"relpath": "in.txt", "local_path": filepath.Join(bobT, "in.txt"), "session": bh}); res.IsError {
		t.Errorf("bob's upload from his transfer folder: %s", text(res))
	}
}

// TestTransferFolderNotOurs: a transfer folder that another local user
// made first, or made writable to others, is refused, not used.
func TestTransferFolderNotOurs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the folder to another user")
	}
	testenv.NeedsPython(t)
	srv := newServer(t, &Options{Workspace: t.TempDir(), HTTP: HTTPOptions{Principals: twoPrincipals}, Sessions: SessionOptions{NoZygote: true}})
	url := serveHTTP(t, srv)
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	ah := createSession(t, alice)
	runIn(t, alice, ah, "open('r.txt', 'w').write('x')")
	aliceT := transferFolder(t, "alice")
	os.MkdirAll(aliceT, 0o700)
	for _, spoil := range []func() error{
		func() error { return os.Chown(aliceT, 1234, 1234) },
		func() error { os.Chown(aliceT, 0, 0); return os.Chmod(aliceT, 0o777) },
	} {
		if err := spoil(); err != nil {
			t.Fatal(err)
		}
		res := call(t, alice, "download_file", map[string]any{"relpath": "r.txt", "local_path": filepath.Join(aliceT, "r.txt"), "session": ah})
		if !res.IsError {
			t.Errorf("a download into a transfer folder of another user's, or that others can write: %s", text(res))
		}
	}
}
