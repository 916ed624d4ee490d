//go:build linux

package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestSeatbeltPolicy builds the macOS policy from a Config on a workspace
// that kernel code has planted links in, and reached through a link of its
// own. (It runs on Linux, where New works; the policy itself is portable.)
//   - The workspace is resolved (Seatbelt matches real paths), but nothing
//     inside it is: a denied path under a planted link to / stays under the
//     workspace, and a planted .env link is denied by its own name.
//   - Secrets (.env, .ipybox but its venv) are denied both ways, the
//     protected names are write-denied anywhere, and the home is hidden in
//     the minimal root mode only, the interpreter's prefix excepted.
func TestSeatbeltPolicy(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	realWS := filepath.Join(base, "real-ws")
	for _, d := range []string{realWS, filepath.Join(realWS, ".ipybox", "venv"), filepath.Join(base, "home", ".pyenv", "versions", "3.12", "bin"), filepath.Join(base, "run", "kernel")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(realWS, ".ipybox", "servers.json"), []byte("{}"), 0o600)
	os.WriteFile(filepath.Join(realWS, ".ipybox", "other"), nil, 0o600)
	ws := filepath.Join(base, "ws-link")
	os.Symlink(realWS, ws)
	// Planted by kernel code:
	os.Symlink("/", filepath.Join(realWS, "to-root"))
	os.Symlink("/etc/passwd", filepath.Join(realWS, ".env"))
	os.Symlink("/", filepath.Join(base, "run", "kernel", "planted"))

	home := filepath.Join(base, "home")
	python := filepath.Join(home, ".pyenv", "versions", "3.12", "bin", "python3")
	for _, mode := range []RootMode{RootMinimal, RootHost} {
		t.Run(string(mode), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.RootMode = mode
			// The same planted link, reached by the real path too.
			cfg.Filesystem.DenyRead = []string{"to-root/etc", "~/.ssh", filepath.Join(realWS, "to-root", "root")}
			cfg.Filesystem.DenyWrite = []string{"to-root/tmp/*.log"}
			s, err := New(cfg, &Options{Workspace: ws})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			s.home = home
			pol, err := s.seatbeltPolicy([]string{filepath.Join(base, "run", "kernel")}, nil, []string{python})
			if err != nil {
				t.Fatal(err)
			}
			if pol.Workspace != realWS {
				t.Errorf("workspace %q, want the resolved %q", pol.Workspace, realWS)
			}
			for _, want := range []string{
				filepath.Join(realWS, "to-root", "etc"), // not /etc: the link is not followed
				filepath.Join(realWS, "to-root", "root"),
				filepath.Join(home, ".ssh"),
				filepath.Join(realWS, "**", ".[eE][nN][vV]"),
				filepath.Join(realWS, ".ipybox", "servers.json"),
				filepath.Join(realWS, ".ipybox", "other"),
			} {
				if !slices.Contains(pol.DenyRead, want) {
					t.Errorf("DenyRead lacks %q (%d entries)", want, len(pol.DenyRead))
				}
			}
			for _, want := range []string{
				filepath.Join(realWS, "to-root", "tmp", "*.log"),
				filepath.Join(realWS, "**", ".[eE][nN][vV]"),
				filepath.Join(realWS, "**", ".[gG][iI][tT]", "**"),
				filepath.Join(realWS, "**", ".[mM][cC][pP].[jJ][sS][oO][nN]"),
				filepath.Join(realWS, "**", ".[bB][aA][sS][hH][rR][cC]"),
				filepath.Join(realWS, "**", "[mM][cC][pP][tT][oO][oO][lL][sS]", "**"),
			} {
				if !slices.Contains(pol.DenyWrite, want) {
					t.Errorf("DenyWrite lacks %q (%d entries)", want, len(pol.DenyWrite))
				}
			}
			for _, p := range slices.Concat(pol.DenyRead, pol.DenyWrite, pol.Writable, pol.ReadOnly) {
				if p == "/etc" || p == "/root" || p == "/tmp/*.log" || strings.HasPrefix(p, "/etc/passwd") || strings.Contains(p, ".ipybox/venv") {
					t.Errorf("%q: a planted link was followed, or the venv was denied", p)
				}
			}
			if !slices.Contains(pol.Writable, filepath.Join(base, "run", "kernel")) {
				t.Errorf("Writable %q lacks the socket directory", pol.Writable)
			}
			hidden := slices.Contains(pol.HideHome, home)
			if hidden != (mode == RootMinimal) {
				t.Errorf("HideHome = %q in the %s mode", pol.HideHome, mode)
			}
			if !slices.Contains(pol.ReadOnly, filepath.Join(home, ".pyenv", "versions", "3.12")) {
				t.Errorf("ReadOnly %q lacks the interpreter's prefix", pol.ReadOnly)
			}
			if _, err := seatbeltProfile(pol); err != nil {
				t.Errorf("profile: %v", err)
			}
		})
	}
}
