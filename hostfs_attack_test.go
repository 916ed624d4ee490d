package ipybox_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcpconn"
)

// TestAttackHostFollowsLinks: the host never writes through a link kernel
// code planted where it writes: the images directory, the connection file
// in the run directory, servers.json; nor reads a planted .env.
func TestAttackHostFollowsLinks(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim.txt")
	if err := os.WriteFile(victim, []byte("untouched"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	ex := start(t, &ipybox.Options{WorkDir: ws, Approver: ipybox.ApproveAll})
	ctx := context.Background()

	// 1. The images directory replaced by a link to another directory.
	run(t, ex, "import os\nos.makedirs('images', exist_ok=True)\nos.rename('images', 'images-old')\nos.symlink("+pyStr(outside)+", 'images')")
	var display *ipybox.Display
	for ev, err := range ex.Stream(ctx, "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()", nil) {
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := ev.(*ipybox.Display); ok {
			display = d
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Errorf("an image was written through the planted link: %v", ents)
	}
	if display == nil || len(display.Images) != 0 || display.Data["image/png"] == nil || !strings.Contains(display.Text, "was not saved") {
		t.Errorf("the image must stay in the event, with the reason it has no file: %+v", display)
	}

	// 2. The connection file replaced by a link; a restart rewrites it.
	res := run(t, ex, "import os\nf = os.path.join(os.path.dirname(os.environ['IPYTHONDIR']), 'kernel.json')\nos.remove(f); os.symlink("+pyStr(victim)+", f)\nprint(os.path.islink(f))")
	if strings.TrimSpace(res.Text) != "True" {
		t.Fatalf("the connection file was not replaced by a link: %q", res.Text)
	}
	if err := ex.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if got := run(t, ex, "print(6 * 7)"); strings.TrimSpace(got.Text) != "42" {
		t.Errorf("after the restart: %q", got.Text)
	}

	// 3. servers.json replaced by a link; a registration rewrites it.
	run(t, ex, "import os\nos.makedirs('.ipybox', exist_ok=True)\np = '.ipybox/servers.json'\nos.path.lexists(p) and os.remove(p)\nos.symlink("+pyStr(victim)+", p)")
	register(t, ex, "go", testmcpStdio(t))
	if fi, err := os.Lstat(filepath.Join(ws, ".ipybox", "servers.json")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("servers.json: %v %v; want a regular file replacing the link", fi, err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "untouched" {
		t.Fatalf("a host write followed a planted link: the victim now holds %q", b)
	}

	// 4. A .env that is a link is refused, not read.
	os.Remove(filepath.Join(ws, ".env"))
	if err := os.Symlink(victim, filepath.Join(ws, ".env")); err != nil {
		t.Fatal(err)
	}
	if _, err := mcpconn.LoadDotEnv(filepath.Join(ws, ".env")); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("a linked .env was read: %v", err)
	}
}

// pyStr quotes s for Python.
func pyStr(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }
