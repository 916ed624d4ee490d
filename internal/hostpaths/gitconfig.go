package hostpaths

import (
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
	entries, complete := configEntries(cfg)
	for _, e := range entries {
		if e.hasValue {
			out = append(out, namedBy(e.key, e.value, configDir, worktree, home)...)
		}
	}
	return out, complete
}

// configEntry is one key of a config file, as git reads it: the key is
// section[.subsection].name, with the section and the name in lower case.
type configEntry struct {
	key, value string
	hasValue   bool // false for a key alone on its line (a boolean true)
}

// namedBy returns what one key names (see ConfigPaths): none, or one path.
func namedBy(key, val, configDir, worktree, home string) []Named {
	if worktree == "" {
		worktree = configDir
	}
	section, rest, _ := strings.Cut(key, ".")
	i := strings.LastIndexByte(rest, '.')
	name, sub, hasSub := rest[i+1:], "", i >= 0
	if hasSub {
		sub = rest[:i]
	}
	generic := section + "." + name
	if hasSub && sub != "" {
		generic = section + ".*." + name
	}
	if rel, ok := pathKeys[generic]; ok {
		if generic == "core.fsmonitor" && isBool(val) {
			return nil
		}
		return namedPath(key, val, rel, configDir, worktree, home)
	}
	for _, c := range commandKeys {
		if c != generic && c != section+".*" {
			continue
		}
		cmd := strings.TrimPrefix(strings.TrimSpace(val), "!")
		if first := firstWord(cmd); strings.Contains(first, "/") || strings.HasPrefix(first, "~") {
			return namedPath(key, first, false, configDir, worktree, home)
		}
		return nil
	}
	return nil
}

// namedPath makes a config value into the absolute path it names, relative
// to configDir or worktree, or to home for "~". It returns none for a
// value that names no path: empty, "~" without a home, or %(prefix)/
// (git's installation).
func namedPath(key, v string, relToConfig bool, configDir, worktree, home string) []Named {
	v = strings.TrimSpace(v)
	switch {
	case v == "":
		return nil
	case v == "~" || strings.HasPrefix(v, "~/"):
		if home == "" {
			return nil
		}
		v = filepath.Join(home, v[1:])
	case strings.HasPrefix(v, "%(prefix)/"):
		return nil
	case !filepath.IsAbs(v):
		base := worktree
		if relToConfig {
			base = configDir
		}
		v = filepath.Join(base, v)
	}
	return []Named{{Path: filepath.Clean(v), Key: key}}
}

// configEntries reads the keys of a config file the way git does (a
// port of config.c's git_parse_source, get_base_var, get_value and
// parse_value, checked against git by FuzzConfigPathsGit). ok is false
// when git would refuse the file, or when it holds a NUL byte (git reads
// up to one, in a key or a value, where this reader would not agree): the
// keys before are returned.
func configEntries(cfg []byte) (out []configEntry, ok bool) {
	if bytes.IndexByte(cfg, 0) >= 0 {
		return nil, false
	}
	r := &configReader{src: cfg}
	r.skipBOM()
	var base string // "section." or "section.sub." of the last header
	for {
		c := r.next()
		switch {
		case c == '\n':
			if r.eof {
				return out, true
			}
		case gitSpace(c):
		case c == '#' || c == ';':
			r.skipLine()
		case c == '[':
			name, ok := r.sectionName()
			if !ok || name == "" {
				return out, false
			}
			base = name + "."
		case gitAlpha(c):
			e, ok := r.entry(base, c)
			if !ok {
				return out, false
			}
			out = append(out, e)
		default:
			return out, false
		}
	}
}

// configReader reads a config file a byte at a time, as git's
// get_next_char does: CR LF reads as LF, and the end reads as LF with eof
// set.
type configReader struct {
	src []byte
	pos int
	eof bool
}

func (r *configReader) next() byte {
	if r.pos >= len(r.src) {
		r.eof = true
		return '\n'
	}
	c := r.src[r.pos]
	r.pos++
	if c == '\r' && r.pos < len(r.src) && r.src[r.pos] == '\n' {
		r.pos++
		return '\n'
	}
	return c
}

// skipBOM skips a UTF-8 byte order mark at the start. A partial one is
// left to fail, as in git.
func (r *configReader) skipBOM() {
	if bytes.HasPrefix(r.src, []byte("\xef\xbb\xbf")) {
		r.pos = 3
	}
}

// skipLine skips a comment to the end of its line: a backslash there
// continues nothing.
func (r *configReader) skipLine() {
	for r.next() != '\n' {
	}
}

// sectionName reads a header after its "[": "[name]", the legacy
// "[name.sub]" (all lower case) or `[name "sub"]` (the subsection keeps
// its case; a backslash escapes the next byte), and returns "name" or
// "name.sub".
func (r *configReader) sectionName() (string, bool) {
	var b strings.Builder
	for {
		c := r.next()
		switch {
		case r.eof:
			return "", false
		case c == ']':
			return b.String(), true
		case gitSpace(c):
			return r.subsection(&b, c)
		case !gitKeyChar(c) && c != '.':
			return "", false
		}
		b.WriteByte(gitLower(c))
	}
}

// subsection reads `"sub"]` after a section's name and the space c.
func (r *configReader) subsection(b *strings.Builder, c byte) (string, bool) {
	for gitSpace(c) {
		if c == '\n' {
			return "", false
		}
		c = r.next()
	}
	if c != '"' {
		return "", false
	}
	b.WriteByte('.')
	for {
		c := r.next()
		if c == '\n' {
			return "", false
		}
		if c == '"' {
			break
		}
		if c == '\\' {
			if c = r.next(); c == '\n' {
				return "", false
			}
		}
		b.WriteByte(c)
	}
	if r.next() != ']' {
		return "", false
	}
	return b.String(), true
}

// entry reads a key, whose first letter c was read, and its value.
func (r *configReader) entry(base string, c byte) (configEntry, bool) {
	var b strings.Builder
	b.WriteString(base)
	b.WriteByte(gitLower(c))
	for {
		c = r.next()
		if r.eof || !gitKeyChar(c) {
			break
		}
		b.WriteByte(gitLower(c))
	}
	for c == ' ' || c == '\t' {
		c = r.next()
	}
	e := configEntry{key: b.String()}
	if c == '\n' {
		return e, true // a boolean
	}
	if c != '=' {
		return e, false
	}
	v, ok := r.value()
	e.value, e.hasValue = v, true
	return e, ok
}

// value reads a value after its "=", up to its line's end: whitespace
// around it is dropped, but not inside quotes; # and ; start a comment
// outside quotes; \\, \", \n, \t and \b are escapes, and a backslash at
// the end of a line continues the value on the next.
func (r *configReader) value() (string, bool) {
	var b []byte
	quote, comment := false, false
	trim := 0 // when > 0, the length before trailing whitespace
	for {
		c := r.next()
		switch {
		case c == '\n':
			if quote {
				return "", false
			}
			if trim > 0 {
				b = b[:trim]
			}
			return string(b), true
		case comment:
		case gitSpace(c) && !quote:
			if trim == 0 {
				trim = len(b)
			}
			if len(b) > 0 {
				b = append(b, ' ') // a tab or CR inside reads as a space
			}
		case (c == ';' || c == '#') && !quote:
			comment = true
		case c == '\\':
			trim = 0
			esc, ok := gitEscape(r.next())
			if !ok {
				return "", false
			}
			if esc != 0 {
				b = append(b, esc)
			}
		case c == '"':
			trim = 0
			quote = !quote
		default:
			trim = 0
			b = append(b, c)
		}
	}
}

// gitEscape returns what a backslash and c stand for in a value: 0 for a
// line continuation; ok is false for an escape git refuses.
func gitEscape(c byte) (byte, bool) {
	switch c {
	case '\n':
		return 0, true
	case 't':
		return '\t', true
	case 'b':
		return '\b', true
	case 'n':
		return '\n', true
	case '\\', '"':
		return c, true
	}
	return 0, false
}

// gitSpace, gitAlpha, gitKeyChar and gitLower are git's own (ASCII)
// character classes: isspace is only space, tab, LF and CR.
func gitSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
func gitAlpha(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func gitKeyChar(c byte) bool {
	return gitAlpha(c) || '0' <= c && c <= '9' || c == '-'
}
func gitLower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
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
