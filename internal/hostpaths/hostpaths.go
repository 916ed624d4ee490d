// Package hostpaths is the one list of the paths in a workspace that host
// programs run or obey: git's internals and the hooks its repositories
// name, shell start-up files, other agents' and editors' settings, hook
// managers, direnv, package managers' rc files, and ipybox's own state.
//
// The workspace is where kernel code's files meet the host's programs.
// Kernel code may write the workspace, but a file written at one of these
// paths would have a host program run a command later (git runs
// .git/hooks and core.fsmonitor, Claude Code runs the hooks in
// .claude/settings.json, VS Code the tasks of .vscode, direnv the .envrc),
// so every launcher derives its protection from this list: the bwrap
// sandbox's guard refuses to create, change, rename or remove such a path
// at any depth, the Seatbelt profile denies writes to it, the container's
// guard does as bwrap's, and ipybox itself never writes there on anyone's
// behalf (upload_file, download_file).
//
// A name matches a path component at any depth, case-insensitively and
// ignoring what case-insensitive file systems ignore (see Fold), unless its
// entry is Root, which matches only directly below the workspace.
package hostpaths

import (
	"path"
	"strings"
)

// Entry is one path that a host program runs or obeys.
type Entry struct {
	// Pattern is a file or directory name, or a glob of one
	// (path.Match syntax), or two such names joined by "/" for a name
	// inside another (".github/copilot-instructions.md"). Lower case.
	Pattern string
	// Root limits the entry to the workspace root: the name is obeyed
	// only there (ipybox's own state), or only when the workspace is the
	// home directory (~/.ssh, ~/.config).
	Root bool
	// Secret hides the path from kernel code as well (a mask), not only
	// from its writes: it holds values that the host substitutes.
	Secret bool
	// Who says which host program runs or obeys it.
	Who string
}

// Entries is the list. Take care when you remove an entry: each names a
// program that reads the path and then runs something. The floor is the
// union with sandbox-runtime's mandatory deny list (.gitconfig,
// .gitmodules, .bashrc, .bash_profile, .zshrc, .zprofile, .profile,
// .ripgreprc, .mcp.json, .git, .vscode, .idea, .claude/commands,
// .claude/agents); .claude is protected whole here.
var Entries = []Entry{
	// Version control: the repository itself, and what its config names.
	{Pattern: ".git", Who: "git: config (core.fsmonitor, core.hooksPath, filters, aliases) and hooks run on status, commit, checkout"},
	{Pattern: ".gitmodules", Who: "git: submodule URLs and update commands"},
	{Pattern: ".gitattributes", Who: "git: picks the filter, diff and merge drivers that run on checkout, diff and merge"},
	{Pattern: ".gitconfig", Who: "git: the user's global config when the workspace is the home directory"},
	{Pattern: ".lfsconfig", Who: "git-lfs: endpoints and transfer agents"},
	{Pattern: ".hg", Who: "Mercurial: .hg/hgrc hooks run on every command"},
	{Pattern: ".hgrc", Who: "Mercurial: hooks and extensions"},
	{Pattern: ".svn", Who: "Subversion: working-copy metadata"},
	{Pattern: ".jj", Who: "Jujutsu: repository config"},
	{Pattern: ".sl", Who: "Sapling: repository config and hooks"},
	{Pattern: ".bzr", Who: "Bazaar: branch config and hooks"},
	// Hook managers: commands that run at the next git commit.
	{Pattern: ".husky", Who: "husky: git hooks (core.hooksPath points here)"},
	{Pattern: ".githooks", Who: "git: a conventional core.hooksPath folder"},
	{Pattern: ".git-hooks", Who: "git: a conventional core.hooksPath folder"},
	{Pattern: ".pre-commit-config.yaml", Who: "pre-commit: commands its git hook runs"},
	{Pattern: ".pre-commit-hooks.yaml", Who: "pre-commit: hook definitions"},
	{Pattern: "lefthook*.yml", Who: "lefthook: commands its git hooks run"},
	{Pattern: "lefthook*.yaml", Who: "lefthook: commands its git hooks run"},
	{Pattern: ".lefthook*", Who: "lefthook: commands its git hooks run"},
	{Pattern: ".lintstagedrc*", Who: "lint-staged: commands its git hook runs"},
	{Pattern: "lint-staged.config.*", Who: "lint-staged: commands its git hook runs"},
	{Pattern: ".overcommit.yml", Who: "overcommit: commands its git hooks run"},
	{Pattern: ".simple-git-hooks*", Who: "simple-git-hooks: git hook commands"},
	// Shells: start-up files (any depth: a dotfiles repository is linked
	// into the home directory).
	{Pattern: ".bashrc", Who: "bash: runs it at start"},
	{Pattern: ".bash_profile", Who: "bash: runs it at login"},
	{Pattern: ".bash_login", Who: "bash: runs it at login"},
	{Pattern: ".bash_logout", Who: "bash: runs it at logout"},
	{Pattern: ".bash_aliases", Who: "bash: sourced by Debian's .bashrc"},
	{Pattern: ".profile", Who: "sh: runs it at login"},
	{Pattern: ".zshrc", Who: "zsh: runs it at start"},
	{Pattern: ".zshenv", Who: "zsh: runs it at every start"},
	{Pattern: ".zprofile", Who: "zsh: runs it at login"},
	{Pattern: ".zlogin", Who: "zsh: runs it at login"},
	{Pattern: ".zlogout", Who: "zsh: runs it at logout"},
	{Pattern: ".kshrc", Who: "ksh: runs it at start"},
	{Pattern: ".cshrc", Who: "csh: runs it at start"},
	{Pattern: ".tcshrc", Who: "tcsh: runs it at start"},
	{Pattern: ".inputrc", Who: "readline: key bindings, which can run macros in every shell"},
	{Pattern: ".envrc", Who: "direnv: runs it when a shell enters the folder"},
	{Pattern: ".env", Secret: true, Who: "ipybox: ${VAR} values of MCP server configs; direnv's and dotenv's variables"},
	{Pattern: ".env.*", Secret: true, Who: "ipybox and dotenv: variables of an environment"},
	// Other agents: settings that name commands, and instructions they
	// follow.
	{Pattern: ".claude", Who: "Claude Code: settings.json hooks and MCP servers, commands, agents"},
	{Pattern: ".mcp.json", Who: "Claude Code and other MCP clients: the MCP servers they start"},
	{Pattern: "claude.md", Who: "Claude Code: project instructions"},
	{Pattern: "claude.local.md", Who: "Claude Code: local instructions"},
	{Pattern: "agents.md", Who: "Codex, Cursor, Gemini CLI and others: project instructions"},
	{Pattern: "gemini.md", Who: "Gemini CLI: project instructions"},
	{Pattern: ".cursor", Who: "Cursor: mcp.json servers, rules"},
	{Pattern: ".cursorrules", Who: "Cursor: instructions"},
	{Pattern: ".gemini", Who: "Gemini CLI: settings.json MCP servers and tool commands"},
	{Pattern: ".codex", Who: "Codex CLI: config.toml MCP servers and commands"},
	{Pattern: ".windsurf", Who: "Windsurf: workflows and rules"},
	{Pattern: ".windsurfrules", Who: "Windsurf: instructions"},
	{Pattern: ".clinerules", Who: "Cline: instructions"},
	{Pattern: ".roo", Who: "Roo Code: MCP servers and rules"},
	{Pattern: ".roomodes", Who: "Roo Code: modes"},
	{Pattern: ".kiro", Who: "Kiro: MCP settings, hooks and steering"},
	{Pattern: ".amazonq", Who: "Amazon Q: mcp.json servers and rules"},
	{Pattern: ".continue", Who: "Continue: config with MCP servers"},
	{Pattern: ".aider*", Who: "aider: .aider.conf.yml names lint and test commands"},
	{Pattern: ".goosehints", Who: "goose: instructions"},
	{Pattern: ".junie", Who: "Junie: guidelines"},
	{Pattern: ".github/copilot-instructions.md", Who: "GitHub Copilot: instructions"},
	// Editors and IDEs: tasks, launch configurations, per-folder scripts.
	{Pattern: ".vscode", Who: "VS Code: tasks (some run when the folder opens), launch configs, settings that name programs"},
	{Pattern: "*.code-workspace", Who: "VS Code: workspace tasks and settings"},
	{Pattern: ".idea", Who: "JetBrains IDEs: run configurations, external tools"},
	{Pattern: ".fleet", Who: "Fleet: run configurations"},
	{Pattern: ".zed", Who: "Zed: tasks and settings"},
	{Pattern: ".devcontainer", Who: "Dev Containers: initializeCommand runs on the host"},
	{Pattern: ".devcontainer.json", Who: "Dev Containers: initializeCommand runs on the host"},
	{Pattern: ".exrc", Who: "vi and Vim with 'exrc': run it in the folder"},
	{Pattern: ".vimrc", Who: "Vim: runs it at start (home), or with 'exrc'"},
	{Pattern: ".nvimrc", Who: "Neovim with 'exrc'"},
	{Pattern: ".nvim.lua", Who: "Neovim with 'exrc'"},
	{Pattern: ".lvimrc", Who: "Vim's localvimrc plugin"},
	{Pattern: ".dir-locals.el", Who: "Emacs: per-folder variables, some evaluated"},
	{Pattern: ".dir-locals-2.el", Who: "Emacs: per-folder variables, some evaluated"},
	{Pattern: ".gdbinit", Who: "gdb: runs ./.gdbinit where auto-load allows"},
	{Pattern: ".lldbinit", Who: "lldb: runs ./.lldbinit where allowed"},
	{Pattern: ".pdbrc", Who: "pdb: runs ./.pdbrc's commands when debugging starts"},
	{Pattern: ".irbrc", Who: "irb: runs ./.irbrc at start"},
	{Pattern: ".pryrc", Who: "pry: runs ./.pryrc at start"},
	{Pattern: ".rprofile", Who: "R: runs ./.Rprofile at start"},
	{Pattern: ".renviron", Who: "R: reads ./.Renviron at start"},
	{Pattern: "ipython_config.py", Who: "IPython: loads it from the current folder"},
	{Pattern: "ipython_kernel_config.py", Who: "ipykernel: loads it from the current folder (the next session's kernel)"},
	{Pattern: "jupyter_*config.py", Who: "Jupyter Server and Notebook: load it from the current folder"},
	{Pattern: "jupyter_*config.json", Who: "Jupyter Server and Notebook: load it from the current folder"},
	{Pattern: "__pycache__", Who: "Python: runs the bytecode cached there instead of the module's source when their mtime and size match (a sandboxed kernel writes none: PYTHONDONTWRITEBYTECODE)"},
	{Pattern: ".ripgreprc", Who: "ripgrep: options, including --pre commands, when RIPGREP_CONFIG_PATH names it"},
	// Package managers and toolchains: rc files that name programs.
	{Pattern: ".npmrc", Who: "npm: script-shell and node-options run on every npm command"},
	{Pattern: ".yarnrc", Who: "Yarn 1: options for every yarn command"},
	{Pattern: ".yarnrc.yml", Who: "Yarn: yarnPath runs a script on every yarn command"},
	{Pattern: ".pnpmfile.cjs", Who: "pnpm: hooks run on install"},
	{Pattern: ".pnpmfile.mjs", Who: "pnpm: hooks run on install"},
	{Pattern: "bunfig.toml", Who: "Bun: preload scripts"},
	{Pattern: "pip.conf", Who: "pip: index and options (in a virtualenv's folder)"},
	{Pattern: ".pypirc", Who: "twine and setuptools: repository credentials"},
	{Pattern: ".cargo", Who: "Cargo: config.toml runners and rustc wrappers run on build"},
	{Pattern: ".mise.toml", Who: "mise: tasks and hooks run when a shell enters the folder"},
	{Pattern: "mise.toml", Who: "mise: tasks and hooks run when a shell enters the folder"},
	{Pattern: ".mise", Who: "mise: tasks and config"},
	{Pattern: ".tool-versions", Who: "asdf and mise: which plugins and versions run"},
	{Pattern: ".condarc", Who: "conda: channels and options"},
	// The home directory's own, when the workspace is the home.
	{Pattern: ".config", Root: true, Who: "every XDG program's settings (git, fish, systemd user units...)"},
	{Pattern: ".local", Root: true, Who: "~/.local/bin is on PATH; systemd user units"},
	{Pattern: ".ssh", Root: true, Who: "ssh: authorized_keys, config ProxyCommand"},
	{Pattern: ".gnupg", Root: true, Who: "gpg: agent config and keys"},
	{Pattern: ".aws", Root: true, Who: "AWS CLI: credential_process commands"},
	{Pattern: ".kube", Root: true, Who: "kubectl: exec credential plugins"},
	{Pattern: ".docker", Root: true, Who: "docker: credential helpers"},
	{Pattern: ".netrc", Root: true, Who: "curl, git and pip: credentials"},
	{Pattern: ".curlrc", Root: true, Who: "curl: options"},
	{Pattern: ".wgetrc", Root: true, Who: "wget: options"},
	{Pattern: ".tmux.conf", Root: true, Who: "tmux: run-shell commands"},
	// ipybox's own state: the MCP server registry, the shared virtualenv,
	// and the tool modules generated from the registry (at any depth: a
	// folder of the workspace may be another session's workspace).
	{Pattern: ".ipybox", Who: "ipybox: servers.json (the commands the host runs for a tool call; also hidden), the shared virtualenv"},
	{Pattern: "mcptools", Who: "ipybox: tool modules generated by the host and imported by every session's kernel"},
}

// ignorable are the code points that HFS+ ignores in names (the set git
// checks for .git: zero-width joiners, direction marks, the BOM).
func ignorable(r rune) bool {
	return r >= 0x200c && r <= 0x200f || r >= 0x202a && r <= 0x202e || r >= 0x206a && r <= 0x206f || r == 0xfeff
}

// Fold maps a name to the form it is compared in: lower case, without the
// code points that HFS+ ignores, and without the trailing dots and spaces
// that Windows drops, so that ".GIT", ".g\u200cit" and ".git. " are
// ".git" for this list as they are for some file systems. NTFS's short
// name of .git, "git~1", folds to ".git" too.
func Fold(name string) string {
	var b strings.Builder
	for _, r := range name {
		if !ignorable(r) {
			b.WriteRune(r)
		}
	}
	s := strings.ToLower(b.String())
	s = strings.TrimRight(s, ". ")
	if s == "git~1" {
		s = ".git"
	}
	return s
}

// Match reports the entry that protects rel, a slash-separated path
// relative to the workspace or another writable root (Root entries match
// at the top of each: at worst that is stricter than needed). Any
// component may match; an entry of two names matches two consecutive
// components.
func Match(rel string) (Entry, bool) {
	rel = strings.Trim(rel, "/")
	if rel == "" || rel == "." {
		return Entry{}, false
	}
	parts := strings.Split(rel, "/")
	for i := range parts {
		parts[i] = Fold(parts[i])
	}
	for i, p := range parts {
		if e, ok := matchName(p, i == 0); ok {
			return e, true
		}
		if i+1 < len(parts) {
			if e, ok := pairs[p+"/"+parts[i+1]]; ok {
				return e, true
			}
		}
	}
	return Entry{}, false
}

// MatchName reports the entry that protects a name at one level: at the
// workspace root when atRoot is true. Entries of two names do not match
// here; Match does.
func MatchName(name string, atRoot bool) (Entry, bool) {
	return matchName(Fold(name), atRoot)
}

// exact, globs and pairs index Entries by the kind of their pattern.
var exact, pairs = indexEntries()

var globs = func() (out []Entry) {
	for _, e := range Entries {
		if strings.ContainsAny(e.Pattern, "*?[") && !strings.Contains(e.Pattern, "/") {
			out = append(out, e)
		}
	}
	return out
}()

func indexEntries() (exact, pairs map[string]Entry) {
	exact, pairs = map[string]Entry{}, map[string]Entry{}
	for _, e := range Entries {
		switch {
		case strings.Contains(e.Pattern, "/"):
			pairs[e.Pattern] = e
		case !strings.ContainsAny(e.Pattern, "*?["):
			exact[e.Pattern] = e
		}
	}
	return exact, pairs
}

// matchName matches one folded name.
func matchName(f string, atRoot bool) (Entry, bool) {
	if e, ok := exact[f]; ok && (!e.Root || atRoot) {
		return e, true
	}
	for _, e := range globs {
		if e.Root && !atRoot {
			continue
		}
		if ok, _ := path.Match(e.Pattern, f); ok {
			return e, true
		}
	}
	return Entry{}, false
}

// IsSecret reports whether a name (at any depth; at the root when atRoot)
// is hidden from kernel code as well as protected.
func IsSecret(name string, atRoot bool) bool {
	e, ok := MatchName(name, atRoot)
	return ok && e.Secret
}
