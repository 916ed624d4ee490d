package wsguard

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// workspace makes a workspace with the given files (a name ending in "/"
// is a folder) and returns its path, resolved (t.TempDir may be behind a
// link on some systems).
func workspace(t *testing.T, files ...string) string {
	t.Helper()
	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		p := filepath.Join(ws, f)
		if strings.HasSuffix(f, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}

// noHostGit keeps the host's own git configuration out of a test.
func noHostGit(t *testing.T) {
	t.Setenv("GIT_CONFIG_GLOBAL", filepath.Join(t.TempDir(), "none"))
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
}

func rel(ws string, paths []string) []string {
	out := []string{}
	for _, p := range paths {
		r, err := filepath.Rel(ws, p)
		if err != nil {
			r = p
		}
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// TestProtectRoot: the protected names at the root are mounted read-only
// (but .ipybox, which the launcher handles), secrets at the root are
// masked (a folder as a folder), and other names are left alone.
func TestProtectRoot(t *testing.T) {
	noHostGit(t)
	ws := workspace(t, ".git/", ".gitattributes", ".bashrc", ".claude/", ".ipybox/", ".env", ".env.prod/", "main.py", "src/")
	p, err := Protect(Input{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rel(ws, p.ReadOnly), []string{".bashrc", ".claude", ".git", ".gitattributes"}; !slices.Equal(got, want) {
		t.Errorf("ReadOnly = %q, want %q", got, want)
	}
	if got, want := rel(ws, p.Masks), []string{".env"}; !slices.Equal(got, want) {
		t.Errorf("Masks = %q, want %q", got, want)
	}
	if got, want := rel(ws, p.MaskDirs), []string{".env.prod"}; !slices.Equal(got, want) {
		t.Errorf("MaskDirs = %q, want %q", got, want)
	}
	if len(p.Protected) != 0 || len(p.GitRelative) != 0 {
		t.Errorf("Protected %q, GitRelative %q with no git config", p.Protected, p.GitRelative)
	}
}

// TestProtectRefusesRootLinks: a link at a protected or secret name at the
// root is refused, with the path and who reads it: a read-only mount or a
// mask would land where it points.
func TestProtectRefusesRootLinks(t *testing.T) {
	noHostGit(t)
	for _, name := range []string{".git", ".bashrc", ".env", ".env.local", ".mcp.json"} {
		ws := workspace(t, "target/")
		if err := os.Symlink(filepath.Join(ws, "target"), filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
		_, err := Protect(Input{Workspace: ws})
		if err == nil || !strings.Contains(err.Error(), filepath.Join(ws, name)+" is a symbolic link") {
			t.Errorf("%s as a link: err = %v, want a refusal that names it", name, err)
		}
	}
	// A link at an ordinary name is no concern of the guard.
	ws := workspace(t, "target/")
	if err := os.Symlink("target", filepath.Join(ws, "data")); err != nil {
		t.Fatal(err)
	}
	if _, err := Protect(Input{Workspace: ws}); err != nil {
		t.Errorf("a link at an ordinary name: %v", err)
	}
}

// TestProtectMissingWorkspace: a workspace that cannot be read is an error
// that names it.
func TestProtectMissingWorkspace(t *testing.T) {
	ws := filepath.Join(t.TempDir(), "gone")
	if _, err := Protect(Input{Workspace: ws}); err == nil || !strings.Contains(err.Error(), ws) {
		t.Errorf("err = %v, want one that names %s", err, ws)
	}
}

// TestSecretsBelow: .env files below the root are masked down to
// secretDepth levels, not below it and not inside .ipybox; a link at a
// secret's name below is not masked (a mask would land on its target).
func TestSecretsBelow(t *testing.T) {
	noHostGit(t)
	ws := workspace(t, "a/.env", "a/b/.env.test", "a/b/c/.env", "a/b/c/d/.env", "a/b/c/.env.d/",
		".ipybox/x/.env", "a/notes.env", "a/b/.envrc")
	if err := os.Symlink("/etc/hostname", filepath.Join(ws, "a", "b", ".env.link")); err != nil {
		t.Fatal(err)
	}
	p, err := Protect(Input{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rel(ws, p.Masks), []string{"a/.env", "a/b/.env.test", "a/b/c/.env"}; !slices.Equal(got, want) {
		t.Errorf("Masks = %q, want %q (a/b/c/d/.env is below secretDepth)", got, want)
	}
	if got, want := rel(ws, p.MaskDirs), []string{"a/b/c/.env.d"}; !slices.Equal(got, want) {
		t.Errorf("MaskDirs = %q, want %q", got, want)
	}
}

// TestConfigSecrets: the secret files that server configs name are masked
// when they are in the workspace (a link is resolved to its target), and
// ignored outside it or when they are the workspace itself.
func TestConfigSecrets(t *testing.T) {
	noHostGit(t)
	ws := workspace(t, "keys/token", "certs/", "plain")
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(ws, "plain"), filepath.Join(ws, "alias")); err != nil {
		t.Fatal(err)
	}
	secrets := []string{filepath.Join(ws, "keys", "token"), filepath.Join(ws, "certs"), filepath.Join(ws, "alias"), outside, ws, filepath.Join(ws, "missing")}
	p, err := Protect(Input{Workspace: ws, Secrets: func() []string { return secrets }})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rel(ws, p.Masks), []string{"keys/token", "plain"}; !slices.Equal(got, want) {
		t.Errorf("Masks = %q, want %q", got, want)
	}
	if got, want := rel(ws, p.MaskDirs), []string{"certs"}; !slices.Equal(got, want) {
		t.Errorf("MaskDirs = %q, want %q", got, want)
	}
}

// TestHardLinkedSecret: another name of a masked file, anywhere in the
// workspace, is masked too; a link a masked folder holds is not needed
// twice.
func TestHardLinkedSecret(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("hard links are found on unix only")
	}
	noHostGit(t)
	ws := workspace(t, ".env", "sub/dir/")
	if err := os.Link(filepath.Join(ws, ".env"), filepath.Join(ws, "sub", "dir", "copy")); err != nil {
		t.Fatal(err)
	}
	p, err := Protect(Input{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rel(ws, p.Masks), []string{".env", "sub/dir/copy"}; !slices.Equal(got, want) {
		t.Errorf("Masks = %q, want %q", got, want)
	}
}

// TestHostGitConfig: what the host's global git config names inside the
// workspace is protected (a relative core.hooksPath applies to every
// repository, so it is kept relative), and so is what the config of a
// repository that holds the workspace names inside it, also through a
// .git file.
func TestHostGitConfig(t *testing.T) {
	parent, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(parent, "ws")
	if err := os.MkdirAll(filepath.Join(ws, "tools"), 0o755); err != nil {
		t.Fatal(err)
	}
	global := filepath.Join(t.TempDir(), "gitconfig")
	cfg := "[core]\n\thooksPath = .githooks\n\tattributesFile = " + filepath.Join(ws, "attrs") + "\n[alias]\n\tx = !" + filepath.Join(parent, "elsewhere") + "\n"
	if err := os.WriteFile(global, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GIT_CONFIG_GLOBAL", global)
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	// The parent is a repository whose config names the workspace's
	// tools/fsmonitor (relative to the parent's working tree).
	if err := os.MkdirAll(filepath.Join(parent, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	repo := "[core]\n\tfsmonitor = ws/tools/fsmonitor\n[filter \"x\"]\n\tclean = ./ws/tools/clean --flag\n"
	if err := os.WriteFile(filepath.Join(parent, ".git", "config"), []byte(repo), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := Protect(Input{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rel(ws, p.Protected), []string{"attrs", "tools/clean", "tools/fsmonitor"}; !slices.Equal(got, want) {
		t.Errorf("Protected = %q, want %q", got, want)
	}
	if !slices.Equal(p.GitRelative, []string{".githooks"}) {
		t.Errorf("GitRelative = %q, want [.githooks]", p.GitRelative)
	}

	// A .git file points to the repository's folder elsewhere.
	if err := os.RemoveAll(filepath.Join(parent, ".git")); err != nil {
		t.Fatal(err)
	}
	gitdir := filepath.Join(t.TempDir(), "modules", "p")
	if err := os.MkdirAll(gitdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(gitdir, "config"), []byte("[core]\n\thooksPath = ws/hooks\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(parent, ".git"), []byte("gitdir: "+gitdir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err = Protect(Input{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(rel(ws, p.Protected), "hooks") {
		t.Errorf("Protected = %q, want hooks (named by the repository a .git file points to)", rel(ws, p.Protected))
	}
}

// TestFingerprint: the fingerprint ignores order and changes with any
// list.
func TestFingerprint(t *testing.T) {
	a := &Protection{ReadOnly: []string{"/w/.git", "/w/.bashrc"}, Masks: []string{"/w/.env"}}
	b := &Protection{ReadOnly: []string{"/w/.bashrc", "/w/.git"}, Masks: []string{"/w/.env"}}
	if a.Fingerprint() != b.Fingerprint() {
		t.Error("the fingerprint depends on order")
	}
	seen := map[string]string{a.Fingerprint(): "base"}
	for name, p := range map[string]*Protection{
		"mask":        {ReadOnly: a.ReadOnly, Masks: []string{"/w/.env", "/w/.env.x"}},
		"masks moved": {ReadOnly: a.ReadOnly, MaskDirs: []string{"/w/.env"}},
		"protected":   {ReadOnly: a.ReadOnly, Masks: a.Masks, Protected: []string{"/w/h"}},
		"relative":    {ReadOnly: a.ReadOnly, Masks: a.Masks, GitRelative: []string{"/w/h"}},
	} {
		f := p.Fingerprint()
		if other, ok := seen[f]; ok {
			t.Errorf("%s has the fingerprint of %s", name, other)
		}
		seen[f] = name
	}
}

// TestUnder checks the path test both ways, at the root too.
func TestUnder(t *testing.T) {
	for _, c := range []struct {
		p, dir string
		want   bool
	}{
		{"/w", "/w", true}, {"/w/a", "/w", true}, {"/wx", "/w", false}, {"/", "/w", false},
		{"/a", "/", true}, {"/", "/", true},
	} {
		if got := under(c.p, c.dir); got != c.want {
			t.Errorf("under(%q, %q) = %v", c.p, c.dir, got)
		}
	}
}
