package ipybox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/mcpconn"
	"github.com/ipybox/ipybox/internal/sandbox"
	"github.com/ipybox/ipybox/internal/wsguard"
)

// toolPort is the port inside the sandbox where the tool server's unix
// socket is forwarded. The sandbox has a network namespace of its own, so
// any port is free there.
const toolPort = 8765

// SandboxConfig is the sandbox policy, with the JSON keys of Anthropic's
// sandbox-runtime (srt) settings plus ipybox's extensions
// (docs/sandbox.md): it encodes to a settings file that --sandbox-config
// and a server config's "sandbox" value read. (Those also read sizes
// such as "2g" and "unlimited", which decoding into a SandboxConfig does
// not: its limits are numbers.)
//
// Paths may start with "~" (the host user's home directory) and may be
// relative (to the workspace). They may contain globs, including "**" for
// any number of directories; globs are expanded each time a process
// starts, never dropped.
//
// Whatever the Config says, the workspace and the run directory are
// writable, and the paths in the workspace that host programs run or read
// (.git's hooks and config, shell start-up files, agent configs...) are
// write-protected, and .env files masked.
type SandboxConfig struct {
	Filesystem SandboxFilesystem `json:"filesystem"`
	Network    SandboxNetwork    `json:"network"`
	// RootMode is how much of the host's file system the sandbox sees:
	// "minimal" (the default when empty) shows /usr, /etc (without its
	// secrets) and the Python prefix, read-only; "host" shows the host's
	// whole file system read-only, but denyRead paths and /etc's secrets
	// (/tmp and /run are private).
	RootMode string `json:"rootMode,omitempty"`
	// ExtraRead lists host paths made visible read-only (for example a
	// package an MCP server needs).
	ExtraRead []string `json:"extraRead,omitempty"`
	// Landlock adds a Landlock ruleset on top of the mount layout when the
	// running kernel supports it (best effort: it is skipped, with a log
	// line, where Landlock is unavailable).
	Landlock bool `json:"landlock,omitempty"`
	// BlockUnixSockets limits unix domain sockets: sandboxed commands
	// cannot create AF_UNIX sockets at all (socketpair still works);
	// kernels, which need them for ZeroMQ, cannot connect to path sockets
	// outside their run directory where Landlock ABI 9 is available.
	BlockUnixSockets bool `json:"blockUnixSockets,omitempty"`
	// Limits bounds the memory and the number of processes of every
	// sandboxed process (an ipybox extension). The zero value means the
	// defaults, which are not unlimited.
	Limits SandboxLimits `json:"limits,omitempty"`
}

// SandboxFilesystem is srt's "filesystem" object: the paths a process may
// read and write.
type SandboxFilesystem struct {
	// DenyRead lists paths that are masked: a file reads as permission
	// denied, a directory as an empty, unlistable one.
	DenyRead []string `json:"denyRead,omitempty"`
	// AllowWrite lists paths, besides the workspace, that are writable.
	// "/tmp" needs no entry: the sandbox always has a private, writable
	// /tmp.
	AllowWrite []string `json:"allowWrite,omitempty"`
	// DenyWrite lists paths inside writable areas that stay read-only.
	DenyWrite []string `json:"denyWrite,omitempty"`
}

// SandboxNetwork is srt's "network" object. Without allowed domains the
// sandbox has no network at all. With them, HTTP and HTTPS leave only
// through the egress proxy, which refuses a name in DeniedDomains first;
// then a name must equal an AllowedDomains entry or match a "*.suffix"
// entry (which does not match the bare suffix). IP literals are refused
// unless listed, and a name that resolves only to loopback, private or
// link-local addresses is refused. An entry may end in ":port" to apply
// to that port only.
type SandboxNetwork struct {
	AllowedDomains []string `json:"allowedDomains,omitempty"`
	DeniedDomains  []string `json:"deniedDomains,omitempty"`
}

// SandboxLimits bounds the resources of each sandboxed process
// (setrlimit, inherited by what it starts; they cannot be raised from
// inside). For each, zero means the default and a negative value no limit.
type SandboxLimits struct {
	// Memory is the most memory, in bytes, that each process may map for
	// data (RLIMIT_DATA); an allocation beyond it fails (Python raises
	// MemoryError). The default is 2 GiB.
	Memory int64 `json:"memory,omitempty"`
	// Pids is the most processes and threads the sandbox's processes may
	// run at once (RLIMIT_NPROC, in the sandbox's own user namespace); a
	// fork beyond it fails with EAGAIN. The default is 512.
	Pids int `json:"pids,omitempty"`
	// FileSize is the largest file, in bytes, a process may write or
	// allocate (RLIMIT_FSIZE); a write beyond it fails with EFBIG. The
	// default is 4 GiB.
	FileSize int64 `json:"fileSize,omitempty"`
}

// policy is c as the sandbox package takes it (nil stays nil).
func (c *SandboxConfig) policy() *sandbox.Config {
	if c == nil {
		return nil
	}
	return &sandbox.Config{
		Filesystem: sandbox.FilesystemConfig{
			DenyRead:   slices.Clone(c.Filesystem.DenyRead),
			AllowWrite: slices.Clone(c.Filesystem.AllowWrite),
			DenyWrite:  slices.Clone(c.Filesystem.DenyWrite),
		},
		Network: sandbox.NetworkConfig{
			AllowedDomains: slices.Clone(c.Network.AllowedDomains),
			DeniedDomains:  slices.Clone(c.Network.DeniedDomains),
		},
		RootMode:         sandbox.RootMode(c.RootMode),
		ExtraRead:        slices.Clone(c.ExtraRead),
		Landlock:         c.Landlock,
		BlockUnixSockets: c.BlockUnixSockets,
		Limits:           sandbox.Limits{Memory: c.Limits.Memory, Pids: c.Limits.Pids, FileSize: c.Limits.FileSize},
	}
}

// sandboxConfigOf is the public form of a sandbox package policy.
func sandboxConfigOf(c *sandbox.Config) *SandboxConfig {
	return &SandboxConfig{
		Filesystem: SandboxFilesystem{
			DenyRead:   slices.Clone(c.Filesystem.DenyRead),
			AllowWrite: slices.Clone(c.Filesystem.AllowWrite),
			DenyWrite:  slices.Clone(c.Filesystem.DenyWrite),
		},
		Network: SandboxNetwork{
			AllowedDomains: slices.Clone(c.Network.AllowedDomains),
			DeniedDomains:  slices.Clone(c.Network.DeniedDomains),
		},
		RootMode:         string(c.RootMode),
		ExtraRead:        slices.Clone(c.ExtraRead),
		Landlock:         c.Landlock,
		BlockUnixSockets: c.BlockUnixSockets,
		Limits:           SandboxLimits{Memory: c.Limits.Memory, Pids: c.Limits.Pids, FileSize: c.Limits.FileSize},
	}
}

// SandboxInit runs the sandbox's init, and exits, when this process was
// started as one: the sandbox starts the program's own binary again, with
// a hidden first argument. A program that starts sandboxed kernels calls
// it first in main; otherwise it returns at once.
//
//	func main() {
//		ipybox.SandboxInit()
//		run()
//	}
func SandboxInit() {
	if len(os.Args) > 1 && os.Args[1] == sandbox.InitCommand {
		os.Exit(sandbox.InitMain(os.Args[2:]))
	}
}

// DefaultSandbox returns the default policy: a minimal read-only root, the
// workspace writable, no network.
func DefaultSandbox() *SandboxConfig { return sandboxConfigOf(sandbox.DefaultConfig()) }

// startSandbox prepares the kernel's sandbox and checks, before anything
// runs, that it works here. A sandbox that was asked for either runs or
// fails: there is no fallback to running unsandboxed.
func (e *Executor) startSandbox(ctx context.Context) (kernel.Launcher, error) {
	tool := sandbox.Forward{Port: toolPort, Socket: filepath.Join(e.runDir, "tool.sock")}
	so := &sandbox.Options{
		Forwards: []sandbox.Forward{tool},
		Logger:   e.log,
		Writable: e.ownState(),
		// Other tenants' folders, allowWrite, binds: the host finds no
		// program of its own (bwrap) there, and asks no interpreter there.
		KernelWritable: hostWritable(e.workspace, &e.opts),
		EgressDecided:  e.egressDecided,
	}
	if z := e.opts.Zygote; z != nil && z.sandboxed {
		so.Zygote = z.z // forks each kernel into its own sandbox (NewSandboxZygote)
	}
	sb, err := newWorkspaceSandbox(e.workspace, e.opts.Sandbox.policy(), so, e.secretFiles)
	if err != nil {
		return nil, err
	}
	e.sandboxes.add(sb)
	e.kernelSandbox = sb
	// No probe here: the kernel's start is the probe, and a failed start
	// explains itself with the probe's cause and fix (sandbox.ProbeError).
	// Inside, the runtime reaches the tool server through the forwarder
	// (Linux), or by its socket, which the profile allows (macOS).
	e.toolURL = sb.ForwardURL(tool)
	return sb, nil
}

func nonEmpty(s ...string) []string {
	var out []string
	for _, x := range s {
		if x != "" {
			out = append(out, x)
		}
	}
	return out
}

// Stale reports whether the kernel started under another workspace
// protection than a start now would get: a secret file that a server
// registered since (in this Executor, or in the workspace's servers.json
// by another session) names, or a .env made since, is not hidden from it.
// A pool hands out no stale Executor. An unsandboxed or gateway kernel is
// never stale: nothing is hidden from it.
func (e *Executor) Stale() bool {
	var started string
	switch {
	case e.container != nil:
		started = e.container.StartedFingerprint()
	case e.opts.Sandbox != nil && e.kernelSandbox != nil:
		started = e.kernelSandbox.StartedFingerprint()
	default:
		return false
	}
	home, _ := os.UserHomeDir()
	secrets := func() []string {
		s := e.secretFiles()
		if reg, err := mcpconn.LoadRegistry(registryPath(e.workspace)); err == nil {
			for _, f := range registrySecrets(e.workspace, reg, e.opts.DotEnv) {
				if !slices.Contains(s, f) {
					s = append(s, f)
				}
			}
		}
		return s
	}
	now, err := wsguard.Protect(wsguard.Input{Workspace: e.workspace, Home: home, Secrets: secrets})
	return err != nil || now.Fingerprint() != started
}

// newWorkspaceSandbox is the one way ipybox makes a sandbox for a
// workspace, for the kernel, a sandboxed stdio MCP server, and the pip and
// virtualenv helpers alike, so that each gets every mask: the OAuth token
// folder, and at each start .env files and the files that the registered
// servers' configs name (secrets; nil: read them from the workspace's
// registry at each start).
func newWorkspaceSandbox(ws string, policy *sandbox.Config, o *sandbox.Options, secrets func() []string) (*sandbox.Sandbox, error) {
	if policy == nil {
		policy = sandbox.DefaultConfig()
	}
	if f, err := mcpconn.DefaultTokenFile(); err == nil {
		// A token folder that kernel code can write under (the workspace,
		// an allowWrite path) cannot be protected: code could move its
		// parent away and make a fresh one, or plant a link, and the host
		// would write the next sign-in's tokens where the kernel reads.
		abs, err := filepath.Abs(ws)
		if err != nil {
			return nil, fmt.Errorf("ipybox: workspace %s: %w", ws, err)
		}
		if err := tokenDirOutside(filepath.Dir(f), append([]string{abs}, policy.Filesystem.AllowWrite...)); err != nil {
			return nil, err
		}
		// The OAuth token folder is masked whatever the policy shows (a
		// "host" root, extraRead). It is created now, so that a sign-in
		// during the session lands in a folder that is already masked.
		if dir := filepath.Dir(f); os.MkdirAll(dir, 0o700) == nil {
			p := *policy
			p.Filesystem.DenyRead = append(slices.Clone(p.Filesystem.DenyRead), dir)
			policy = &p
		}
	}
	// Approval policies and audit logs are hidden: kernel code must not
	// read the rules that approve its calls, nor the record of them (Start
	// refuses those that lie where the kernel writes).
	if hidden := hostOnly.list(); len(hidden) > 0 {
		p := *policy
		p.Filesystem.DenyRead = append(slices.Clone(p.Filesystem.DenyRead), hidden...)
		policy = &p
	}
	if secrets == nil {
		secrets = func() []string {
			reg, err := mcpconn.LoadRegistry(registryPath(ws))
			if err != nil {
				return nil
			}
			// ${VAR} in a config is filled from the host's environment
			// and the workspace's .env, as the servers' starts fill it.
			dot, _ := mcpconn.LoadDotEnv(filepath.Join(ws, ".env"))
			return registrySecrets(ws, reg, dot)
		}
	}
	var opts sandbox.Options
	if o != nil {
		opts = *o
	}
	opts.Workspace, opts.Secrets = ws, secrets
	sb, err := sandbox.New(policy, &opts)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	return sb, nil
}

// secretFiles lists the workspace files and directories that registered
// MCP server configs name in their arguments or environment (a service
// account key, a credentials file or folder): the kernel's sandbox masks
// them at each start. A name that is a symbolic link is kept: the sandbox
// masks its target. A directory counts only where its name says secret:
// an environment variable's value (CLOUDSDK_CONFIG, GNUPGHOME) or a flag
// such as --credentials-dir; a directory a server simply works on (the
// filesystem server's roots) stays visible.
func (e *Executor) secretFiles() []string {
	return registrySecrets(e.workspace, e.registry, e.opts.DotEnv)
}

// secretFilesBut is secretFiles without the files that only server's own
// config names: its sandbox hides the others' files from it, but it reads
// its own (a script in the workspace, its key file), which stdio servers
// that clients register, sandboxed by default, need. A file that another
// server's config names stays hidden, even if this one names it too: a
// client must not get an operator's server's key file by naming it.
func (e *Executor) secretFilesBut(server string) []string {
	all := e.secretFiles()
	own, others := mcpconn.NewRegistry(), mcpconn.NewRegistry()
	for _, name := range e.registry.Names() {
		cfg, ok := e.registry.Get(name)
		if !ok {
			continue
		}
		if name == server {
			own.Add(name, cfg)
		} else {
			others.Add(name, cfg)
		}
	}
	mine, theirs := registrySecrets(e.workspace, own, e.opts.DotEnv), registrySecrets(e.workspace, others, e.opts.DotEnv)
	return slices.DeleteFunc(all, func(p string) bool { return slices.Contains(mine, p) && !slices.Contains(theirs, p) })
}

// registrySecrets is secretFiles for a workspace and its registry. A
// value with ${VAR} names the file that the host's environment, then
// dotenv, make of it, as a server's start does (a variable that neither
// knows leaves the value out).
func registrySecrets(workspace string, reg *mcpconn.Registry, dotenv map[string]string) []string {
	lookup := func(name string) (string, bool) {
		if v, ok := os.LookupEnv(name); ok {
			return v, true
		}
		v, ok := dotenv[name]
		return v, ok
	}
	var out []string
	for _, name := range reg.Names() {
		cfg, ok := reg.Get(name)
		if !ok {
			continue
		}
		base := workspace
		if cfg.Cwd != "" && filepath.IsAbs(cfg.Cwd) {
			base = cfg.Cwd
		}
		type cand struct {
			value string
			dirOK bool
		}
		var cands []cand
		for i, a := range cfg.Args {
			if flag, after, ok := strings.Cut(a, "="); ok { // --key-file=creds.json
				cands = append(cands, cand{after, secretName(flag)})
			}
			cands = append(cands, cand{a, i > 0 && secretName(cfg.Args[i-1])})
		}
		for _, v := range cfg.Env {
			cands = append(cands, cand{v, true})
		}
		for _, c := range cands {
			if strings.Contains(c.value, "${") {
				x, err := mcpconn.Config{Args: []string{c.value}}.Expand(lookup)
				if err != nil {
					continue
				}
				c.value = x.Args[0]
			}
			if c.value == "" {
				continue
			}
			p := c.value
			if !filepath.IsAbs(p) {
				p = filepath.Join(base, p)
			}
			p = filepath.Clean(p)
			if p == workspace || !strings.HasPrefix(p, workspace+string(filepath.Separator)) {
				continue
			}
			fi, err := os.Stat(p)
			if err != nil || fi.IsDir() && !c.dirOK || slices.Contains(out, p) {
				continue
			}
			out = append(out, p)
		}
	}
	return out
}

// secretName reports whether a flag's name says that its value holds
// secrets.
func secretName(flag string) bool {
	if !strings.HasPrefix(flag, "-") {
		return false
	}
	f := strings.ToLower(flag)
	for _, w := range []string{"cred", "secret", "key", "token", "auth", "cert", "gnupg", "ssh", "password"} {
		if strings.Contains(f, w) {
			return true
		}
	}
	return false
}

// probe checks that sb can run here. A sandbox that was asked for either
// runs or fails with the cause and the fix; nothing falls back to running
// unsandboxed.
func probe(ctx context.Context, sb *sandbox.Sandbox) error {
	if err := sb.Probe(ctx); err != nil {
		return fmt.Errorf("sandbox requested but unavailable (nothing was started): %w", err)
	}
	return nil
}

// sandboxSet holds the sandboxes an Executor created (the kernel's and
// those of sandboxed stdio MCP servers), to close them with it.
type sandboxSet struct {
	mu       sync.Mutex
	all      []*sandbox.Sandbox
	byServer map[string]*sandbox.Sandbox // server name + policy -> its sandbox
}

// forServer returns the sandbox of a stdio server with the given policy,
// creating it once: reconnects after a crash reuse it rather than piling up
// sandboxes (and egress proxies) until Close.
func (s *sandboxSet) forServer(key string, create func() (*sandbox.Sandbox, error)) (*sandbox.Sandbox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb, ok := s.byServer[key]; ok {
		return sb, nil
	}
	sb, err := create()
	if err != nil {
		return nil, err
	}
	if s.byServer == nil {
		s.byServer = map[string]*sandbox.Sandbox{}
	}
	s.byServer[key] = sb
	s.all = append(s.all, sb)
	return sb, nil
}

func (s *sandboxSet) add(sb *sandbox.Sandbox) {
	s.mu.Lock()
	s.all = append(s.all, sb)
	s.mu.Unlock()
}

func (s *sandboxSet) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first error
	for _, sb := range s.all {
		if err := sb.Close(); err != nil && first == nil {
			first = err
		}
	}
	s.all, s.byServer = nil, nil
	return first
}

// stdioCommand is mcpconn's StdioCommand hook: a stdio server whose config
// has "sandbox": true (or a settings object) runs under the same launcher
// as a sandboxed kernel, with its own policy.
func (e *Executor) stdioCommand(ctx context.Context, server string, cfg mcpconn.Config, cmd *exec.Cmd) (*exec.Cmd, error) {
	if e.opts.ServerGate != nil {
		// The gate judges the config as registered, ${VAR} placeholders
		// and all (cfg is expanded).
		raw := cfg
		if r, ok := e.registry.Get(server); ok {
			raw = r
		}
		gated, err := e.opts.ServerGate(server, serverConfigOf(raw))
		if err != nil {
			return nil, fmt.Errorf("server %q: %w", server, err)
		}
		cfg.Sandbox = gated.Sandbox
	}
	if !cfg.SandboxRequested() {
		return cmd, nil
	}
	sb, err := e.sandboxes.forServer(server+"\x00"+string(cfg.Sandbox), func() (*sandbox.Sandbox, error) {
		policy, err := serverSandboxPolicy(cfg.Sandbox)
		if err != nil {
			return nil, err
		}
		return newWorkspaceSandbox(e.workspace, policy, &sandbox.Options{Logger: e.log, EgressDecided: e.egressDecided, KernelWritable: hostWritable(e.workspace, &e.opts)},
			func() []string { return e.secretFilesBut(server) })
	})
	if err != nil {
		return nil, fmt.Errorf("server %q: sandbox: %w", server, err)
	}
	if err := probe(ctx, sb); err != nil {
		return nil, fmt.Errorf("server %q: %w", server, err)
	}
	wrapped, err := sb.Command(ctx, cmd.Path, cmd.Args[1:], cmd.Env, cmd.Dir)
	if err != nil {
		return nil, fmt.Errorf("server %q: sandbox: %w", server, err)
	}
	// What mcpconn set on the command holds for the sandboxed one too: its
	// stderr goes to the log and to the error of a failed start, and a
	// grandchild that keeps it open does not hold Wait.
	wrapped.Stderr, wrapped.WaitDelay = cmd.Stderr, cmd.WaitDelay
	return wrapped, nil
}

// serverSandboxPolicy reads a server config's "sandbox" value: true for the
// default policy, or a settings object.
func serverSandboxPolicy(raw json.RawMessage) (*sandbox.Config, error) {
	var b bool
	if json.Unmarshal(raw, &b) == nil {
		return sandbox.DefaultConfig(), nil
	}
	return sandbox.ParseConfig(raw)
}

// CommandOptions configures SandboxedCommand. A nil *CommandOptions means
// the defaults.
type CommandOptions struct {
	// Sandbox is the policy; nil means DefaultSandbox().
	Sandbox *SandboxConfig
	// Env is exactly the command's environment; nil means an empty one.
	Env []string
	// Writable are folders inside the workspace's .ipybox that the
	// command may write (the shared virtualenv, for an approved install);
	// nil means none: ipybox's state is read-only or hidden inside.
	Writable []string
	// KernelWritable lists more host folders that kernel code can write
	// (the workspace's root, when each principal has a folder in it): an
	// interpreter there is not asked for its prefixes, and none of them
	// is bound into the command's sandbox. Nil means none.
	KernelWritable []string
}

// SandboxedCommand prepares path with args to run inside a sandbox, with
// workspace writable and as the working directory. It checks first that
// the sandbox can run here and fails otherwise; it never returns an
// unsandboxed command. The caller sets the command's standard streams,
// runs it, and calls release afterwards.
func SandboxedCommand(ctx context.Context, workspace, path string, args []string, opts *CommandOptions) (cmd *exec.Cmd, release func() error, err error) {
	var o CommandOptions
	if opts != nil {
		o = *opts
	}
	ws, err := filepath.Abs(workspace)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox workspace: %w", err)
	}
	sb, err := newWorkspaceSandbox(ws, o.Sandbox.policy(), &sandbox.Options{Writable: o.Writable, KernelWritable: o.KernelWritable}, nil)
	if err != nil {
		return nil, nil, err
	}
	env := o.Env
	if err := probe(ctx, sb); err != nil {
		sb.Close()
		return nil, nil, err
	}
	if cmd, err = sb.Command(ctx, path, args, env, workspace); err != nil {
		sb.Close()
		return nil, nil, err
	}
	return cmd, sb.Close, nil
}

// tokenDirOutside returns an error when the OAuth token folder dir is at
// or below one of the writable places, after links are resolved (as far
// as the paths exist).
func tokenDirOutside(dir string, writable []string) error {
	if w := insideAny(dir, writable); w != "" {
		return fmt.Errorf("ipybox: the OAuth token folder %s is inside %s, which sandboxed code can write: it could move the folder away and read the tokens of the next sign-in; "+
			"set XDG_CONFIG_HOME to a folder outside it, or choose another workspace", dir, w)
	}
	return nil
}
