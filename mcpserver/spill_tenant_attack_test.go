package mcpserver

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestAttackTenantSpill: alice's long output is kept in a file of her
// folder's ipybox-outputs; bob tries to read it, or to name it, by every
// spelling he has: its name in his own folder, a climbing relpath, his
// kernel's links to it (absolute and relative) downloaded by their names,
// its host path uploaded into his folder (as written, climbing out of
// his folder, with "//" and "/./", through his link, through
// /proc/self/root), alice's session handle on a download, and his
// sandboxed kernel opening its host path. Nothing of hers reaches him.
// And the spill budget is each principal's: alice's full ipybox-outputs
// refuses her next file, not bob's.
func TestAttackTenantSpill(t *testing.T) {
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	srv := newServer(t, &Options{Workspace: ws, HTTP: HTTPOptions{Principals: twoPrincipals}, Sessions: SessionOptions{NoZygote: true},
		Sandbox: ipybox.DefaultSandbox(), SpillWorkspaceBytes: 1 << 20})
	url := serveHTTP(t, srv)
	alice := connectHTTPAs(t, url, aliceTok, newVersion, nil)
	bob := connectHTTPAs(t, url, bobTok, newVersion, nil)
	ah, bh := createSession(t, alice), createSession(t, bob)
	const secret = "alice-secret-"
	spilled := regexp.MustCompile(`ipybox-outputs/cell-[0-9-]+-[0-9a-f]+\.txt`)
	out := runIn(t, alice, ah, fmt.Sprintf("print(%q * 20000)", secret))
	rel := spilled.FindString(out)
	if rel == "" {
		t.Fatalf("alice's long output names no file:\n%s", short(out))
	}
	aliceFile := filepath.Join(srv.Workspace(), "alice", rel)
	if b, err := os.ReadFile(aliceFile); err != nil || !strings.Contains(string(b), secret) {
		t.Fatalf("alice's spilled file %s: %v (the test proves nothing)", aliceFile, err)
	}
	// alice herself can fetch it: the download works (the test can fail).
	own := filepath.Join(transferFolder(t, "alice"), "own.txt")
	if res := call(t, alice, "download_file", map[string]any{"relpath": rel, "local_path": own, "session": ah}); res.IsError {
		t.Fatalf("alice's own download: %s", text(res))
	}
	got := runIn(t, bob, bh, fmt.Sprintf(`import os
os.symlink(%q, "abs-link")
os.symlink("../alice/%s", "rel-link")
try:
    print(open(%q).read()[:20])
except Exception as e:
    print("read refused", type(e).__name__)`, aliceFile, rel, aliceFile))
	if strings.Contains(got, secret) || !strings.Contains(got, "read refused") {
		t.Errorf("bob's kernel opened alice's spilled file by its host path: %s", got)
	}
	bobDir := filepath.Join(srv.Workspace(), "bob")
	dst := transferFolder(t, "bob")
	for i, relpath := range []string{rel, "../alice/" + rel, "ipybox-outputs/../../alice/" + rel, "abs-link", "rel-link"} {
		local := filepath.Join(dst, fmt.Sprintf("down-%d.txt", i))
		res := call(t, bob, "download_file", map[string]any{"relpath": relpath, "local_path": local, "session": bh})
		if b, _ := os.ReadFile(local); !res.IsError || strings.Contains(string(b), secret) {
			t.Errorf("bob's download_file %q: error %v, got %d bytes: %s", relpath, res.IsError, len(b), short(text(res)))
		}
	}
	for i, local := range []string{
		aliceFile,
		filepath.Join(bobDir, "..", "alice", rel),
		strings.Replace(aliceFile, "/alice/", "//alice/./", 1),
		bobDir + "/../alice/" + rel,
		filepath.Join(bobDir, "abs-link"),
		"/proc/self/root" + aliceFile,
	} {
		to := fmt.Sprintf("stolen-%d.txt", i)
		res := call(t, bob, "upload_file", map[string]any{"relpath": to, "local_path": local, "session": bh})
		if b, _ := os.ReadFile(filepath.Join(bobDir, to)); !res.IsError || strings.Contains(string(b), secret) {
			t.Errorf("bob's upload_file of %s: error %v, got %d bytes: %s", local, res.IsError, len(b), short(text(res)))
		}
	}
	res := call(t, bob, "download_file", map[string]any{"relpath": rel, "local_path": filepath.Join(dst, "by-handle.txt"), "session": ah})
	if b, _ := os.ReadFile(filepath.Join(dst, "by-handle.txt")); !res.IsError || strings.Contains(string(b), secret) {
		t.Errorf("bob's download_file with alice's handle: error %v: %s", res.IsError, short(text(res)))
	}

	// The budget: alice's ipybox-outputs is full (1 MiB); her next long
	// output keeps no file, and bob's does.
	if err := os.WriteFile(filepath.Join(srv.Workspace(), "alice", "ipybox-outputs", "cell-filler.txt"), make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := runIn(t, alice, ah, "print('a' * 200000)"); spilled.MatchString(out) || !strings.Contains(out, "its limit") {
		t.Errorf("alice's output with her folder full: %s", short(out))
	}
	if out := runIn(t, bob, bh, "print('b' * 200000)"); !spilled.MatchString(out) {
		t.Errorf("bob's long output, with alice's folder full, was not kept: %s", short(out))
	}
}
