package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/ipybox/ipybox/internal/egress"
	"github.com/ipybox/ipybox/internal/jsonerr"
)

// RootMode selects how much of the host's file system the sandbox sees.
type RootMode string

const (
	// RootMinimal shows /usr, /etc (without its secrets), the /bin, /lib,
	// /lib64 and /sbin links, and the Python prefix, all read-only. It is the
	// default.
	RootMinimal RootMode = "minimal"
	// RootHost shows the whole host file system read-only (the model of
	// Anthropic's sandbox-runtime), except denyRead paths, the secrets under
	// /etc, and the host's /tmp, /var/tmp and /run, which are replaced by
	// private, empty directories.
	RootHost RootMode = "host"
)

// Config is the sandbox policy. It reads the JSON settings format of
// Anthropic's sandbox-runtime (srt) unchanged, plus a few ipybox extensions.
//
// Paths may start with "~" (the host user's home directory) and may be
// relative (to the workspace). They may contain globs, including "**" for
// any number of directories; globs are expanded each time a process starts,
// never dropped.
//
// Whatever the Config says, the workspace and the run directory are
// writable, and these paths in the workspace are write-protected: .env and
// .env.*, the shell start-up files (.bashrc, .profile, .zshrc…), .gitconfig,
// .git/hooks and .git/config, and the whole .ipybox directory (the MCP
// server registry) except .ipybox/venv.
type Config struct {
	Filesystem FilesystemConfig `json:"filesystem"`
	Network    NetworkConfig    `json:"network"`

	// RootMode is "minimal" (the default when empty) or "host".
	RootMode RootMode `json:"rootMode,omitempty"`
	// ExtraRead lists host paths made visible read-only (for example a
	// package an MCP server needs).
	ExtraRead []string `json:"extraRead,omitempty"`
	// Landlock adds a Landlock ruleset on top of the mount layout when the
	// running kernel supports it (best effort: it is skipped, with a log
	// line, where Landlock is unavailable).
	Landlock bool `json:"landlock,omitempty"`
	// BlockUnixSockets limits unix domain sockets. Processes started with
	// Command cannot create AF_UNIX sockets at all (seccomp; socketpair
	// still works). Kernels started with Start need AF_UNIX for ZeroMQ's
	// ipc transport, so for them only connecting to path sockets outside
	// the run directory is refused, with Landlock, on kernels that support
	// it (Landlock ABI 9); elsewhere only the mount layout limits which
	// sockets exist. Abstract sockets of the host are never reachable: the
	// network namespace isolates them.
	BlockUnixSockets bool `json:"blockUnixSockets,omitempty"`
	// Limits bounds the memory and the number of processes of every
	// sandboxed process (an ipybox extension). The zero value means the
	// defaults, which are not unlimited.
	Limits Limits `json:"limits,omitempty"`

	// Ignored lists the keys of the settings file that have no effect here:
	// srt keys that are meaningless on Linux (network.allowLocalBinding,
	// allowPty, enableWeakerNestedSandbox…) and unknown keys, as dotted
	// paths. New logs them.
	Ignored []string `json:"-"`
}

// FilesystemConfig is srt's "filesystem" object.
type FilesystemConfig struct {
	// DenyRead lists paths that are masked: a file reads as permission
	// denied, a directory as an empty, unlistable one.
	DenyRead []string `json:"denyRead,omitempty"`
	// AllowWrite lists paths, besides the workspace, that are writable.
	// "/tmp" needs no entry: the sandbox always has a private, writable /tmp.
	AllowWrite []string `json:"allowWrite,omitempty"`
	// DenyWrite lists paths inside writable areas that stay read-only.
	DenyWrite []string `json:"denyWrite,omitempty"`
}

// NetworkConfig is srt's "network" object.
//
// Without allowed domains the sandbox has no network at all. With them,
// HTTP and HTTPS leave only through the egress proxy, which applies the
// rules: a name in DeniedDomains is refused first; then a name must equal
// an AllowedDomains entry or match a "*.suffix" entry (which does not match
// the bare suffix). IP literals are refused unless listed, and a name that
// resolves only to loopback, private or link-local addresses is refused.
// An entry may end in ":port" to apply to that port only.
type NetworkConfig struct {
	AllowedDomains []string `json:"allowedDomains,omitempty"`
	DeniedDomains  []string `json:"deniedDomains,omitempty"`
}

// The default limits of a sandboxed process.
const (
	// DefaultMemory is the default Limits.Memory: 2 GiB.
	DefaultMemory int64 = 2 << 30
	// DefaultPids is the default Limits.Pids.
	DefaultPids = 512
	// DefaultFileSize is the default Limits.FileSize: 4 GiB.
	DefaultFileSize int64 = 4 << 30
)

// Limits bounds the resources of sandboxed processes. They are resource
// limits (setrlimit) set on the program before it runs, so that it and
// everything it starts inherit them; they cannot be raised from inside.
// (cgroup v2 would bound the sandbox as a whole; it is not used, because
// it can be delegated to an unprivileged process only on some hosts.)
type Limits struct {
	// Memory is the most memory, in bytes, that each process may map for
	// data: its heap, anonymous mappings and thread stacks (RLIMIT_DATA).
	// An allocation beyond it fails (Python raises MemoryError). Zero
	// means DefaultMemory; a negative value means no limit.
	Memory int64 `json:"memory,omitempty"`
	// Pids is the most processes and threads that the sandbox's processes
	// may run at once (RLIMIT_NPROC, counted in the sandbox's own user
	// namespace, so other sandboxes and the host do not count). A fork
	// beyond it fails with EAGAIN. Zero means DefaultPids; a negative
	// value means no limit.
	Pids int `json:"pids,omitempty"`
	// FileSize is the largest file, in bytes, that a process may write or
	// allocate (RLIMIT_FSIZE): a write beyond it fails with EFBIG. The
	// workspace is the host's disk, and one fallocate would otherwise take
	// all of it at once. Without quotas the total a kernel writes is not
	// bounded, only each file. Zero means DefaultFileSize; a negative
	// value means no limit.
	FileSize int64 `json:"fileSize,omitempty"`
}

// fileSize returns the file size limit in force (0: none).
func (l Limits) fileSize() int64 {
	switch {
	case l.FileSize == 0:
		return DefaultFileSize
	case l.FileSize < 0:
		return 0
	}
	return l.FileSize
}

// memory returns the memory limit in force (0: none).
func (l Limits) memory() int64 {
	switch {
	case l.Memory == 0:
		return DefaultMemory
	case l.Memory < 0:
		return 0
	}
	return l.Memory
}

// pids returns the process limit in force (0: none).
func (l Limits) pids() int {
	switch {
	case l.Pids == 0:
		return DefaultPids
	case l.Pids < 0:
		return 0
	}
	return l.Pids
}

// String describes the limits in force, for logs and doctor.
func (l Limits) String() string {
	m, p, f := "unlimited", "unlimited", "unlimited"
	if v := l.memory(); v > 0 {
		m = FormatSize(v)
	}
	if v := l.pids(); v > 0 {
		p = strconv.Itoa(v)
	}
	if v := l.fileSize(); v > 0 {
		f = FormatSize(v)
	}
	return fmt.Sprintf("memory %s per process (RLIMIT_DATA), %s processes and threads (RLIMIT_NPROC), files up to %s (RLIMIT_FSIZE)", m, p, f)
}

// minMemory is the smallest memory limit accepted: below it Python cannot
// start, and the error would be an obscure one.
const minMemory = 64 << 20

// ParseSize reads a memory size: a number of bytes, or a number with a
// unit (k, m, g, t, optionally followed by "b", "ib" or "iB"; all binary,
// so "2g" and "2GiB" are both 2×1024³), or "unlimited" (-1).
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "unlimited" || t == "none" {
		return -1, nil
	}
	t = strings.TrimSuffix(strings.TrimSuffix(t, "b"), "i") // "gib", "gb" -> "g"
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult = 1 << 10
		case 'm':
			mult = 1 << 20
		case 'g':
			mult = 1 << 30
		case 't':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:n-1]
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || !(f > 0) || f*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("size %q: want a positive number of bytes, optionally with a unit (512m, 2g, 4GiB), or \"unlimited\"", s)
	}
	return int64(f * float64(mult)), nil
}

// FormatSize writes a size the way ParseSize reads it.
func FormatSize(n int64) string {
	for _, u := range []struct {
		name string
		mult int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mult && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// DefaultConfig returns the default policy: the minimal root, no network,
// writes only to the workspace (and the private /tmp).
func DefaultConfig() *Config {
	return &Config{RootMode: RootMinimal}
}

// LoadConfig reads a settings file in srt's format. Unknown keys and keys
// that mean nothing on Linux are recorded in Config.Ignored, not rejected;
// a known key with a value of the wrong type is an error.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sandbox config: %w", err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("sandbox config %s: %w", path, jsonerr.At(data, err))
	}
	return c, nil
}

// ParseConfig parses a settings document in srt's format; see LoadConfig.
func ParseConfig(data []byte) (*Config, error) {
	c := DefaultConfig()
	if len(bytes.TrimSpace(data)) == 0 {
		return c, nil
	}
	top, err := objectOf(data, "")
	if err != nil {
		return nil, err
	}
	for _, key := range sortedKeys(top) {
		raw := top[key]
		switch key {
		case "filesystem":
			fs, err := objectOf(raw, key)
			if err != nil {
				return nil, err
			}
			for _, k := range sortedKeys(fs) {
				v := fs[k]
				switch k {
				case "denyRead":
					err = stringsOf(v, key+"."+k, &c.Filesystem.DenyRead)
				case "allowWrite":
					err = stringsOf(v, key+"."+k, &c.Filesystem.AllowWrite)
				case "denyWrite":
					err = stringsOf(v, key+"."+k, &c.Filesystem.DenyWrite)
				case "extraRead": // accepted here too, next to denyRead
					err = stringsOf(v, key+"."+k, &c.ExtraRead)
				default:
					c.Ignored = append(c.Ignored, key+"."+k)
				}
				if err != nil {
					return nil, err
				}
			}
		case "network":
			nw, err := objectOf(raw, key)
			if err != nil {
				return nil, err
			}
			for _, k := range sortedKeys(nw) {
				v := nw[k]
				switch k {
				case "allowedDomains":
					err = stringsOf(v, key+"."+k, &c.Network.AllowedDomains)
				case "deniedDomains":
					err = stringsOf(v, key+"."+k, &c.Network.DeniedDomains)
				default:
					c.Ignored = append(c.Ignored, key+"."+k)
				}
				if err != nil {
					return nil, err
				}
			}
		case "rootMode":
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, fmt.Errorf("rootMode: want a string (%q or %q)", RootMinimal, RootHost)
			}
			c.RootMode = RootMode(s)
		case "extraRead":
			if err := stringsOf(raw, key, &c.ExtraRead); err != nil {
				return nil, err
			}
		case "landlock":
			if err := boolOf(raw, key, &c.Landlock); err != nil {
				return nil, err
			}
		case "blockUnixSockets":
			if err := boolOf(raw, key, &c.BlockUnixSockets); err != nil {
				return nil, err
			}
		case "limits":
			if err := limitsOf(raw, &c.Limits); err != nil {
				return nil, err
			}
		default:
			c.Ignored = append(c.Ignored, key)
		}
	}
	sort.Strings(c.Ignored)
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func objectOf(data []byte, name string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		if name == "" {
			return nil, fmt.Errorf("want a JSON object: %w", err)
		}
		return nil, fmt.Errorf("%s: want a JSON object", name)
	}
	return m, nil
}

// sortedKeys makes parsing deterministic: extraRead may come from two keys.
func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func stringsOf(raw json.RawMessage, name string, dst *[]string) error {
	var s []string
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("%s: want an array of strings", name)
	}
	for i, v := range s {
		if v == "" {
			return fmt.Errorf("%s[%d]: empty path or pattern", name, i)
		}
	}
	*dst = append(*dst, s...)
	return nil
}

// limitsOf reads the "limits" object: memory as bytes or a size string
// ("2g"), pids as a number; -1 or "unlimited" means no limit.
func limitsOf(raw json.RawMessage, dst *Limits) error {
	var m struct {
		Memory json.RawMessage `json:"memory"`
		Pids   *int            `json:"pids"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return fmt.Errorf("limits: want an object with memory and pids: %v", err)
	}
	if len(m.Memory) > 0 {
		var n int64
		var s string
		switch {
		case json.Unmarshal(m.Memory, &n) == nil:
			dst.Memory = n
		case json.Unmarshal(m.Memory, &s) == nil:
			v, err := ParseSize(s)
			if err != nil {
				return fmt.Errorf("limits.memory: %w", err)
			}
			dst.Memory = v
		default:
			return fmt.Errorf("limits.memory: want a number of bytes or a size such as \"2g\"")
		}
	}
	if m.Pids != nil {
		dst.Pids = *m.Pids
	}
	return nil
}

func boolOf(raw json.RawMessage, name string, dst *bool) error {
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("%s: want true or false", name)
	}
	return nil
}

// Validate checks the root mode, the paths and globs, and every domain
// pattern.
func (c *Config) Validate() error {
	switch c.RootMode {
	case "", RootMinimal, RootHost:
	default:
		return fmt.Errorf("rootMode %q: want %q or %q", c.RootMode, RootMinimal, RootHost)
	}
	for name, list := range map[string][]string{
		"filesystem.denyRead": c.Filesystem.DenyRead, "filesystem.allowWrite": c.Filesystem.AllowWrite,
		"filesystem.denyWrite": c.Filesystem.DenyWrite, "extraRead": c.ExtraRead,
	} {
		for i, p := range list {
			if err := validPattern(p); err != nil {
				return fmt.Errorf("%s[%d]: %w", name, i, err)
			}
		}
	}
	if m := c.Limits.Memory; m > 0 && m < minMemory {
		return fmt.Errorf("limits.memory %s: too small for Python; want at least %s, or -1 for no limit", FormatSize(m), FormatSize(minMemory))
	}
	if p := c.Limits.Pids; p > 0 && p < 16 {
		return fmt.Errorf("limits.pids %d: too small for a kernel (it runs several threads); want at least 16, or -1 for no limit", p)
	}
	for _, d := range c.Network.AllowedDomains {
		if err := egress.CheckPattern(d, false); err != nil {
			return fmt.Errorf("network.allowedDomains: %w", err)
		}
	}
	for _, d := range c.Network.DeniedDomains {
		if err := egress.CheckPattern(d, true); err != nil {
			return fmt.Errorf("network.deniedDomains: %w", err)
		}
	}
	return nil
}

// validPattern checks a configured path before any expansion.
func validPattern(p string) error {
	if p == "" {
		return fmt.Errorf("empty path")
	}
	if strings.HasPrefix(p, "~") && p != "~" && !strings.HasPrefix(p, "~/") {
		return fmt.Errorf("path %q: ~user is not supported; use an absolute path", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if _, err := filepath.Match(seg, ""); err != nil {
			return fmt.Errorf("path %q: bad glob %q", p, seg)
		}
	}
	return nil
}

// AllowDomains adds allowedDomains entries (the CLI's --allowed-domain).
// Each pattern is validated as in a settings file; on error nothing is
// added.
func (c *Config) AllowDomains(patterns ...string) error {
	for _, p := range patterns {
		if err := egress.CheckPattern(p, false); err != nil {
			return fmt.Errorf("allowed domain: %w", err)
		}
	}
	for _, p := range patterns {
		if !slices.Contains(c.Network.AllowedDomains, p) {
			c.Network.AllowedDomains = append(c.Network.AllowedDomains, p)
		}
	}
	return nil
}

// clone returns a deep copy, so that New is not affected by later changes.
func (c *Config) clone() *Config {
	d := *c
	d.Filesystem.DenyRead = slices.Clone(c.Filesystem.DenyRead)
	d.Filesystem.AllowWrite = slices.Clone(c.Filesystem.AllowWrite)
	d.Filesystem.DenyWrite = slices.Clone(c.Filesystem.DenyWrite)
	d.Network.AllowedDomains = slices.Clone(c.Network.AllowedDomains)
	d.Network.DeniedDomains = slices.Clone(c.Network.DeniedDomains)
	d.ExtraRead = slices.Clone(c.ExtraRead)
	d.Ignored = slices.Clone(c.Ignored)
	if d.RootMode == "" {
		d.RootMode = RootMinimal
	}
	return &d
}
