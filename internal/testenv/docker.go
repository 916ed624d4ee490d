package testenv

import (
	"context"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/docker"
)

// TestImage is the image the container tests run: $IPYBOX_TEST_IMAGE, or
// ipybox:latest (built by scripts/image.sh).
func TestImage() string {
	if s := os.Getenv("IPYBOX_TEST_IMAGE"); s != "" {
		return s
	}
	return "ipybox:latest"
}

// NeedsDocker returns the image for container tests after checking that a
// Docker daemon answers (at $DOCKER_HOST or the default socket) and has
// the image; otherwise it skips t locally and fails it in CI.
func NeedsDocker(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("tier 3 test: skipped with -short")
	}
	if runtime.GOOS != "linux" {
		// Not missing: the backend shares unix sockets with the container
		// through a bind mount, which Docker Desktop's VM cannot do.
		t.Skip("the container backend runs on Linux only")
	}
	c, err := docker.New("")
	if err != nil {
		Missing(t, "docker: %v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx); err != nil {
		Missing(t, "docker daemon: %v; run scripts/setup.sh (it starts dockerd)", err)
	}
	img := TestImage()
	if _, err := c.ImageInspect(ctx, img); err != nil {
		Missing(t, "image %s: %v; run scripts/image.sh", img, err)
	}
	return img
}
