// Package container runs the kernel in a Docker container: a
// kernel.Launcher whose Process is the container, driven through the
// Engine API (internal/docker).
//
// The run directory is bind-mounted at its host path, read-only, with the
// kernel's own directory (its ipc sockets) writable on top; the tool
// server's unix socket is in it. So the host speaks ZeroMQ over the same
// ipc sockets as with a local kernel, and no port is published. The
// workspace is mounted at /app/workspace, binds at /app/<rel>.
//
// Every container is hardened the same way: a non-root user, all
// capabilities dropped, no-new-privileges, a read-only root with a tmpfs
// /tmp, memory and pids limits, docker's init as pid 1, and labels that
// name the owning process, so that a later start reaps what a killed
// owner left behind.
package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ipybox/ipybox/internal/docker"
	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/procexit"
	"github.com/ipybox/ipybox/internal/sandbox"
	"github.com/ipybox/ipybox/internal/seccomp"
	"github.com/ipybox/ipybox/internal/wsguard"
)

// WorkspaceDir is the workspace's path inside the container.
const WorkspaceDir = "/app/workspace"

// BindRoot is the directory under which binds are mounted.
const BindRoot = "/app"

// Labels on every container the backend creates.
const (
	// LabelKernel marks a kernel container of ipybox.
	LabelKernel = "ai.ipybox.kernel"
	// LabelOwner is "<host>/<pid>/<start time>" of the process that
	// created it.
	LabelOwner = "ai.ipybox.owner"
)

// MappedID is the uid and gid the kernel runs as when ipybox runs as root
// and the workspace belongs to root: the sandbox's mapped id, which no
// host account has. It is the sandbox's, so that a workspace one backend
// wrote is the other's too.
const MappedID = sandbox.MappedID

// apiTimeout bounds each Engine API call of a start (create, start,
// inspect), and the checks of New.
const apiTimeout = 20 * time.Second

// DefaultStopTimeout is Config.StopTimeout's default.
const DefaultStopTimeout = 5 * time.Second

// Bind mounts a host directory in a kernel container; the façade's
// ContainerBind is this type.
type Bind struct {
	// HostPath is the host directory (absolute or relative to the current
	// directory); it is created when missing. The façade makes it
	// absolute; a Launcher takes only absolute ones.
	HostPath string
	// Path is where it appears, relative to /app: "data" is /app/data.
	Path string
}

// Config describes the containers a Launcher runs.
type Config struct {
	// Image is the image (never pulled: it must be present).
	Image string
	// Env is added to the container's environment before the kernel's own
	// variables ("KEY=VALUE"; the kernel's win).
	Env []string
	// Binds are mounted read-write under /app.
	Binds []Bind
	// Memory is the memory limit in bytes (swap included); <= 0: none.
	Memory int64
	// Pids is the pids limit; <= 0: none.
	Pids int64
	// FileSize is the largest file a process may write (RLIMIT_FSIZE);
	// <= 0: none.
	FileSize int64
	// NoNetwork gives the container no network of its own (only
	// loopback): --network none.
	NoNetwork bool
	// Workspace is the host workspace, mounted at WorkspaceDir.
	Workspace string
	// ReadOnly are workspace-relative directories mounted read-only over
	// the workspace; they are created if missing.
	ReadOnly []string
	// Hidden are workspace-relative directories that the kernel sees as an
	// empty, read-only folder, as the sandbox shows ipybox's state
	// (.ipybox): the registry, other sessions' packages and snapshots are
	// not there. They are created if missing.
	Hidden []string
	// Writable are workspace-relative directories inside a ReadOnly or
	// Hidden one that the kernel may write all the same (a session's own
	// packages and snapshots); they must exist. Nil means none.
	Writable []string
	// Protect, when set, computes at each start the workspace's
	// protection (internal/wsguard): the guard in the container refuses
	// changes to what host programs read (.git, .claude, .mcp.json… at any
	// depth), existing ones are mounted read-only as well, and secrets are
	// hidden (.env, .env.*, files that server configs name). It needs
	// InitBinary. Nil means none.
	Protect func() (*wsguard.Protection, error)
	// InitBinary is the ipybox binary (or a test binary that dispatches
	// to the sandbox's init), mounted read-only in the container to run
	// the kernel under the seccomp filter and the guard. It must run in
	// the image: a static binary (CGO_ENABLED=0) runs in any. Empty means
	// none: then the kernel runs without the filter, and Protect must be
	// nil.
	InitBinary string
	// Sockets are host unix sockets in the run directory that the kernel
	// connects to (the tool server's): when ipybox runs as root they are
	// handed to the container's user.
	Sockets []string
	// Forward, when set, makes the host unix socket Forward.Socket (in the
	// run directory) reachable in the container as TCP on
	// 127.0.0.1:Forward.Port: the egress proxy of a container with
	// NoNetwork. Nil means none.
	Forward *sandbox.Forward
	// Python is the interpreter in the image. Empty means "python3".
	Python string
	// Host is the daemon's address; empty means $DOCKER_HOST or the
	// default socket.
	Host string
	// StopTimeout bounds each Engine API call that stops a container
	// (signal, kill, inspect, remove) and the wait for its exit once it
	// was killed. A daemon that lets one of them time out is not asked
	// again by that container's stop: the container is left for the next
	// start to reap, so that Close never hangs on a daemon. Zero means
	// DefaultStopTimeout.
	StopTimeout time.Duration
	// Logger receives the backend's logs. Nil discards.
	Logger *slog.Logger
}

// Launcher starts kernels in containers. It implements kernel.Launcher and
// kernel.Interpreter.
type Launcher struct {
	life   lifeline
	cfg    Config
	c      *docker.Client
	log    *slog.Logger
	uid    int
	gid    int
	owner  string
	seq    atomic.Int64
	closed atomic.Bool
	// wsSource is the workspace's bind source: the workspace, or its
	// idmapped mount (see chooseUser); bindSources are those of binds
	// that are idmapped, by index. idmaps are the mounts Close detaches.
	wsSource    string
	bindSources map[int]string
	idmaps      []string

	startedFP atomic.Value // string: the last start's protection (see StartedFingerprint)
}

// StartedFingerprint identifies the workspace protection the last kernel
// started by l got ("" before the first, or without Protect).
func (l *Launcher) StartedFingerprint() string {
	s, _ := l.startedFP.Load().(string)
	return s
}

// New checks the daemon and the image, reaps containers whose owner is
// gone, and returns a Launcher. Nothing is started yet.
func New(ctx context.Context, cfg Config) (*Launcher, error) {
	if cfg.Python == "" {
		cfg.Python = "python3"
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	if cfg.Image == "" {
		return nil, errors.New("container: no image; name one (--container-tag), and build the default with scripts/image.sh")
	}
	if !filepath.IsAbs(cfg.Workspace) {
		return nil, fmt.Errorf("container: workspace %q is not absolute", cfg.Workspace)
	}
	for _, b := range cfg.Binds {
		if err := CheckBind(b); err != nil {
			return nil, err
		}
	}
	c, err := docker.New(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("container: %w", err)
	}
	l := &Launcher{cfg: cfg, c: c, log: cfg.Logger, owner: ownerLabel(os.Getpid())}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	actx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	if err := c.Ping(actx); err != nil {
		c.Close()
		return nil, fmt.Errorf("container: docker is not available: %w; start dockerd (scripts/dockerd.sh) or set DOCKER_HOST", err)
	}
	if _, err := c.ImageInspect(actx, cfg.Image); err != nil {
		c.Close()
		if errors.Is(err, docker.ErrNotFound) {
			return nil, fmt.Errorf("container: image %q is not on this host (ipybox never pulls); build it (scripts/image.sh builds ipybox:latest) or docker pull it", cfg.Image)
		}
		return nil, fmt.Errorf("container: image %q: %w", cfg.Image, err)
	}
	if os.Geteuid() == 0 {
		reapIdmaps()
	}
	l.wsSource = cfg.Workspace
	if err := l.chooseUser(); err != nil {
		l.detachIdmaps()
		c.Close()
		return nil, err
	}
	l.idmapBinds()
	Reap(actx, c, l.log)
	return l, nil
}

// Close releases the client and detaches the idmapped mounts. Containers
// already started stop with their kernels (they hold their own binds of
// those mounts).
func (l *Launcher) Close() error {
	l.closed.Store(true)
	l.life.close()
	l.c.Close()
	return l.detachIdmaps()
}

// detachIdmaps detaches the Launcher's idmapped mounts.
func (l *Launcher) detachIdmaps() error {
	var errs []error
	for _, at := range l.idmaps {
		if err := detachIdmap(at); err != nil {
			errs = append(errs, err)
		}
	}
	l.idmaps = nil
	return errors.Join(errs...)
}

// CheckUser reports, before any kernel starts, whether the kernels of
// workspace can have a user that writes it (see chooseUser), so that a
// server fails once at its start rather than at each session.
func CheckUser(workspace string) error {
	l := &Launcher{cfg: Config{Workspace: workspace}, log: slog.New(slog.DiscardHandler)}
	defer l.detachIdmaps()
	return l.chooseUser()
}

// Interpreter implements kernel.Interpreter: the image's Python.
func (l *Launcher) Interpreter() string { return l.cfg.Python }

// User returns the uid and gid the kernel runs as.
func (l *Launcher) User() (uid, gid int) { return l.uid, l.gid }

// CheckBind validates a bind: an absolute host directory, and a relative,
// clean path under /app that is not the workspace.
func CheckBind(b Bind) error {
	switch {
	case !filepath.IsAbs(b.HostPath):
		return fmt.Errorf("container bind %q: the host path must be absolute", b.HostPath)
	case b.Path == "" || filepath.IsAbs(b.Path):
		return fmt.Errorf("container bind %s:%s: the container path must be relative (it is mounted under %s/)", b.HostPath, b.Path, BindRoot)
	case strings.ContainsAny(b.Path, ":,\x00"):
		return fmt.Errorf("container bind %s:%s: the container path must not contain ':', ',' or NUL", b.HostPath, b.Path)
	}
	clean := filepath.Clean(b.Path)
	if clean != strings.TrimSuffix(b.Path, "/") || clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return fmt.Errorf("container bind %s:%s: the container path must be clean and stay under %s/ (no '.', '..' or '//')", b.HostPath, b.Path, BindRoot)
	}
	if top, _, _ := strings.Cut(clean, "/"); top == "workspace" {
		return fmt.Errorf("container bind %s:%s: %s is the workspace; choose another path", b.HostPath, b.Path, WorkspaceDir)
	}
	return nil
}

// Start implements kernel.Launcher.
func (l *Launcher) Start(ctx context.Context, spec *kernel.Spec) (kernel.Process, error) {
	if l.closed.Load() {
		return nil, errors.New("container: launcher closed")
	}
	sockDir := spec.SocketDir
	if sockDir == "" {
		sockDir = spec.RunDir
	}
	if err := l.handOver(spec.RunDir, sockDir); err != nil {
		return nil, err
	}
	sockSrc, detach := l.plainSockets(sockDir)
	// The container holds its own bind of the clone once it has started.
	defer detach()
	mounts, err := l.workspaceMounts(spec.RunDir, sockDir, sockSrc)
	if err != nil {
		return nil, err
	}
	prot, masks, err := l.protectionMounts(spec.RunDir)
	if err != nil {
		return nil, err
	}
	mounts = append(mounts, masks...)
	binds, err := l.bindMounts()
	if err != nil {
		return nil, err
	}
	mounts = append(mounts, binds...)
	entry, initMount, err := l.entrypoint(spec.RunDir, sockDir, prot)
	if err != nil {
		return nil, err
	}
	mounts = append(mounts, initMount...)
	return l.run(ctx, spec, l.createConfig(spec, mounts, entry))
}

// plainSockets returns the bind source of the kernel's own socket
// directory, which it writes: under root, a clone of it without setuid or
// devices (plainMount), like every other folder the kernel writes, and
// the function that detaches that clone; else the directory itself.
func (l *Launcher) plainSockets(sockDir string) (string, func()) {
	if os.Geteuid() != 0 {
		return sockDir, func() {}
	}
	at, err := plainMount(sockDir)
	if err != nil {
		l.log.Warn("the kernel's socket directory is mounted without nosuid,nodev; the kernel's guard still refuses set-id files", "dir", sockDir, "err", err)
		return sockDir, func() {}
	}
	return at, func() {
		if err := detachIdmap(at); err != nil {
			l.log.Warn("detaching a clone of the kernel's socket directory", "at", at, "err", err)
		}
	}
}

// handOver makes, under root, the kernel's own directory and the sockets
// it dials its user's. The run directory stays root's (0711: no listing).
func (l *Launcher) handOver(runDir, sockDir string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	if err := os.Chmod(runDir, 0o711); err != nil {
		return fmt.Errorf("container: %w", err)
	}
	for _, p := range append([]string{sockDir}, l.cfg.Sockets...) {
		if err := os.Lchown(p, l.uid, l.gid); err != nil {
			return fmt.Errorf("container: %w", err)
		}
	}
	filepath.WalkDir(sockDir, func(p string, _ os.DirEntry, err error) error {
		if err == nil {
			os.Lchown(p, l.uid, l.gid)
		}
		return nil
	})
	return nil
}

// workspaceMounts are the workspace (through its idmapped mount, when it
// has one), the run directory (read-only, but for the kernel's own
// directory), and the workspace's read-only and writable folders.
func (l *Launcher) workspaceMounts(runDir, sockDir, sockSrc string) ([]docker.Mount, error) {
	mounts := []docker.Mount{
		{Type: "bind", Source: l.wsSource, Target: WorkspaceDir},
		{Type: "bind", Source: runDir, Target: runDir, ReadOnly: true},
	}
	if sockDir != runDir {
		mounts = append(mounts, docker.Mount{Type: "bind", Source: sockSrc, Target: sockDir})
	}
	for i, rel := range slices.Concat(l.cfg.ReadOnly, l.cfg.Hidden) {
		p := filepath.Join(l.cfg.Workspace, rel)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, fmt.Errorf("container: %w", err)
		}
		// The workspace is kernel-writable: Docker would follow a link
		// planted here and show its target to the kernel.
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("container: %s is not a directory (a symbolic link?); remove it", p)
		}
		if i < len(l.cfg.ReadOnly) {
			mounts = append(mounts, docker.Mount{Type: "bind", Source: p, Target: filepath.Join(WorkspaceDir, rel), ReadOnly: true})
			continue
		}
		// An empty folder of the run directory, read-only, with the mount
		// points of the Writable folders below it made in advance (a
		// tmpfs would take the mode of the folder it covers, which the
		// kernel's user may not search).
		empty := filepath.Join(runDir, "hidden", strconv.Itoa(i))
		if err := os.MkdirAll(empty, 0o755); err != nil {
			return nil, fmt.Errorf("container: %w", err)
		}
		for _, w := range l.cfg.Writable {
			if sub, ok := strings.CutPrefix(filepath.Clean(w), filepath.Clean(rel)+string(filepath.Separator)); ok {
				if err := os.MkdirAll(filepath.Join(empty, sub), 0o755); err != nil {
					return nil, fmt.Errorf("container: %w", err)
				}
			}
		}
		mounts = append(mounts, docker.Mount{Type: "bind", Source: empty, Target: filepath.Join(WorkspaceDir, rel), ReadOnly: true})
	}
	for _, rel := range l.cfg.Writable {
		p := filepath.Join(l.cfg.Workspace, rel)
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("container: %s is not a directory (a symbolic link?); remove it", p)
		}
		// Through the workspace's idmapped mount, when it has one: the
		// kernel's user writes what root owns there.
		src := p
		if l.wsSource != l.cfg.Workspace {
			src = filepath.Join(l.wsSource, rel)
		}
		mounts = append(mounts, docker.Mount{Type: "bind", Source: src, Target: filepath.Join(WorkspaceDir, rel)})
	}
	return mounts, nil
}

// protectionMounts computes the workspace's protection (Config.Protect),
// records its fingerprint, and returns it with its mounts: protected paths
// read-only, masked files as an empty file, masked folders as an empty,
// unlistable tmpfs. Only paths in the workspace are mounted: the
// container shows nothing else of the host.
func (l *Launcher) protectionMounts(runDir string) (*wsguard.Protection, []docker.Mount, error) {
	if l.cfg.Protect == nil {
		return nil, nil, nil
	}
	prot, err := l.cfg.Protect()
	if err != nil {
		return nil, nil, fmt.Errorf("container: %w", err)
	}
	l.startedFP.Store(prot.Fingerprint())
	empty := filepath.Join(runDir, "masked")
	if _, err := os.Lstat(empty); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(empty, nil, 0o444); err != nil {
			return nil, nil, fmt.Errorf("container: %w", err)
		}
	}
	var mounts []docker.Mount
	for _, p := range prot.ReadOnly {
		if l.inWorkspace(p) {
			mounts = append(mounts, docker.Mount{Type: "bind", Source: p, Target: l.path(p), ReadOnly: true})
		}
	}
	for _, p := range prot.Masks {
		if l.inWorkspace(p) {
			mounts = append(mounts, docker.Mount{Type: "bind", Source: empty, Target: l.path(p), ReadOnly: true})
		}
	}
	for _, p := range prot.MaskDirs {
		if l.inWorkspace(p) {
			mounts = append(mounts, docker.Mount{Type: "tmpfs", Target: l.path(p), ReadOnly: true,
				TmpfsOptions: &docker.TmpfsOptions{SizeBytes: 4096, Mode: 0o100}})
		}
	}
	return prot, mounts, nil
}

// bindMounts are Config.Binds, under BindRoot.
func (l *Launcher) bindMounts() ([]docker.Mount, error) {
	var mounts []docker.Mount
	for i, b := range l.cfg.Binds {
		if err := os.MkdirAll(b.HostPath, 0o755); err != nil {
			return nil, fmt.Errorf("container bind %s: %w", b.HostPath, err)
		}
		src := b.HostPath
		if at, ok := l.bindSources[i]; ok {
			src = at
		}
		mounts = append(mounts, docker.Mount{Type: "bind", Source: src, Target: filepath.Join(BindRoot, b.Path)})
	}
	return mounts, nil
}

// entrypoint is the container's first program: the shim (with the
// lifeline and the egress relay), under ipybox's own binary when
// Config.InitBinary is set, which applies the filter and the workspace
// guard; it returns that binary's mount too.
func (l *Launcher) entrypoint(runDir, sockDir string, prot *wsguard.Protection) ([]string, []docker.Mount, error) {
	life, err := l.lifeline(runDir)
	if err != nil {
		return nil, nil, err
	}
	entry := []string{l.cfg.Python, "-c", shim, life}
	if f := l.cfg.Forward; f != nil {
		entry = append(entry, "--forward", strconv.Itoa(f.Port), f.Socket)
	}
	entry = append(entry, "--")
	if l.cfg.InitBinary == "" {
		return entry, nil, nil
	}
	// The kernel runs under the filter (no setuid or setgid file, and the
	// workspace guard), applied by ipybox's own binary.
	pol, err := l.guardPolicy(prot, sockDir)
	if err != nil {
		return nil, nil, err
	}
	mount := docker.Mount{Type: "bind", Source: l.cfg.InitBinary, Target: initPath, ReadOnly: true}
	return append([]string{initPath, sandbox.InitCommand, "guard", pol, "--"}, entry...), []docker.Mount{mount}, nil
}

// createConfig is the container's configuration: no capabilities, no new
// privileges, a read-only root, a private /tmp, and Config's limits.
func (l *Launcher) createConfig(spec *kernel.Spec, mounts []docker.Mount, entry []string) *docker.CreateConfig {
	init := true
	cfg := &docker.CreateConfig{
		Image:      l.cfg.Image,
		Entrypoint: entry,
		Cmd:        spec.Args,
		Env:        l.env(spec.Env),
		User:       fmt.Sprintf("%d:%d", l.uid, l.gid),
		WorkingDir: l.path(spec.Dir),
		Labels: map[string]string{
			LabelKernel: filepath.Base(spec.RunDir),
			LabelOwner:  l.owner,
		},
		HostConfig: docker.HostConfig{
			Mounts:         mounts,
			Tmpfs:          map[string]string{"/tmp": "rw,nosuid,nodev,size=1g,mode=1777"},
			CapDrop:        []string{"ALL"},
			SecurityOpt:    []string{"no-new-privileges"},
			ReadonlyRootfs: true,
			Init:           &init,
			IpcMode:        "private",
		},
	}
	if l.cfg.NoNetwork {
		cfg.HostConfig.NetworkMode = "none"
	}
	if l.cfg.Memory > 0 {
		cfg.HostConfig.Memory = l.cfg.Memory
		cfg.HostConfig.MemorySwap = l.cfg.Memory
	}
	if l.cfg.Pids > 0 {
		cfg.HostConfig.PidsLimit = &l.cfg.Pids
	}
	if f := l.cfg.FileSize; f > 0 {
		cfg.HostConfig.Ulimits = append(cfg.HostConfig.Ulimits, docker.Ulimit{Name: "fsize", Soft: f, Hard: f})
	}
	return cfg
}

// run creates and starts the container, each call bounded by apiTimeout
// (the caller's ending context does not cut a create short: what was
// created is removed instead).
func (l *Launcher) run(ctx context.Context, spec *kernel.Spec, cfg *docker.CreateConfig) (kernel.Process, error) {
	name := fmt.Sprintf("ipybox-%s-%d", strings.TrimPrefix(filepath.Base(spec.RunDir), "ipybox-"), l.seq.Add(1))
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), apiTimeout)
	defer cancel()
	id, err := l.c.Create(actx, name, cfg)
	if err != nil {
		return nil, fmt.Errorf("container: create from %s: %w", l.cfg.Image, err)
	}
	p := newProcess(l.c, id, name, l.cfg.StopTimeout, l.log)
	if err := l.c.Start(actx, id); err != nil {
		p.remove()
		return nil, fmt.Errorf("container: start %s: %w", name, err)
	}
	if ctx.Err() != nil {
		p.remove()
		return nil, ctx.Err()
	}
	if in, err := l.c.Inspect(actx, id); err == nil {
		p.pid = in.State.Pid
	}
	p.follow(orDiscard(spec.Stdout), orDiscard(spec.Stderr))
	l.log.Debug("kernel container started", "name", name, "id", id[:12], "image", l.cfg.Image)
	return p, nil
}

// initPath is where InitBinary is mounted; sandbox.InitCommand is its
// hidden first argument.
const initPath = "/run/ipybox-init"

// guardPolicy is the guard's policy in the container's view: the
// workspace and the binds are its roots.
func (l *Launcher) guardPolicy(prot *wsguard.Protection, sockDir string) (string, error) {
	pol := seccomp.Policy{Roots: []string{WorkspaceDir}, Workspace: WorkspaceDir, SocketDirs: []string{"/tmp", "/dev/shm", sockDir}}
	for _, b := range l.cfg.Binds {
		pol.Roots = append(pol.Roots, filepath.Join(BindRoot, b.Path))
	}
	// The session's own folders of ipybox's state (its packages, its
	// snapshots), which hostpaths' list would refuse as .ipybox.
	for _, rel := range l.cfg.Writable {
		pol.Open = append(pol.Open, path.Join(WorkspaceDir, filepath.ToSlash(rel)))
	}
	if prot != nil {
		for _, p := range prot.Protected {
			if l.inWorkspace(p) {
				pol.Protected = append(pol.Protected, l.path(p))
			}
		}
		pol.GitRelative = prot.GitRelative
	}
	b, err := json.Marshal(pol)
	if err != nil {
		return "", fmt.Errorf("container: %w", err)
	}
	return string(b), nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// inWorkspace reports whether the host path p is below the workspace.
func (l *Launcher) inWorkspace(p string) bool {
	return strings.HasPrefix(p, l.cfg.Workspace+"/")
}

// path maps a host path to the container's view: the workspace to
// WorkspaceDir; anything else (the run directory) stays.
func (l *Launcher) path(p string) string {
	ws := l.cfg.Workspace
	if p == ws {
		return WorkspaceDir
	}
	if rest, ok := strings.CutPrefix(p, ws+"/"); ok {
		return WorkspaceDir + "/" + rest
	}
	return p
}

// env is the container's environment: the configured variables, then the
// kernel's, with host paths mapped and PATH and HOME those of the image.
func (l *Launcher) env(kernelEnv []string) []string {
	out := append([]string(nil), l.cfg.Env...)
	for _, kv := range kernelEnv {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH":
			v = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
		case "HOME":
			v = "/tmp"
		default:
			parts := strings.Split(v, ":")
			for i, s := range parts {
				if strings.HasPrefix(s, "/") {
					parts[i] = l.path(s)
				}
			}
			v = strings.Join(parts, ":")
		}
		out = append(out, k+"="+v)
	}
	return out
}

// process is a kernel container.
//
// Every call it makes to stop the container is bounded by stopTimeout,
// and so is the wait for the exit once the container was killed: a hung
// daemon must not hang the kernel's Close. After one such call timed out,
// the daemon counts as unresponsive for this container, which is then
// left for the next start to reap (by its labels) instead of being waited
// for again.
type process struct {
	c           *docker.Client
	id, name    string
	pid         int
	log         *slog.Logger
	stopTimeout time.Duration
	stopLogs    context.CancelFunc
	logsDone    chan struct{}
	gone        atomic.Bool
	rmOnce      sync.Once

	killedOnce sync.Once
	killed     chan struct{} // closed at the first Kill
	hungOnce   sync.Once
	hung       chan struct{} // closed when the daemon let a stop call time out

	exit *procexit.Exit // from follow on
}

func newProcess(c *docker.Client, id, name string, stopTimeout time.Duration, log *slog.Logger) *process {
	if stopTimeout <= 0 {
		stopTimeout = DefaultStopTimeout
	}
	return &process{
		c: c, id: id, name: name, log: log, stopTimeout: stopTimeout,
		logsDone: make(chan struct{}), killed: make(chan struct{}), hung: make(chan struct{}),
	}
}

// follow copies the container's output to stdout and stderr until it
// stops, or the wait gives up on it, and waits for its exit from now on.
func (p *process) follow(stdout, stderr io.Writer) {
	var lctx context.Context
	lctx, p.stopLogs = context.WithCancel(context.Background())
	go func() {
		defer close(p.logsDone)
		p.c.Logs(lctx, p.id, stdout, stderr)
	}()
	p.exit = procexit.Go(p.wait)
}

// errDaemonHung is returned by the stop calls of a container whose daemon
// has stopped answering.
var errDaemonHung = errors.New("the docker daemon does not answer")

// isHung reports whether the daemon let a stop call time out.
func (p *process) isHung() bool {
	select {
	case <-p.hung:
		return true
	default:
		return false
	}
}

// stopCall runs one Engine API call of a stop, bounded by stopTimeout.
// Unless it is a signal (an interrupt, which a daemon slow for a moment
// must not turn into the loss of the kernel), a timeout marks the daemon
// unresponsive.
func (p *process) stopCall(parent context.Context, what string, call func(ctx context.Context) error) error {
	if p.isHung() {
		return fmt.Errorf("container %s: %s: %w", p.name, what, errDaemonHung)
	}
	ctx, cancel := context.WithTimeout(parent, p.stopTimeout)
	defer cancel()
	err := call(ctx)
	if err != nil && parent.Err() != nil {
		return fmt.Errorf("container %s: %s: %w", p.name, what, parent.Err())
	}
	if err != nil && ctx.Err() != nil {
		if what != "signal" {
			p.markHung(what)
		}
		return fmt.Errorf("container %s: %s: %w (no answer within %v)", p.name, what, errDaemonHung, p.stopTimeout)
	}
	return err
}

// markHung records that the daemon did not answer, and says so once.
func (p *process) markHung(what string) {
	p.hungOnce.Do(func() {
		p.log.Warn("the docker daemon did not answer; the kernel container is left for the next start to reap",
			"name", p.name, "call", what, "timeout", p.stopTimeout)
		close(p.hung)
	})
}

// ID implements kernel.Process: the container's name.
func (p *process) ID() string { return p.name }

// Pid implements kernel.HostProcess: the host pid of the container's init.
func (p *process) Pid() int { return p.pid }

// Signal implements kernel.Process through the Engine API's kill: docker's
// init passes it on to the kernel.
func (p *process) Signal(ctx context.Context, sig syscall.Signal) error {
	if sig == syscall.SIGKILL {
		return p.Kill(ctx)
	}
	if p.gone.Load() {
		return os.ErrProcessDone
	}
	return notRunning(p.stopCall(ctx, "signal", func(ctx context.Context) error {
		return p.c.Kill(ctx, p.id, strconv.Itoa(int(sig)))
	}))
}

// Kill implements kernel.Process: the whole container ends.
func (p *process) Kill(ctx context.Context) error {
	p.killedOnce.Do(func() { close(p.killed) })
	if p.gone.Load() {
		return os.ErrProcessDone
	}
	return notRunning(p.stopCall(ctx, "kill", func(ctx context.Context) error {
		return p.c.Kill(ctx, p.id, "SIGKILL")
	}))
}

func notRunning(err error) error {
	var ae *docker.APIError
	if errors.As(err, &ae) && (ae.Status == 404 || ae.Status == 409) {
		return os.ErrProcessDone
	}
	return err
}

// Wait implements kernel.Process.
func (p *process) Wait(ctx context.Context) error { return p.exit.Wait(ctx) }

// wait waits for the container to stop, then removes it. Until a Kill it
// waits as long as the kernel runs; from a Kill on, stopTimeout at most,
// and not at all once the daemon is found unresponsive.
func (p *process) wait() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var bound sync.WaitGroup
	bound.Go(func() {
		select {
		case <-p.killed:
		case <-ctx.Done():
			return
		}
		t := time.NewTimer(p.stopTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			p.markHung("wait")
			cancel()
		case <-p.hung:
			cancel()
		case <-ctx.Done():
		}
	})
	code, err := p.c.Wait(ctx, p.id)
	cancel()
	bound.Wait() // bound: its goroutine ends with ctx, cancelled above
	p.gone.Store(true)
	if !p.isHung() {
		// The last output may still be on its way.
		select {
		case <-p.logsDone:
		case <-time.After(2 * time.Second):
		}
	}
	p.stopLogs()
	<-p.logsDone // bound: Logs ends with lctx, which stopLogs cancelled
	if p.isHung() {
		return fmt.Errorf("container %s: %w; it is left for the next start to reap", p.name, errDaemonHung)
	}
	oom := false
	// bound: stopTimeout (stopCall)
	if p.stopCall(context.Background(), "inspect", func(ctx context.Context) error {
		in, err := p.c.Inspect(ctx, p.id)
		if err == nil {
			oom = in.State.OOMKilled
		}
		return err
	}) != nil {
		oom = false
	}
	p.remove()
	switch {
	case err != nil:
		return err
	case oom:
		return fmt.Errorf("container %s: killed for running out of memory (exit status %d)", p.name, code)
	case code != 0:
		return fmt.Errorf("container %s: exit status %d", p.name, code)
	}
	return nil
}

// remove removes the container, once, bounded by stopTimeout.
func (p *process) remove() {
	p.rmOnce.Do(func() {
		// bound: stopTimeout (stopCall)
		if err := p.stopCall(context.Background(), "remove", func(ctx context.Context) error { return p.c.Remove(ctx, p.id, true) }); err != nil {
			p.log.Warn("could not remove kernel container; the next start reaps it", "name", p.name, "err", err)
		}
	})
}

// ownerLabel identifies a process across pid reuse: host name, pid and
// start time (from /proc).
func ownerLabel(pid int) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d/%s", host, pid, startTime(pid))
}

// startTime is field 22 of /proc/<pid>/stat, or "" when unknown.
func startTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// Reap removes kernel containers whose owner on this host has exited (a
// SIGKILLed ipybox leaves its containers behind). Containers of other
// hosts sharing the daemon are left alone.
func Reap(ctx context.Context, c *docker.Client, log *slog.Logger) int {
	list, err := c.List(ctx, LabelKernel)
	if err != nil {
		return 0
	}
	host, _ := os.Hostname()
	n := 0
	for _, ct := range list {
		if !Orphaned(ct.Labels[LabelOwner], host) {
			continue
		}
		if err := c.Remove(ctx, ct.ID, true); err == nil {
			n++
			log.Info("reaped a kernel container whose owner is gone", "name", strings.TrimPrefix(strings.Join(ct.Names, ","), "/"))
		}
	}
	return n
}

// Orphaned reports whether owner (a LabelOwner value) names a process of
// this host that no longer runs.
func Orphaned(owner, host string) bool {
	parts := strings.Split(owner, "/")
	if len(parts) != 3 || parts[0] != host {
		return false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil || pid <= 0 {
		return false
	}
	if processGone(pid) {
		return true
	}
	return startTime(pid) != parts[2]
}

// Leftovers lists the kernel containers on the daemon (for ipybox doctor):
// their names and whether their owner is gone.
func Leftovers(ctx context.Context, host string) (names []string, orphaned []bool, err error) {
	c, err := docker.New(host)
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	list, err := c.List(ctx, LabelKernel)
	if err != nil {
		return nil, nil, err
	}
	me, _ := os.Hostname()
	for _, ct := range list {
		names = append(names, strings.TrimPrefix(strings.Join(ct.Names, ","), "/"))
		orphaned = append(orphaned, Orphaned(ct.Labels[LabelOwner], me))
	}
	return names, orphaned, nil
}
