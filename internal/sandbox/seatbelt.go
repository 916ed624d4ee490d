package sandbox

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The macOS sandbox is what Anthropic's sandbox-runtime (srt) does there:
// the process runs under sandbox-exec with a Seatbelt profile generated
// from the same srt-format Config as the Linux sandbox. A profile is
// written in SBPL, a Scheme dialect in which, for one operation, the last
// rule that matches decides; so the profile denies by default, allows what
// a Python process needs, then lists the policy's allows and finally its
// denies, which win.
//
// seatbeltProfile is a pure function of a seatbeltPolicy, golden-tested on
// every system (testdata/seatbelt/). Every path and pattern enters the
// profile as an SBPL string literal through sbString, which escapes '"'
// and '\' and refuses control characters and invalid UTF-8, so a path can
// never end its string and add a rule of its own.

// seatbeltPolicy is what a profile is made from. Every path is absolute
// and clean, and already resolved to the form Seatbelt matches (macOS
// checks the real path: /private/tmp, not /tmp) by the caller, which must
// never resolve a link inside a directory the sandbox can write.
type seatbeltPolicy struct {
	// Workspace is writable, but for the protected names below it.
	Workspace string
	// Writable lists other writable directories: the kernel's socket
	// directory, the private TMPDIR, allowWrite.
	Writable []string
	// HideHome lists directories whose contents are unreadable (the
	// user's home in the minimal root mode), except the ReadOnly and
	// writable paths under them. Their metadata stays readable, so that
	// the path to the workspace can be walked.
	HideHome []string
	// ReadOnly lists paths readable even under HideHome: the Python
	// prefix, extraRead.
	ReadOnly []string
	// DenyRead and DenyWrite are absolute paths or globs (*, ?, [...] and
	// ** as a path element). Every other path is taken literally.
	DenyRead, DenyWrite []string
	// Sockets lists unix sockets, or directories of them, that the process
	// may bind, accept on and connect to: the kernel's ipc sockets and the
	// tool server's socket.
	Sockets []string
	// ProxyPort is the egress proxy's TCP port on the loopback interface,
	// the only network the process may reach. Zero means no network.
	ProxyPort int
}

// seatbeltProfile returns the SBPL profile for p, or an error naming a path
// that cannot be written safely into one.
func seatbeltProfile(p *seatbeltPolicy) (string, error) {
	var b strings.Builder
	var err error
	// rule writes "(verb ops (filter "arg"))" for one path, recording the
	// first error. pattern writes the rule for a path that may be a glob,
	// whose filter is then a regex; a path given to rule is always taken
	// literally, glob characters and all.
	rule := func(verb, ops, filter, arg string) {
		if err != nil {
			return
		}
		var lit string
		if lit, err = sbString(arg); err != nil {
			return
		}
		fmt.Fprintf(&b, "(%s %s (%s %s))\n", verb, ops, filter, lit)
	}
	pattern := func(verb, ops, arg string) {
		if err != nil {
			return
		}
		filter := "subpath"
		if hasMeta(arg) {
			var re string
			if re, err = globRegex(arg); err != nil {
				return
			}
			filter, arg = "regex", re
		}
		rule(verb, ops, filter, arg)
	}
	for i, list := range [][]string{p.DenyRead, p.DenyWrite, {p.Workspace}, p.Writable, p.HideHome, p.ReadOnly, p.Sockets} {
		for _, a := range list {
			// Globs (the deny lists, i < 2) may hold "**", which Clean keeps.
			if !path.IsAbs(a) || path.Clean(a) != a && (i >= 2 || !hasMeta(a)) {
				return "", fmt.Errorf("sandbox profile: path %q is not absolute and clean", a)
			}
		}
	}
	if p.ProxyPort < 0 || p.ProxyPort > 65535 {
		return "", fmt.Errorf("sandbox profile: proxy port %d out of range", p.ProxyPort)
	}

	b.WriteString(seatbeltBase)

	b.WriteString("\n; Network: the egress proxy on loopback, and the listed unix sockets.\n")
	if p.ProxyPort > 0 {
		fmt.Fprintf(&b, "(allow network-outbound (remote ip \"localhost:%s\"))\n", strconv.Itoa(p.ProxyPort))
	}
	for _, s := range p.Sockets {
		rule("allow", "network*", "subpath", s)
	}

	b.WriteString("\n; Reading: the system, read-only.\n(allow file-read*)\n")
	for _, h := range p.HideHome {
		rule("deny", "file-read-data file-read-xattr", "subpath", h)
	}
	for _, r := range p.ReadOnly {
		rule("allow", "file-read*", "subpath", r)
	}

	b.WriteString("\n; Writing: the workspace and the writable directories.\n")
	for _, w := range append([]string{p.Workspace}, p.Writable...) {
		rule("allow", "file-read* file-write*", "subpath", w)
	}

	b.WriteString("\n; Denied reads, then denied writes: they win over every allow above.\n")
	for _, d := range p.DenyRead {
		pattern("deny", "file-read*", d)
	}
	for _, d := range p.DenyWrite {
		pattern("deny", "file-write*", d)
	}

	// A denied path must not be moved away, nor any directory above it
	// (a rename of the parent would take the path out from under its
	// rule), as srt does.
	b.WriteString("\n; No renaming a denied path or a directory above it.\n")
	var ancestors []string
	for _, d := range slices.Concat(p.DenyRead, p.DenyWrite) {
		pattern("deny", "file-write-unlink", d)
		dir := d
		if hasMeta(dir) {
			dir = staticPrefix(dir)
		}
		for dir = path.Dir(dir); dir != "/" && dir != "."; dir = path.Dir(dir) {
			ancestors = append(ancestors, dir)
		}
	}
	slices.Sort(ancestors)
	for _, a := range slices.Compact(ancestors) {
		rule("deny", "file-write-unlink", "literal", a)
	}
	if err != nil {
		return "", err
	}
	return b.String(), nil
}

// seatbeltBase is the start of every profile: deny by default, and the
// operations a Python process and its children need, following the shape
// of srt's macOS profile: processes and signals within the sandbox, the
// system services libc and Python's standard library look up, POSIX shared
// memory and semaphores (multiprocessing), sysctls, and the harmless
// devices.
const seatbeltBase = `(version 1)
(deny default)

; Processes: run programs, fork, and signal or inspect only processes of
; this sandbox.
(allow process-exec)
(allow process-fork)
(allow process-info* (target same-sandbox))
(allow signal (target same-sandbox))
(allow mach-priv-task-port (target same-sandbox))

; System services that libc and Python look up (users and groups, logging,
; temporary directories, certificates, fonts for matplotlib).
(allow mach-lookup
  (global-name "com.apple.bsd.dirhelper")
  (global-name "com.apple.system.opendirectoryd.libinfo")
  (global-name "com.apple.system.opendirectoryd.membership")
  (global-name "com.apple.system.logger")
  (global-name "com.apple.logd")
  (global-name "com.apple.system.notification_center")
  (global-name "com.apple.trustd.agent")
  (global-name "com.apple.SecurityServer")
  (global-name "com.apple.fonts")
  (global-name "com.apple.FontObjectsServer"))
(allow user-preference-read)
(allow ipc-posix-shm)
(allow ipc-posix-sem)
(allow sysctl-read)

; No file made here may carry a setuid or setgid bit.
(deny file-write-setugid)

; Devices.
(allow file-read* file-write-data file-ioctl
  (literal "/dev/null")
  (literal "/dev/zero")
  (literal "/dev/random")
  (literal "/dev/urandom")
  (literal "/dev/tty"))
`

// sbString returns s as an SBPL string literal. SBPL reads strings the way
// its TinyScheme parent does: a backslash escapes the next character. Only
// '"' and '\' are escaped; a control character (a newline among them) or
// invalid UTF-8 is refused rather than escaped, because it names no path
// anyone needs and its escapes are the least documented part of the
// syntax.
func sbString(s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("sandbox profile: path %q is not valid UTF-8; Seatbelt cannot name it safely", s)
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r < 0x20 || r == 0x7f:
			return "", fmt.Errorf("sandbox profile: path %q holds a control character; Seatbelt cannot name it safely, rename it", s)
		case r == '"' || r == '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('"')
	return b.String(), nil
}

// globRegex translates an absolute glob into the regular expression
// Seatbelt's (regex ...) filter matches, anchored at both ends: "*" is any
// run of characters but "/", "?" one such character, "[...]" a class,
// "**" as a whole path element any number of directories (a trailing
// "/**" the directory and everything under it). Every other regex
// character is escaped.
func globRegex(glob string) (string, error) {
	var b strings.Builder
	b.WriteByte('^')
	for i := 0; i < len(glob); i++ {
		c := glob[i]
		switch {
		case strings.HasPrefix(glob[i:], "/**/"):
			b.WriteString("/(.*/)?")
			i += 3
		case strings.HasPrefix(glob[i:], "/**") && i+3 == len(glob):
			b.WriteString("(/.*)?")
			i += 2
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case c == '[':
			end := strings.IndexByte(glob[i+1:], ']')
			if end < 0 {
				b.WriteString(`\[`)
				continue
			}
			class := glob[i+1 : i+1+end]
			b.WriteByte('[')
			if strings.HasPrefix(class, "!") {
				b.WriteByte('^')
				class = class[1:]
			}
			for _, r := range class {
				if r == '\\' || r == '[' || r == '^' {
					b.WriteByte('\\')
				}
				b.WriteRune(r)
			}
			b.WriteByte(']')
			i += end + 1
		case strings.IndexByte(`.^$+{}()|\]`, c) >= 0:
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('$')
	return b.String(), nil
}

// staticPrefix is the part of a glob before its first glob character, cut
// back to a whole directory.
func staticPrefix(glob string) string {
	i := strings.IndexAny(glob, "*?[")
	if i < 0 {
		return glob
	}
	return strings.TrimSuffix(glob[:strings.LastIndexByte(glob[:i], '/')+1], "/")
}
