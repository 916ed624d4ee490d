package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/container"
	"github.com/ipybox/ipybox/internal/docker"
	"github.com/ipybox/ipybox/internal/mcpconn"
	"github.com/ipybox/ipybox/internal/sandbox"
)

// containerFlags are the container flags of exec and mcp, those of
// upstream ipybox 0.6 (seed 000). Any of them runs the kernel in a Docker
// container; --container-tag names its image.
type containerFlags struct {
	tag     string
	envVars stringList
	envFile string
	binds   stringList
}

func (f *containerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.tag, "container-tag", "", "run the kernel in a Docker container from `IMAGE` (default "+ipybox.DefaultContainerImage+" when another --container-* flag is given; built from this binary on first use when missing, never pulled); the workspace is at "+container.WorkspaceDir)
	fs.Var(&f.envVars, "container-env-var", "`KEY=VALUE` for the container's environment (repeatable; overrides --container-env-file)")
	fs.StringVar(&f.envFile, "container-env-file", "", "`FILE` of KEY=VALUE lines (.env format) for the container's environment")
	fs.Var(&f.binds, "container-bind", "`HOST:REL` mounts the host directory HOST (absolute or relative; created if missing) at /app/REL in the container (repeatable)")
}

func (f *containerFlags) active() bool {
	return f.tag != "" || len(f.envVars) > 0 || f.envFile != "" || len(f.binds) > 0
}

// config returns the container the flags ask for, or nil for none. The
// sandbox flags' --memory and --pids limit it; --sandbox and
// --sandbox-config contradict it.
func (f *containerFlags) config(s *sandboxFlags) (*ipybox.ContainerConfig, error) {
	if !f.active() {
		return nil, nil
	}
	if s.on || s.config != "" {
		return nil, errors.New("--sandbox and --sandbox-config contradict --container-*: the container is the kernel's boundary; choose one")
	}
	c := &ipybox.ContainerConfig{Image: f.tag, Env: map[string]string{}}
	if len(s.domains) > 0 {
		// Checked here, so that a bad pattern is a usage error.
		if err := sandbox.DefaultConfig().AllowDomains(s.domains...); err != nil {
			return nil, fmt.Errorf("--allowed-domain: %w", err)
		}
		c.AllowedDomains = s.domains
	}
	if f.envFile != "" {
		m, err := mcpconn.LoadDotEnv(f.envFile)
		if err != nil {
			return nil, fmt.Errorf("--container-env-file: %w", err)
		}
		maps.Copy(c.Env, m)
	}
	for _, kv := range f.envVars {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t\x00") {
			return nil, fmt.Errorf("--container-env-var %q: want KEY=VALUE", kv)
		}
		c.Env[k] = v
	}
	for _, b := range f.binds {
		host, rel, ok := strings.Cut(b, ":")
		if !ok || host == "" || rel == "" {
			return nil, fmt.Errorf("--container-bind %q: want HOST:REL, such as ./data:data (mounted at /app/data)", b)
		}
		abs, err := filepath.Abs(host)
		if err != nil {
			return nil, fmt.Errorf("--container-bind %q: %w", b, err)
		}
		if err := container.CheckBind(container.Bind{HostPath: abs, Path: rel}); err != nil {
			return nil, fmt.Errorf("--container-bind %q: %w", b, err)
		}
		c.Binds = append(c.Binds, ipybox.ContainerBind{HostPath: abs, Path: rel})
	}
	if s.memory != "" {
		n, err := sandbox.ParseSize(s.memory)
		if err != nil {
			return nil, fmt.Errorf("--memory: %w", err)
		}
		if n > 0 && n < 64<<20 {
			return nil, fmt.Errorf("--memory %s is too small for Python; give at least 64m", s.memory)
		}
		c.Memory = n
	}
	switch {
	case s.pids > 0 && s.pids < 16:
		return nil, fmt.Errorf("--pids %d is too small for a kernel (it runs several threads); give at least 16, or -1 for no limit", s.pids)
	case s.pids < 0:
		c.Pids = -1
	case s.pids > 0:
		c.Pids = s.pids
	}
	return c, nil
}

// containerProbe checks, before kernels start in the background, that the
// Docker daemon answers and has the image: otherwise the failure would
// show only as retries in the log. With build set, a missing default
// image is built (ensureImage); without, its absence is the error.
func containerProbe(ctx context.Context, c *ipybox.ContainerConfig, build io.Writer) error {
	img := c.Image
	if img == "" {
		img = ipybox.DefaultContainerImage
	}
	cl, err := docker.New("")
	if err != nil {
		return err
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := cl.Ping(pctx); err != nil {
		return fmt.Errorf("docker is not available: %w; start dockerd (scripts/dockerd.sh) or set DOCKER_HOST", err)
	}
	_, err = cl.ImageInspect(pctx, img)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, docker.ErrNotFound):
		return err
	case build != nil && img == ipybox.DefaultContainerImage:
		return buildDefaultImage(ctx, build)
	case img == ipybox.DefaultContainerImage:
		return fmt.Errorf("image %q is not on this host; ipybox builds it on the first use of --container-tag (scripts/image.sh builds it from a checkout)", img)
	}
	return fmt.Errorf("image %q is not on this host (ipybox never pulls); build it or docker pull it (ipybox builds %s itself on the first use of --container-tag)", img, ipybox.DefaultContainerImage)
}

// buildDefaultImage builds ipybox.DefaultContainerImage from the running
// binary and the Dockerfile built into it (container.BuildImage), with a
// progress line per step on w. Only the default image is built: any
// other tag is the user's to build.
func buildDefaultImage(ctx context.Context, w io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("the ipybox binary, for the image: %w", err)
	}
	fmt.Fprintf(w, "ipybox: the image %s is missing; building it once, from this binary and Debian's packages (minutes the first time)\n", ipybox.DefaultContainerImage)
	return container.BuildImage(ctx, "", ipybox.DefaultContainerImage, exe, release, func(line string) {
		fmt.Fprintf(w, "ipybox: image: %s\n", line)
	})
}
