package mcpserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/warm"
)

// kernelFactory makes the sessions' kernels: it owns the warm pool
// (warm.go) and the settings every executor starts with (the sandbox
// with the bound folders, the approval mode and policy, the backend), and
// starts an executor for a session: from the pool, or in its tenant's
// folder with the tenant's virtualenv and fork server. It has no lock of
// its own: its settings are fixed at New, and the pool has its own. It
// may take a session's x.mu and a tenant's t.mu (each alone, to record
// what the executor loaded), and calls the tenant (ensure, venvPython,
// zygote) and ipybox.Start, none of them under a lock of its caller's.
type kernelFactory struct {
	opts    *Options // the Server's, read-only after New
	log     *slog.Logger
	sandbox *ipybox.SandboxConfig
	warm    *warm.Pool[warmExec]
}

// newKernelFactory returns the factory of opts: the sandbox, when there
// is one, with the bound directories added as writable paths. Its warm
// pool is made by New, once the tenant is known.
func newKernelFactory(opts *Options, log *slog.Logger) *kernelFactory {
	f := &kernelFactory{opts: opts, log: log}
	if opts.Sandbox != nil {
		// A bind is a link in the workspace to a host directory; inside the
		// sandbox that directory must be there (and writable) too.
		cp := *opts.Sandbox
		cp.Filesystem.AllowWrite = slices.Clone(cp.Filesystem.AllowWrite)
		for _, b := range opts.Binds {
			cp.Filesystem.AllowWrite = append(cp.Filesystem.AllowWrite, b.HostPath)
		}
		f.sandbox = &cp
	}
	return f
}

// newWarmPool keeps size Executors ready for tenant only (none when size
// is 0, as with several tenants).
func (f *kernelFactory) newWarmPool(only *tenant, size int) *warm.Pool[warmExec] {
	start := func(ctx context.Context) (warmExec, error) {
		ex, synced, owner, err := f.newExecutor(ctx, only, "")
		if err != nil && ex != nil {
			f.closeExecutor(ex, false)
		}
		return warmExec{ex, synced, owner}, err
	}
	return warm.New(size, start, func(w warmExec) error { return f.closeExecutor(w.ex, false) }, f.log)
}

// startPool makes the warm pool: size kernels kept ready for the one
// tenant only, growing with demand up to most (0: max(size,
// defaultPoolMax)). With several tenants (only is nil) there is none: a
// pooled kernel starts in one folder, before its session (and so its
// principal) is known.
func (f *kernelFactory) startPool(only *tenant, size, most int) {
	if only == nil && size > 0 {
		f.log.Warn("the warm pool is off with several principals: each principal's kernels start in its own folder", "pool", size)
		size = 0
	}
	f.warm = f.newWarmPool(only, size)
	if size > 0 {
		if most == 0 {
			most = max(size, defaultPoolMax)
		}
		f.warm.Grow(most)
	}
}

// startExecutor gives session x an Executor: a warm one from the pool when
// there is one, else one started now (attached to gateway kernel attach,
// when it is set). The generations of the registrations it knows are
// recorded in x.synced.
func (f *kernelFactory) startExecutor(ctx context.Context, x *session, attach string) (*ipybox.Executor, error) {
	if attach != "" {
		// Not from the pool: its kernel is the one to attach to.
	} else if w, ok := f.warm.Take(); ok && w.ex.Stale() {
		// It started before a server with a secret file was registered:
		// its kernel would see what a start now hides.
		f.log.Info("a pooled kernel started under older masks; starting a fresh one")
		f.closeExecutor(w.ex, false)
	} else if ok {
		x.pooled = true
		x.mu.Lock()
		x.owner = w.owner
		x.mu.Unlock()
		x.t.mu.Lock()
		maps.Copy(x.synced, w.synced)
		x.t.mu.Unlock()
		return w.ex, nil
	}
	ex, synced, owner, err := f.newExecutor(ctx, x.t, attach)
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	x.owner = owner
	x.mu.Unlock()
	x.t.mu.Lock()
	maps.Copy(x.synced, synced)
	x.t.mu.Unlock()
	return ex, nil
}

// newExecutor starts an Executor as tenant t's sessions get them: in
// its folder, with its virtualenv, the approval policy, the sandbox, and
// (unsandboxed) its fork server; a local one gets a package folder and a snapshot
// folder of its own, a gateway one attaches to kernel attach when it is
// set. It returns the registration generations the executor loaded from
// servers.json at its start, and the holder of the session it will serve
// (for OAuth sign-ins).
func (f *kernelFactory) newExecutor(ctx context.Context, t *tenant, attach string) (*ipybox.Executor, map[string]int, *oauthOwner, error) {
	if err := t.ensure(); err != nil {
		return nil, nil, nil, err
	}
	var py string
	if f.opts.Container == nil && f.opts.Gateway == nil {
		// A container brings its own Python, a gateway's kernels theirs;
		// the workspace's virtualenv is the host's.
		var err error
		if py, err = t.venvPython(ctx); err != nil {
			return nil, nil, nil, err
		}
	}
	// What servers.json holds now, this executor loads at Start.
	synced := map[string]int{}
	t.mu.Lock()
	for name, r := range t.regs {
		if r.persisted {
			synced[name] = r.gen
		}
	}
	t.mu.Unlock()
	owner := &oauthOwner{tenant: t.multi}
	pkgDir, snapDir := "", ""
	if py != "" {
		// Packages that this executor's kernel installs with pip go to a
		// folder of its own: the shared virtualenv is read-only to
		// kernels, so one session's install cannot replace code that
		// another runs (install_package changes the shared one, with
		// approval). They survive a reset, and go with the session.
		pkgDir = filepath.Join(t.dir, ".ipybox", "packages", newFolderName())
	}
	if f.opts.Gateway == nil {
		// Its snapshots, which its kernel alone writes and reads.
		snapDir = filepath.Join(t.dir, ".ipybox", "snapshots", newFolderName())
	}
	o := ipybox.Options{
		TracerProvider: f.opts.TracerProvider,
		TraceCode:      f.opts.TraceCode,

		PackageDir:        pkgDir,
		SnapshotDir:       snapDir,
		Python:            py,
		WorkDir:           t.dir,
		ImagesDir:         t.imagesDir(),
		KernelEnv:         f.opts.KernelEnv,
		DotEnv:            f.opts.DotEnv,
		Logger:            f.log,
		OAuthURL:          owner.openURL,
		ServerGate:        t.gateStart,
		ClientVars:        f.opts.AllowHostServers,
		ClientPrivateURLs: f.opts.AllowHostServers || f.opts.AllowPrivateURLs,

		RequireShellEscape: f.opts.RequireShellEscape,
		RewindDepth:        f.opts.RewindDepth,
	}
	if f.opts.Approvals.Mode == ApprovalElicit {
		o.ApproveShellCommands = true
	} else {
		o.NoToolApproval = true
	}
	o.ApprovalTimeout = f.opts.Approvals.Timeout
	o.ApprovalPolicy = f.opts.Approvals.Policy
	// The audit log names the principal; with several, the answers it
	// remembers apply to it alone.
	o.Principal, o.Tenant = t.principal, t.multi
	if t.multi {
		// The other tenants' kernels write the rest of the workspace:
		// no host process of this tenant starts or loads code there.
		o.KernelWritable = []string{t.s.workspace}
	}
	o.Sandbox = t.sandboxConfig()
	o.Container = f.opts.Container
	switch {
	case f.opts.Gateway != nil:
		g := *f.opts.Gateway
		g.KernelID = attach
		o.Gateway = &g
		o.ToolServerAddr = f.opts.ToolServerAddr
	case f.sandbox == nil && o.Container == nil:
		o.Zygote = t.zygote(ctx, py, false)
	case o.Sandbox != nil && o.Container == nil && f.opts.Sessions.SandboxZygote:
		o.Zygote = t.zygote(ctx, py, true)
	}
	ex, err := ipybox.Start(ctx, &o)
	if err != nil {
		for _, d := range []string{pkgDir, snapDir} {
			if d != "" {
				os.RemoveAll(d)
			}
		}
		return nil, nil, nil, err
	}
	return ex, synced, owner, nil
}

// closeExecutor closes ex and, unless keep, removes its package and
// snapshot folders (os.RemoveAll removes a link planted there, not what it
// points to).
func (f *kernelFactory) closeExecutor(ex *ipybox.Executor, keep bool) error {
	err := ex.Close()
	if !keep {
		for _, d := range []string{ex.PackageDir(), ex.SnapshotDir()} {
			if d == "" {
				continue
			}
			if rerr := os.RemoveAll(d); rerr != nil {
				f.log.Warn("could not remove a session's folder", "path", d, "err", rerr)
			}
		}
	}
	return err
}

// confinement names how this server's local kernels are confined (see
// above); "" for a gateway, whose kernels keep their state themselves.
func (f *kernelFactory) confinement() string {
	digest := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			panic(fmt.Sprintf("mcpserver: confinement settings: %v", err)) // a config that cannot be marshalled is a programming error
		}
		sum := sha256.Sum256(b)
		return hex.EncodeToString(sum[:8])
	}
	switch {
	case f.opts.Gateway != nil:
		return ""
	case f.opts.Container != nil:
		return "container/" + digest(f.opts.Container)
	case f.sandbox != nil:
		return "sandbox/" + digest(f.sandbox)
	}
	return "none"
}
