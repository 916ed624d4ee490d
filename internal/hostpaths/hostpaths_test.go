package hostpaths

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	tests := []struct {
		rel  string
		want string // the pattern that matches; "" for none
	}{
		{".git", ".git"},
		{".git/hooks/pre-commit", ".git"},
		{"src/deep/er/still/.git/config", ".git"},
		{"a/b/c/d/e/f/g/h/.vscode/tasks.json", ".vscode"},
		{".GIT/config", ".git"},
		{"x/.G\u200cit", ".git"},
		{"x/.git.", ".git"},
		{"x/.git . ", ".git"},
		{"x/GIT~1", ".git"},
		{".gitignore", ""},
		{"git", ""},
		{"src/main.py", ""},
		{".envrc", ".envrc"},
		{"deep/.env", ".env"},
		{"deep/.env.production", ".env.*"},
		{".environment", ""},
		{"CLAUDE.md", "claude.md"},
		{"docs/AGENTS.md", "agents.md"},
		{".github/workflows/ci.yml", ""},
		{".github/copilot-instructions.md", ".github/copilot-instructions.md"},
		{"sub/.github/copilot-instructions.md", ".github/copilot-instructions.md"},
		{"lefthook-local.yml", "lefthook*.yml"},
		{".lintstagedrc.json", ".lintstagedrc*"},
		{"proj.code-workspace", "*.code-workspace"},
		{"jupyter_server_config.py", "jupyter_*config.py"},
		{"mcptools/github/search.py", "mcptools"},
		{"src/mcptools/x.py", "mcptools"},
		{".ipybox/venv", ".ipybox"},
		{"sub/.ipybox", ".ipybox"},
		{".ssh/authorized_keys", ".ssh"},
		{"dotfiles/.ssh", ""},
		{"dotfiles/.bashrc", ".bashrc"},
		{"node_modules/pkg/.git/config", ".git"},
		{".venv/lib/.husky/x", ".husky"},
		{"", ""},
		{".", ""},
	}
	for _, tt := range tests {
		e, ok := Match(tt.rel)
		if got := e.Pattern; ok != (tt.want != "") || got != tt.want {
			t.Errorf("Match(%q) = %q, %v; want %q", tt.rel, got, ok, tt.want)
		}
	}
}

// TestEntries keeps the list honest: every entry says who reads it, its
// pattern is folded and valid, and sandbox-runtime's mandatory deny list
// is covered.
func TestEntries(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range Entries {
		if strings.TrimSpace(e.Who) == "" {
			t.Errorf("%s: Who is empty", e.Pattern)
		}
		if seen[e.Pattern] {
			t.Errorf("%s is listed twice", e.Pattern)
		}
		seen[e.Pattern] = true
		for _, part := range strings.Split(e.Pattern, "/") {
			if Fold(part) != part {
				t.Errorf("%s: pattern is not folded (want %q)", e.Pattern, Fold(part))
			}
			if _, err := filepath.Match(part, ""); err != nil {
				t.Errorf("%s: %v", e.Pattern, err)
			}
		}
	}
	srt := []string{".gitconfig", ".gitmodules", ".bashrc", ".bash_profile", ".zshrc", ".zprofile", ".profile", ".ripgreprc",
		".mcp.json", ".git/hooks/x", ".git/config", ".vscode/x", ".idea/x", ".claude/commands/x", ".claude/agents/x"}
	for _, p := range srt {
		if _, ok := Match(p); !ok {
			t.Errorf("sandbox-runtime protects %s; this list does not", p)
		}
	}
	for _, p := range []string{".cursor/mcp.json", ".gemini/settings.json", ".codex/config.toml", ".pre-commit-config.yaml",
		".envrc", ".npmrc", ".gitattributes", ".gitmodules", ".husky/pre-commit"} {
		if _, ok := Match(p); !ok {
			t.Errorf("the issue names %s; this list does not protect it", p)
		}
	}
}

func TestSecret(t *testing.T) {
	for name, want := range map[string]bool{".env": true, ".env.local": true, ".ENV": true, ".envrc": false, ".git": false, "env": false} {
		if got := IsSecret(name, false); got != want {
			t.Errorf("IsSecret(%q) = %v", name, got)
		}
	}
}

func TestConfigPaths(t *testing.T) {
	cfg := `# a comment
[core]
	repositoryformatversion = 0
	hooksPath = .husky/_   ; husky 9
	fsmonitor = true
	attributesFile = "tools/attrs" # quoted
[core]
	fsmonitor = scripts/watchman.sh
[include]
	path = ../shared.gitconfig
[includeIf "gitdir:~/work/"]
	path = ~/work.gitconfig
[alias]
	st = status
	deploy = "!./scripts/deploy.sh --prod"
	abs = !/usr/local/bin/thing
[filter "lfs"]
	clean = git-lfs clean -- %f
	smudge = ./bin/smudge %f
[diff "pdf"]
	textconv = tools/pdf2txt
[remote "origin"]
	url = https://example.com/x.git
[sendemail]
	smtpserver = /usr/sbin/sendmail
`
	got, complete := ConfigPaths([]byte(cfg), "/ws/.git", "/ws", "/home/u")
	if !complete {
		t.Fatal("incomplete")
	}
	var lines []string
	for _, n := range got {
		lines = append(lines, n.Key+" "+n.Path)
	}
	want := []string{
		"core.hookspath /ws/.husky/_",
		"core.attributesfile /ws/tools/attrs",
		"core.fsmonitor /ws/scripts/watchman.sh",
		"include.path /ws/shared.gitconfig",
		"includeif.gitdir:~/work/.path /home/u/work.gitconfig",
		"alias.deploy /ws/scripts/deploy.sh",
		"alias.abs /usr/local/bin/thing",
		"filter.lfs.smudge /ws/bin/smudge",
		"diff.pdf.textconv /ws/tools/pdf2txt",
		"sendemail.smtpserver /usr/sbin/sendmail",
	}
	if !slices.Equal(lines, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	for _, bad := range []string{"[core\nhooksPath = x\n", "[core]\nhooksPath = \"unterminated\n", "[core]\n\tbad key = 1\n"} {
		if _, ok := ConfigPaths([]byte(bad), "/ws/.git", "/ws", ""); ok {
			t.Errorf("ConfigPaths(%q) claims complete", bad)
		}
	}
}

func TestGitDirPointer(t *testing.T) {
	for content, want := range map[string]string{
		"gitdir: ../.git/modules/x\n": "/ws/.git/modules/x",
		"gitdir: /abs/repo":           "/abs/repo",
		"nonsense":                    "",
		"gitdir:   ":                  "",
	} {
		if got := GitDirPointer([]byte(content), "/ws/sub"); got != want {
			t.Errorf("GitDirPointer(%q) = %q, want %q", content, got, want)
		}
	}
}

func FuzzConfigPaths(f *testing.F) {
	f.Add([]byte("[core]\n\thooksPath = x\n"), "/ws/.git", "/ws")
	f.Add([]byte("[include]\npath = \"a\\\"b\"\n"), "/ws/.git", "")
	f.Fuzz(func(t *testing.T, cfg []byte, dir, wt string) {
		named, _ := ConfigPaths(cfg, filepath.Clean("/"+dir), filepath.Clean("/"+wt), "/home")
		for _, n := range named {
			if !filepath.IsAbs(n.Path) || filepath.Clean(n.Path) != n.Path {
				t.Fatalf("named path %q is not absolute and clean", n.Path)
			}
		}
	})
}

func FuzzMatch(f *testing.F) {
	f.Add("a/.git/b")
	f.Add(".GIT")
	f.Fuzz(func(t *testing.T, rel string) {
		e, ok := Match(rel)
		if ok && e.Who == "" {
			t.Fatal("matched an entry without Who")
		}
		// A path below a protected one is protected too.
		if ok {
			if _, ok2 := Match(rel + "/x"); !ok2 {
				t.Fatalf("%q is protected but %q is not", rel, rel+"/x")
			}
		}
	})
}

// TestConfigPathsEscapes: configs in which git reads a path key that the
// line-based reader before the port of git's parser missed (a comment
// ending in a backslash swallowed the next line; a second header on a
// header's line hid its key), or read with another value. Each must name
// the path.
func TestConfigPathsEscapes(t *testing.T) {
	for cfg, want := range map[string]string{
		"[core]\n# note \\\n\thooksPath = /evil\n":         "core.hookspath /evil",
		"[core]\n; note \\\nhooksPath = /evil\n":           "core.hookspath /evil",
		"[core]\n\tx = 1 # c \\\n\thooksPath = /evil\n":    "core.hookspath /evil",
		"[core][include]path=/evil\n":                      "include.path /evil",
		"[alias][core]hooksPath=/evil\n":                   "core.hookspath /evil",
		"\xef\xbb\xbf[core]\n\thooksPath = /evil\n":        "core.hookspath /evil",
		"[core]\r\n\thooksPath = /ev\\\r\nil\r\n":          "core.hookspath /evil",
		"[core]\n\thooksPath = /a\\\\\\\nb\n":              "core.hookspath /a\\b",
		"[filter \"x\\\"y\"]\n\tclean = ./c\n":             "filter.x\"y.clean /ws/c",
		"[core]\n\tattributesFile = \"  /sp  \"\n":         "core.attributesfile /sp",
		"[core]\n\tfsmonitor = \"./a\tb\"\n\tx = y\n":      "core.fsmonitor /ws/a\tb",
		"[core]\n\thooksPath = ./a\tb\n":                   "core.hookspath /ws/a b",
		"[includeIf \"gitdir:/W/\"]\n\tpath = ../c.cfg\n":  "includeif.gitdir:/W/.path /ws/c.cfg",
		"[core]\n\thooksPath = \"/ev\\\nil\"\n\tx = y\n":   "core.hookspath /evil",
		"[core]\n\thooksPath = /ev\\\n\til # c\n\tx = y\n": "core.hookspath /ev il",
	} {
		got, complete := ConfigPaths([]byte(cfg), "/ws/.git", "/ws", "/home/u")
		if !complete {
			t.Errorf("ConfigPaths(%q) gives up; git reads it", cfg)
		}
		var lines []string
		for _, n := range got {
			lines = append(lines, n.Key+" "+n.Path)
		}
		if !slices.Contains(lines, want) {
			t.Errorf("ConfigPaths(%q) = %q, want %q among them", cfg, lines, want)
		}
	}
}
