//go:build linux

package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ipybox/ipybox/internal/safefs"
)

// Git does not need a directory named .git to find a repository: walking up
// from where it runs, it takes any directory's .git (a directory, or a file
// that points elsewhere), and any directory that is itself laid out as a
// git directory (HEAD, and objects/, refs/ or commondir: a "bare"
// repository). It then reads that repository's config, which can name
// commands (core.fsmonitor runs on every git status). The sandbox
// write-protects the .git directories that exist when it starts, but
// kernel code can create new ones anywhere in the workspace, and a host
// git run in that directory later would run its commands.
//
// No mount can forbid a name, so the sandbox looks when it closes: a git
// repository that appeared (or was replaced) while it ran, and whose
// configuration could run something (any config key outside a short list
// of plain ones, hooks, an include, a commondir, a .git file or link), is
// put out of git's reach: its .git (or HEAD) is renamed with the suffix
// quarantineSuffix, and a warning names it. Repositories the sandbox
// protected, and new ones with a plain configuration (git init, git
// clone), are left alone.

// quarantineSuffix is added to the name of a planted .git or HEAD.
const quarantineSuffix = ".ipybox-quarantine"

// gitScanBudget bounds the directory entries the closing scan visits.
const gitScanBudget = 200_000

// gitMark is a place git would take as a repository.
type gitMark struct {
	path string // the .git entry, or the directory laid out as a git directory
	bare bool   // path is a directory laid out as a git directory
	dev  uint64
	ino  uint64 // of the .git entry, or of the bare directory's HEAD
}

// findGitMarks lists the git repositories below ws, visiting at most
// budget entries; complete is false when the budget ran out. It does not
// enter skipWalk directories or .git directories.
func findGitMarks(ws string, budget int) (marks []gitMark, complete bool) {
	complete = true
	var walk func(dir string, depth int)
	walk = func(dir string, depth int) {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return
		}
		if budget -= len(ents); budget < 0 {
			complete = false
			return
		}
		has := func(name string) bool {
			_, ok := slices.BinarySearchFunc(ents, name, func(e fs.DirEntry, n string) int { return strings.Compare(e.Name(), n) })
			return ok
		}
		if has(".git") {
			if m, ok := markAt(filepath.Join(dir, ".git"), false); ok {
				marks = append(marks, m)
			}
		}
		if has("HEAD") && (has("objects") || has("refs") || has("commondir")) {
			if m, ok := markAt(dir, true); ok {
				marks = append(marks, m)
			}
		}
		if depth >= gitScanDepth {
			return
		}
		for _, e := range ents {
			if e.IsDir() && e.Name() != ".git" && !slices.Contains(skipWalk, e.Name()) {
				walk(filepath.Join(dir, e.Name()), depth+1)
			}
		}
	}
	walk(ws, 1)
	return marks, complete
}

// gitScanDepth bounds how deep the scans look.
const gitScanDepth = 64

func markAt(path string, bare bool) (gitMark, bool) {
	id := path
	if bare {
		id = filepath.Join(path, "HEAD")
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(id, &st); err != nil {
		return gitMark{}, false
	}
	return gitMark{path: path, bare: bare, dev: uint64(st.Dev), ino: st.Ino}, true
}

// gitSnapshot is the workspace's repositories when the sandbox was made,
// before any of its processes ran: each with what made it able to run
// something then ("" for nothing).
type gitSnapshot struct {
	done  chan struct{}
	marks map[gitMark]string
}

// snapshotGit starts taking the snapshot; the first process start waits
// for it (it runs meanwhile with the rest of the set-up).
func (s *Sandbox) snapshotGit() {
	s.git = &gitSnapshot{done: make(chan struct{}), marks: map[gitMark]string{}}
	go func() {
		defer close(s.git.done)
		marks, complete := findGitMarks(s.workspace, gitScanBudget)
		if !complete {
			s.log.Warn("sandbox: the workspace is too large to search whole for git repositories", "entries", gitScanBudget)
		}
		for _, m := range marks {
			s.git.marks[m] = gitDanger(s.workspace, m)
		}
	}()
}

// gitProtect waits for the snapshot and returns the .git entries below
// the workspace root that were there, to be write-protected like those
// protectWorkspace finds near the root.
func (s *Sandbox) gitProtect() []string {
	<-s.git.done
	var out []string
	for m := range s.git.marks {
		if !m.bare && filepath.Dir(m.path) != s.workspace {
			out = append(out, m.path)
		}
	}
	slices.Sort(out)
	return out
}

// quarantineGit puts the repositories that appeared, or changed, while the
// sandbox ran, and whose configuration can run something, out of git's
// reach. It returns what it renamed.
func (s *Sandbox) quarantineGit() []string {
	<-s.git.done
	ws := s.workspace
	marks, complete := findGitMarks(ws, gitScanBudget)
	if !complete {
		s.log.Warn("sandbox: the workspace is too large to search whole for git repositories that kernel code may have created; "+
			"run git in it only with safe.bareRepository=explicit, and check new .git directories before using them", "entries", gitScanBudget)
	}
	var out []string
	for _, m := range marks {
		why := gitDanger(ws, m)
		if before, ok := s.git.marks[m]; why == "" || ok && before == why {
			continue // plain, or as it was
		}
		rel, err := filepath.Rel(ws, m.path)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		from := rel
		if m.bare {
			from = filepath.Join(rel, "HEAD")
		}
		to := from + quarantineSuffix + "-" + time.Now().UTC().Format("20060102T150405")
		if err := safefs.Rename(ws, from, to); err != nil {
			s.log.Error("sandbox: a git repository appeared in the workspace while the sandbox ran, and could not be disabled; do not run git there",
				"path", m.path, "why", why, "err", err)
			continue
		}
		s.log.Warn("sandbox: a git repository appeared in the workspace while the sandbox ran, with a configuration that can run commands; "+
			"disabled by renaming it (check it, and rename it back only if you made it)", "path", filepath.Join(ws, to), "why", why)
		out = append(out, filepath.Join(ws, to))
	}
	return out
}

// gitDanger says why the repository m could run something, or "" when
// its configuration is plain.
func gitDanger(ws string, m gitMark) string {
	gitdir, err := filepath.Rel(ws, m.path)
	if err != nil || strings.HasPrefix(gitdir, "..") {
		return ""
	}
	rel := gitdir
	if !m.bare {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(ws, rel), &st); err != nil {
			return ""
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			return ".git is a file or a link (it points git at another directory)"
		}
	}
	for _, name := range []string{"commondir", "config.worktree"} {
		if _, err := os.Lstat(filepath.Join(ws, gitdir, name)); err == nil {
			return name + " (it points git at other settings)"
		}
	}
	if ents, err := os.ReadDir(filepath.Join(ws, gitdir, "hooks")); err == nil {
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".sample") {
				return "hooks/" + e.Name()
			}
		}
	}
	cfg, err := safefs.ReadFile(ws, filepath.Join(gitdir, "config"), 1<<20)
	if errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	if err != nil {
		return "config: " + err.Error()
	}
	if key := unsafeGitKey(cfg); key != "" {
		return "config: " + key
	}
	return ""
}

// plainGitKeys are the config keys that git init, git clone and everyday
// use write, and that run nothing. Every other key counts as able to run
// something (core.fsmonitor, core.hooksPath, core.sshCommand, filters,
// diff drivers, aliases, include...): the list of those is long and grows.
var plainGitKeys = []string{
	"core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates",
	"core.ignorecase", "core.precomposeunicode", "core.symlinks", "core.autocrlf", "core.eol",
	"remote.*.url", "remote.*.fetch", "remote.*.pushurl", "remote.*.tagopt", "remote.*.prune",
	"branch.*.remote", "branch.*.merge", "branch.*.rebase",
	"user.name", "user.email", "init.defaultbranch",
	"extensions.objectformat", "extensions.worktreeconfig",
	"pull.rebase", "pull.ff", "push.default", "fetch.prune",
	"submodule.*.url", "submodule.*.active",
}

// unsafeGitKey returns the first key of a git config that is not plain (a
// line it cannot read counts), or "".
func unsafeGitKey(cfg []byte) string {
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(cfg))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			end := strings.IndexByte(line, ']')
			if end < 0 {
				return fmt.Sprintf("unreadable line %q", line)
			}
			head := strings.TrimSpace(line[1:end])
			name, _, hasSub := strings.Cut(head, " ")
			section = strings.ToLower(name)
			if hasSub || strings.Contains(section, ".") { // [remote "origin"], [remote.origin]
				section = strings.SplitN(section, ".", 2)[0] + ".*"
			}
			line = strings.TrimSpace(line[end+1:])
			if line == "" || line[0] == '#' || line[0] == ';' {
				continue
			}
		}
		key, _, _ := strings.Cut(line, "=")
		key = strings.ToLower(strings.TrimSpace(key))
		if section == "" || key == "" || strings.ContainsAny(key, " \t\"\\") {
			return fmt.Sprintf("unreadable line %q", line)
		}
		full := section + "." + key
		if !slices.Contains(plainGitKeys, full) {
			return full
		}
	}
	if sc.Err() != nil {
		return "unreadable: " + sc.Err().Error()
	}
	return ""
}
