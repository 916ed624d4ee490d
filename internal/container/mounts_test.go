package container

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/docker"
	"github.com/ipybox/ipybox/internal/wsguard"
)

// mountLine is a mount as one comparable line.
func mountLine(m docker.Mount) string {
	s := m.Type + " " + m.Source + " -> " + m.Target
	if m.ReadOnly {
		s += " ro"
	}
	if m.TmpfsOptions != nil {
		s += " tmpfs"
	}
	return s
}

func mountLines(ms []docker.Mount) []string {
	var out []string
	for _, m := range ms {
		out = append(out, mountLine(m))
	}
	return out
}

// TestWorkspaceMounts: the workspace, the run directory read-only but for
// the kernel's own directory, read-only folders made, and a planted link
// where a folder must be refused (Docker would follow it).
func TestWorkspaceMounts(t *testing.T) {
	tests := []struct {
		name     string
		readOnly []string
		writable []string
		plant    func(ws string)
		idmapped bool
		want     []string // with WS, RUN, SRC for the paths
		wantErr  string
	}{
		{name: "workspace and run directory",
			want: []string{"bind WS -> /app/workspace", "bind RUN -> RUN ro", "bind RUN/kernel -> RUN/kernel"}},
		{name: "read-only folder made", readOnly: []string{"mcptools"},
			want: []string{"bind WS -> /app/workspace", "bind RUN -> RUN ro", "bind RUN/kernel -> RUN/kernel", "bind WS/mcptools -> /app/workspace/mcptools ro"}},
		{name: "writable folder through the idmapped mount", writable: []string{".ipybox/venv"}, idmapped: true,
			plant: func(ws string) { os.MkdirAll(filepath.Join(ws, ".ipybox", "venv"), 0o755) },
			want:  []string{"bind SRC -> /app/workspace", "bind RUN -> RUN ro", "bind RUN/kernel -> RUN/kernel", "bind SRC/.ipybox/venv -> /app/workspace/.ipybox/venv"}},
		{name: "link planted at a read-only folder", readOnly: []string{"mcptools"},
			plant:   func(ws string) { os.Symlink("/etc", filepath.Join(ws, "mcptools")) },
			wantErr: "is not a directory (a symbolic link?)"},
		{name: "link planted at a writable folder", writable: []string{"pkgs"},
			plant:   func(ws string) { os.Symlink("/etc", filepath.Join(ws, "pkgs")) },
			wantErr: "is not a directory (a symbolic link?)"},
		{name: "missing writable folder", writable: []string{"pkgs"}, wantErr: "is not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws, run := t.TempDir(), t.TempDir()
			if tt.plant != nil {
				tt.plant(ws)
			}
			l := &Launcher{cfg: Config{Workspace: ws, ReadOnly: tt.readOnly, Writable: tt.writable}, wsSource: ws}
			src := ws
			if tt.idmapped {
				src = "/run/ipybox-idmap/ws"
				l.wsSource = src
			}
			got, err := l.workspaceMounts(run, filepath.Join(run, "kernel"), filepath.Join(run, "kernel"))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, w := range tt.want {
				want = append(want, strings.NewReplacer("WS", ws, "RUN", run, "SRC", src).Replace(w))
			}
			if g := mountLines(got); !slices.Equal(g, want) {
				t.Errorf("mounts\n got %q\nwant %q", g, want)
			}
		})
	}
}

// TestProtectionMounts: protected paths in the workspace are mounted
// read-only, masked files behind one empty file, masked folders as an
// unlistable tmpfs; paths outside the workspace are not mounted at all
// (the container shows nothing else of the host), and the fingerprint is
// recorded.
func TestProtectionMounts(t *testing.T) {
	ws, run := t.TempDir(), t.TempDir()
	prot := &wsguard.Protection{
		ReadOnly: []string{filepath.Join(ws, ".git"), "/home/user/.gitconfig"},
		Masks:    []string{filepath.Join(ws, ".env"), filepath.Join(ws, "sub", ".env"), "/etc/shadow"},
		MaskDirs: []string{filepath.Join(ws, ".ipybox", "tokens")},
	}
	l := &Launcher{cfg: Config{Workspace: ws, Protect: func() (*wsguard.Protection, error) { return prot, nil }}}
	got, mounts, err := l.protectionMounts(run)
	if err != nil || got != prot {
		t.Fatalf("protection %v, %v", got, err)
	}
	empty := filepath.Join(run, "masked")
	want := []string{
		"bind " + ws + "/.git -> /app/workspace/.git ro",
		"bind " + empty + " -> /app/workspace/.env ro",
		"bind " + empty + " -> /app/workspace/sub/.env ro",
		"tmpfs  -> /app/workspace/.ipybox/tokens ro tmpfs",
	}
	if g := mountLines(mounts); !slices.Equal(g, want) {
		t.Errorf("mounts\n got %q\nwant %q", g, want)
	}
	if fi, err := os.Stat(empty); err != nil || fi.Size() != 0 || fi.Mode().Perm() != 0o444 {
		t.Errorf("the mask file: %v %v", fi, err)
	}
	if l.StartedFingerprint() != prot.Fingerprint() {
		t.Error("the start's fingerprint is not recorded")
	}
	if mt := mounts[3].TmpfsOptions; mt == nil || mt.Mode != 0o100 {
		t.Errorf("masked folder's tmpfs: %+v, want mode 0100 (no listing)", mt)
	}

	// Without Protect: nothing, and no fingerprint.
	l = &Launcher{cfg: Config{Workspace: ws}}
	if p, m, err := l.protectionMounts(run); p != nil || m != nil || err != nil {
		t.Errorf("without Protect: %v %v %v", p, m, err)
	}
}
