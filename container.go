package ipybox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"github.com/ipybox/ipybox/internal/container"
	"github.com/ipybox/ipybox/internal/egress"
	"github.com/ipybox/ipybox/internal/hostproc"
	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/sandbox"
	"github.com/ipybox/ipybox/internal/wsguard"
)

// DefaultContainerImage is the image ContainerConfig.Image defaults to: the
// one the repository's Dockerfile builds (scripts/image.sh).
const DefaultContainerImage = "ipybox:latest"

// ContainerConfig runs the kernel in a Docker container (Options.Container)
// through the Docker Engine API, at $DOCKER_HOST (unix:// or tcp://) or
// /var/run/docker.sock. The image is never pulled.
//
// The workspace is mounted at /app/workspace, and the run directory (the
// kernel's ipc sockets and the tool server's socket) at its host path, so
// no port is published. Every container runs as a non-root user (the
// caller's uid; under root, the workspace owner's, or, for a workspace
// root owns, 2000000000 through an idmapped mount of it), with
// all capabilities dropped, no-new-privileges, a read-only root and a
// tmpfs /tmp, memory and pids limits, and the workspace's .ipybox
// read-only and .env hidden.
type ContainerConfig struct {
	// Image is the image to run; it must have python3 with ipykernel.
	// Empty means DefaultContainerImage.
	Image string
	// Env is added to the container's environment. Options.KernelEnv and
	// ipybox's own variables win over it. Nil means nothing more.
	Env map[string]string
	// Binds mount host directories, read-write, under /app. Nil means
	// none.
	Binds []ContainerBind
	// Memory limits the container's memory (swap included), in bytes.
	// Zero means the sandbox's default (sandbox.DefaultMemory); negative
	// means no limit.
	Memory int64
	// Pids limits the container's processes and threads. Zero means the
	// sandbox's default (sandbox.DefaultPids); negative means no limit.
	Pids int
	// NoNetwork gives the container no network but loopback. False means
	// the default bridge network, with outbound traffic allowed.
	NoNetwork bool
	// AllowedDomains, when not empty, gives the container no network of
	// its own: it reaches only these destinations, through the sandbox's
	// egress proxy (HTTP_PROXY and HTTPS_PROXY point at it), whose rules
	// and private-address guard apply (see package sandbox). An entry is
	// a name ("pypi.org"), a wildcard ("*.github.com"), an IP address
	// ("192.0.2.1") or a CIDR range ("192.168.1.0/24"); an IP or range
	// listed here passes the guard for that range only. Nil means the
	// open network of NoNetwork's zero value.
	AllowedDomains []string
}

// ContainerBind mounts a host directory in a kernel container, read-write.
type ContainerBind struct {
	// HostPath is the host directory, absolute or relative to the current
	// directory; it is created when missing.
	HostPath string
	// Path is where it appears, relative to /app: "data" is /app/data.
	Path string
}

// startContainer prepares the container backend: it checks the daemon and
// the image, and reaps containers of dead owners.
func (e *Executor) startContainer(ctx context.Context) (*container.Launcher, error) {
	c := e.opts.Container
	cfg := container.Config{
		Image:     c.Image,
		Workspace: e.workspace,
		Hidden:    []string{".ipybox"},
		Sockets:   []string{filepath.Join(e.runDir, "tool.sock")},
		NoNetwork: c.NoNetwork,
		Logger:    e.log,
	}
	if cfg.Image == "" {
		cfg.Image = DefaultContainerImage
	}
	cfg.Env = envList(c.Env)
	for _, b := range c.Binds {
		host, err := filepath.Abs(b.HostPath)
		if err != nil {
			return nil, fmt.Errorf("container bind %q: %w", b.HostPath, err)
		}
		cfg.Binds = append(cfg.Binds, container.Bind{HostPath: host, Path: b.Path})
	}
	switch {
	case c.Memory == 0:
		cfg.Memory = sandbox.DefaultMemory
	case c.Memory > 0:
		cfg.Memory = c.Memory
	}
	switch {
	case c.Pids == 0:
		cfg.Pids = int64(sandbox.DefaultPids)
	case c.Pids > 0:
		cfg.Pids = int64(c.Pids)
	}
	cfg.FileSize = sandbox.DefaultFileSize
	if len(c.AllowedDomains) > 0 {
		if err := e.startEgress(c.AllowedDomains, &cfg); err != nil {
			return nil, err
		}
	}
	if runtime.GOOS != "linux" {
		return nil, errors.New("container: the container backend runs on Linux only (the run directory's unix sockets are shared with the container)")
	}
	// The kernel runs under ipybox's own binary in the container: the
	// seccomp filter and the workspace guard, as in the sandbox.
	init, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("container: the ipybox binary, to run the kernel under its guard: %w", err)
	}
	if w := hostproc.ProgramInside(init, kernelWritable(e.workspace, &e.opts)); w != "" {
		// In a folder kernel code writes (./ipybox in the workspace): a
		// program renamed over it would be the container's first
		// process, before the guard. Bind a private copy instead.
		found := init
		if init, err = sandbox.PrivateInitBinary(kernelWritable(e.workspace, &e.opts)); err != nil {
			return nil, fmt.Errorf("container: the ipybox binary %s lies in %s, which kernel code can write, and a private copy failed: %w; move the binary out of the workspace", found, w, err)
		}
	}
	cfg.InitBinary = init
	cfg.Protect = func() (*wsguard.Protection, error) {
		home, _ := os.UserHomeDir()
		return wsguard.Protect(wsguard.Input{Workspace: e.workspace, Home: home, Secrets: e.secretFiles, Log: e.log})
	}
	for _, d := range e.ownState() {
		rel, _ := filepath.Rel(e.workspace, d)
		cfg.Writable = append(cfg.Writable, rel)
	}
	l, err := container.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	e.container = l
	return l, nil
}

// proxyEnv points HTTP clients in the container at the egress proxy.
var proxyEnv = []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"}

// startEgress serves the egress proxy on a unix socket in the run
// directory, relayed to 127.0.0.1:sandbox.ProxyPort in a container that
// has no network of its own.
func (e *Executor) startEgress(allowed []string, cfg *container.Config) error {
	probe := sandbox.DefaultConfig()
	if err := probe.AllowDomains(allowed...); err != nil {
		return fmt.Errorf("container: %w", err)
	}
	rules, err := egress.NewRules(egress.Lists{AllowedDomains: allowed})
	if err != nil {
		return fmt.Errorf("container: %w", err)
	}
	sock := filepath.Join(e.runDir, "egress.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("container egress proxy: %w", err)
	}
	// The same proxy, rules and private-address guard as a sandbox's, for
	// a kernel container with no network of its own.
	p := egress.New(rules, &egress.Options{Decided: e.egressDecided}, e.log)
	p.Serve(ln)
	e.stopEgress = p.Close
	cfg.NoNetwork = true
	cfg.Sockets = append(cfg.Sockets, sock)
	cfg.Forward = &sandbox.Forward{Port: sandbox.ProxyPort, Socket: sock}
	url := fmt.Sprintf("http://127.0.0.1:%d", sandbox.ProxyPort)
	for _, k := range proxyEnv {
		cfg.Env = append(cfg.Env, k+"="+url)
	}
	// Loopback goes direct, unless the allowlist names a loopback address
	// (the host's, which only the proxy reaches).
	cfg.Env = append(cfg.Env, "NO_PROXY="+rules.NoProxy(), "no_proxy="+rules.NoProxy())
	return nil
}

var _ kernel.Interpreter = (*container.Launcher)(nil)
