package policy

import (
	"net/url"
	"path"
	"slices"
	"strings"
)

// A string argument or a shell word is text to a glob, but a tool that
// opens it, and the kernel that chose it, read it as a path: //etc/passwd,
// /./etc/passwd, /etc/passwd/ and /x/../etc/passwd all name /etc/passwd.
// So a deny or ask rule matches a value by its text or by each cleaned
// spelling of it (slashes collapsed, . and .. segments resolved, a
// trailing / dropped, \ read as / as Windows does), and an allow rule,
// which can only widen what runs, never matches a value with a ..
// segment (through a link, .. is not even what path.Clean says). Since
// deny and ask are decided before allow, no allow rule lets through a
// spelling that a deny rule would have refused once cleaned.

// pathForms returns the cleaned spellings of s that differ from s: none
// for a value that is no path (no / or \). A file: URL of this host
// (file:///etc/passwd, file://localhost/etc/%70asswd) is also its path,
// which servers that take URLs open.
func pathForms(s string) []string {
	var out []string
	add := func(c string) {
		if c != s && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	if strings.Contains(s, "/") {
		add(path.Clean(s))
	}
	if strings.Contains(s, `\`) {
		add(path.Clean(strings.ReplaceAll(s, `\`, "/")))
	}
	if len(s) > 5 && strings.EqualFold(s[:5], "file:") {
		if u, err := url.Parse(s); err == nil && (u.Host == "" || strings.EqualFold(u.Host, "localhost")) && u.Path != "" {
			add(u.Path)
			add(path.Clean(u.Path))
		}
	}
	for _, c := range append([]string{s}, out...) {
		if a := aliasPath(c); a != "" {
			add(a)
		}
	}
	return out
}

// aliasPath returns the path that s names through an alias every Linux
// process has, or "": a file URL (file:///etc/passwd), and the root
// folder as a process sees it (/proc/self/root/etc/passwd,
// /proc/1/root/..., any number of times).
func aliasPath(s string) string {
	got := ""
	for {
		switch {
		case strings.HasPrefix(s, "file:///"):
			s = s[len("file://"):]
		case strings.HasPrefix(s, "file:/") && !strings.HasPrefix(s, "file://"):
			s = s[len("file:"):]
		case strings.HasPrefix(s, "/proc/"):
			c := path.Clean(s)
			parts := strings.SplitN(c, "/", 5) // "", proc, pid, root, rest
			if len(parts) < 4 || parts[3] != "root" {
				return got
			}
			s = "/"
			if len(parts) == 5 {
				s += parts[4]
			}
		default:
			return got
		}
		s = path.Clean(s)
		got = s
	}
}

// climbs reports whether a cleaned relative path leaves the folder it is
// relative to: ../x names a path that only the server's current folder
// decides, /etc/passwd among them.
func climbs(cleaned string) bool {
	return cleaned == ".." || strings.HasPrefix(cleaned, "../")
}

// denyGlobMatch matches a deny or ask rule's glob against s: yes by the
// text or a cleaned spelling, maybe when s climbs out of an unknown
// folder and the glob names absolute paths, else no.
func denyGlobMatch(glob, s string) match {
	if globMatch(glob, s) {
		return yes
	}
	forms := pathForms(s)
	for _, c := range forms {
		if globMatch(glob, c) {
			return yes
		}
	}
	if strings.HasPrefix(glob, "/") || strings.HasPrefix(glob, `\`) {
		for _, c := range forms {
			if climbs(c) {
				return maybe
			}
		}
		if climbs(s) {
			return maybe
		}
	}
	return no
}

const climbNote = "a relative path climbs (..) out of a folder that only the server knows, so it may name any path"
