package sandbox

import (
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestUnsafeGitKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, cfg, want string }{
		{"git init", "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n", ""},
		{"clone", "[core]\n\tbare = false\n[remote \"origin\"]\n\turl = https://example.com/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n", ""},
		{"comments and case", "# c\n; c\n[Core]\n\tBare = false\n[user]\n\tname = A\n\temail = a@b\n", ""},
		{"fsmonitor", "[core]\n\tfsmonitor = \"touch x\"\n", "core.fsmonitor"},
		{"hooksPath", "[core]\n\thooksPath = .husky\n", "core.hookspath"},
		{"key on the header line", "[core] fsmonitor = x\n", "core.fsmonitor"},
		{"old subsection syntax", "[filter.x]\n\tclean = sh\n", "filter.*.clean"},
		{"include", "[include]\n\tpath = ../evil\n", "include.path"},
		{"alias", "[alias]\n\tst = !sh -c x\n", "alias.st"},
		{"submodule update command", "[submodule \"m\"]\n\tupdate = !sh\n", "submodule.*.update"},
		{"boolean without value", "[core]\n\tbare\n\tfsmonitor\n", "core.fsmonitor"},
		{"key before any section", "fsmonitor = x\n", `unreadable line "fsmonitor = x"`},
		{"broken header", "[core\n", `unreadable line "[core"`},
		{"continuation hides nothing", "[user]\n\tname = a \\\n\tfsmonitor = x\n", "user.fsmonitor"},
	} {
		if got := unsafeGitKey([]byte(tc.cfg)); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestQuarantineGit: of the repositories that appear while a sandbox runs,
// those whose configuration can run something are renamed out of git's
// reach, and git no longer takes them; plain new ones, and the ones there
// before, are left alone.
func TestQuarantineGit(t *testing.T) {
	t.Parallel()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git")
	}
	ws := t.TempDir()
	mk := func(rel, content string) {
		p := filepath.Join(ws, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitInit := func(dir string) {
		if out, err := exec.Command(git, "init", "-q", filepath.Join(ws, dir)).CombinedOutput(); err != nil {
			t.Fatalf("git init: %v %s", err, out)
		}
	}
	// Before: a repository using husky (core.hooksPath), deep down.
	gitInit("a/b/c/d/husky")
	exec.Command(git, "-C", filepath.Join(ws, "a/b/c/d/husky"), "config", "core.hooksPath", ".husky").Run()
	s := &Sandbox{workspace: ws, log: slog.New(slog.DiscardHandler)}
	s.snapshotGit()
	<-s.git.done
	// Touched by the user during the session: same repository, same danger.
	exec.Command(git, "-C", filepath.Join(ws, "a/b/c/d/husky"), "config", "user.name", "U").Run()
	// While it ran:
	gitInit("plain")                               // a plain new repository
	mk("src/.git/HEAD", "ref: refs/heads/main\n")  // a planted .git with a hook
	mk("src/.git/hooks/pre-commit", "#!/bin/sh\n") //
	os.MkdirAll(filepath.Join(ws, "src/.git/objects"), 0o755)
	os.MkdirAll(filepath.Join(ws, "src/.git/refs"), 0o755)
	mk("lib/.git", "gitdir: ../elsewhere\n")  // a .git file
	mk("bare/HEAD", "ref: refs/heads/main\n") // a bare layout with fsmonitor
	os.MkdirAll(filepath.Join(ws, "bare/objects"), 0o755)
	os.MkdirAll(filepath.Join(ws, "bare/refs"), 0o755)
	mk("bare/config", "[core]\n\tfsmonitor = touch x\n")
	mk("deep/1/2/3/4/.git/config", "[core]\n\tsshCommand = x\n") // deeper than the snapshot
	got := s.quarantineGit()
	want := []string{"bare/HEAD", "deep/1/2/3/4/.git", "lib/.git", "src/.git"}
	if len(got) != len(want) {
		t.Fatalf("quarantined %v, want %v", got, want)
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], filepath.Join(ws, w)+quarantineSuffix+"-") {
			t.Errorf("quarantined %s, want %s%s-…", got[i], w, quarantineSuffix)
		}
	}
	for _, keep := range []string{"plain/.git", "a/b/c/d/husky/.git"} {
		if _, err := os.Lstat(filepath.Join(ws, keep)); err != nil {
			t.Errorf("%s was touched: %v", keep, err)
		}
	}
	// git no longer takes the bare directory as a repository.
	cmd := exec.Command(git, "rev-parse", "--git-dir")
	cmd.Dir = filepath.Join(ws, "bare")
	cmd.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+ws)
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("git still finds a repository in bare/: %s", out)
	}
}
