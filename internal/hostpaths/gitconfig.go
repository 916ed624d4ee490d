package hostpaths

import (
	"bufio"
	"bytes"
	"path/filepath"
	"strings"
)

// Named is a path that a git config names: git reads it as more config,
// or runs what is in it.
type Named struct {
	Path string // absolute and clean
	Key  string // the config key that names it (core.hookspath...)
}

// pathKeys are the keys whose value is a path that git reads or whose
// contents it runs, and what a relative value is relative to.
var pathKeys = map[string]bool{ // true: relative to the config's folder; false: to the working tree
	"core.hookspath":       false,
	"core.attributesfile":  false,
	"core.fsmonitor":       false, // a hook command, unless a boolean
	"include.path":         true,
	"includeif.*.path":     true,
	"core.excludesfile":    false,
	"blame.ignorerevsfile": false,
}

// commandKeys are the keys whose value is a command line: its first word,
// when it is a relative or absolute path, names a program git runs.
var commandKeys = []string{
	"core.sshcommand", "core.editor", "core.pager", "core.askpass", "sequence.editor",
	"diff.*.command", "diff.*.textconv", "diff.external", "filter.*.clean", "filter.*.smudge",
	"filter.*.process", "merge.*.driver", "alias.*", "credential.helper", "credential.*.helper",
	"gpg.program", "gpg.*.program", "pager.*", "uploadpack.packobjectshook", "core.gitproxy",
	"protocol.*.allow", "remote.*.receivepack", "remote.*.uploadpack", "difftool.*.cmd",
	"mergetool.*.cmd", "web.browser", "browser.*.cmd", "sendemail.smtpserver",
}

// ConfigPaths lists the paths a git config file names (core.hooksPath,
// include.path, includeIf.*.path, core.fsmonitor, core.attributesFile, and
// the programs of command keys such as alias.* or filter.*.clean that are
// given by path). configDir is the folder of the config file, worktree the
// repository's working tree ("" for a bare one: then relative hook paths
// are relative to configDir), home the user's home for "~". A line it
// cannot read ends the reading: what was read so far is returned, and
// complete is false (callers treat an unreadable config as naming
// everything below the worktree).
func ConfigPaths(cfg []byte, configDir, worktree, home string) (out []Named, complete bool) {
	if worktree == "" {
		worktree = configDir
	}
	add := func(key, v string, relToConfig bool) {
		v = strings.TrimSpace(v)
		switch {
		case v == "":
			return
		case v == "~" || strings.HasPrefix(v, "~/"):
			if home == "" {
				return
			}
			v = filepath.Join(home, v[1:])
		case strings.HasPrefix(v, "%(prefix)/"):
			return // relative to git's installation
		case !filepath.IsAbs(v):
			base := worktree
			if relToConfig {
				base = configDir
			}
			v = filepath.Join(base, v)
		}
		out = append(out, Named{Path: filepath.Clean(v), Key: key})
	}
	complete = true
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(cfg))
	sc.Buffer(nil, 1<<20)
	var pending string // a value continued with a trailing backslash
	for sc.Scan() {
		line := sc.Text()
		if pending != "" {
			line = pending + line
			pending = ""
		}
		if strings.HasSuffix(line, `\`) && !strings.HasSuffix(line, `\\`) {
			pending = strings.TrimSuffix(line, `\`)
			continue
		}
		t := strings.TrimSpace(line)
		if t == "" || t[0] == '#' || t[0] == ';' {
			continue
		}
		if t[0] == '[' {
			head, rest, ok := parseSection(t)
			if !ok {
				return out, false
			}
			section = head
			t = strings.TrimSpace(rest)
			if t == "" || t[0] == '#' || t[0] == ';' {
				continue
			}
		}
		k, v, hasValue := strings.Cut(t, "=")
		k = strings.ToLower(strings.TrimSpace(k))
		if section == "" || k == "" || strings.ContainsAny(k, " \t\"\\") {
			return out, false
		}
		if !hasValue {
			continue // a boolean
		}
		val, ok := parseValue(v)
		if !ok {
			return out, false
		}
		key := strings.Replace(section, "\x00", ".", 1) + "." + k
		generic := genericKey(section, k)
		if rel, ok := pathKeys[generic]; ok {
			if generic == "core.fsmonitor" && isBool(val) {
				continue
			}
			add(key, val, rel)
			continue
		}
		name, _, _ := strings.Cut(section, "\x00")
		for _, c := range commandKeys {
			if c != generic && c != name+".*" {
				continue
			}
			cmd := strings.TrimPrefix(strings.TrimSpace(val), "!")
			first := firstWord(cmd)
			if strings.Contains(first, "/") || strings.HasPrefix(first, "~") {
				add(key, first, false)
			}
		}
	}
	if sc.Err() != nil {
		return out, false
	}
	return out, complete
}

// genericKey writes a key with its subsection replaced by "*"
// (section.sub.key -> section.*.key), lower case.
func genericKey(section, key string) string {
	name, sub, ok := strings.Cut(section, "\x00")
	if !ok || sub == "" {
		return name + "." + key
	}
	return name + ".*." + key
}

// parseSection reads "[name]", "[name \"sub\"]" or "[name.sub]" and
// returns the section as "name" or "name\x00sub" (name lower case).
func parseSection(t string) (head, rest string, ok bool) {
	end := strings.IndexByte(t, ']')
	if end < 0 {
		return "", "", false
	}
	inner := strings.TrimSpace(t[1:end])
	rest = t[end+1:]
	if i := strings.IndexByte(inner, '"'); i >= 0 {
		name := strings.ToLower(strings.TrimSpace(inner[:i]))
		sub := inner[i:]
		if len(sub) < 2 || sub[len(sub)-1] != '"' {
			return "", "", false
		}
		return name + "\x00" + sub[1:len(sub)-1], rest, name != ""
	}
	name, sub, dotted := strings.Cut(inner, ".")
	name = strings.ToLower(name)
	if dotted {
		return name + "\x00" + strings.ToLower(sub), rest, name != ""
	}
	return name, rest, name != ""
}

// parseValue unquotes a git config value and drops a trailing comment.
func parseValue(v string) (string, bool) {
	var b strings.Builder
	quoted := false
	v = strings.TrimLeft(v, " \t")
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '"':
			quoted = !quoted
		case c == '\\':
			if i+1 >= len(v) {
				return "", false
			}
			i++
			switch v[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'b':
				b.WriteByte('\b')
			case '"', '\\':
				b.WriteByte(v[i])
			default:
				return "", false
			}
		case (c == '#' || c == ';') && !quoted:
			return strings.TrimRight(b.String(), " \t"), true
		default:
			b.WriteByte(c)
		}
	}
	if quoted {
		return "", false
	}
	return strings.TrimRight(b.String(), " \t"), true
}

func isBool(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "false", "yes", "no", "on", "off", "1", "0", "":
		return true
	}
	return false
}

// firstWord returns the first shell word of a command line (quotes
// removed, no expansion).
func firstWord(cmd string) string {
	cmd = strings.TrimSpace(cmd)
	if cmd == "" {
		return ""
	}
	if q := cmd[0]; q == '\'' || q == '"' {
		if end := strings.IndexByte(cmd[1:], q); end >= 0 {
			return cmd[1 : 1+end]
		}
		return cmd[1:]
	}
	if i := strings.IndexAny(cmd, " \t"); i >= 0 {
		return cmd[:i]
	}
	return cmd
}

// GitDirPointer parses a .git file ("gitdir: PATH") and returns the
// repository folder it names, absolute (relative to dir, the folder that
// holds the .git file), or "".
func GitDirPointer(content []byte, dir string) string {
	line, _, _ := bytes.Cut(content, []byte("\n"))
	rest, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("gitdir:"))
	if !ok {
		return ""
	}
	p := strings.TrimSpace(string(rest))
	if p == "" {
		return ""
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return filepath.Clean(p)
}

// BareLayout reports whether a folder that holds these names would be
// taken by git for a repository (HEAD with objects/, refs/ or commondir):
// git runs the config and hooks of any folder laid out like that.
func BareLayout(has func(name string) bool) bool {
	return has("HEAD") && (has("objects") || has("refs") || has("commondir"))
}

// BareLayoutName reports whether creating name in a folder could complete
// a bare repository's layout there (see BareLayout).
func BareLayoutName(name string) bool {
	switch name {
	case "HEAD", "objects", "refs", "commondir":
		return true
	}
	return false
}
