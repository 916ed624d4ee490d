package container

import (
	"archive/tar"
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/ipybox/ipybox/internal/docker"
)

// imageDockerfile is the default image's Dockerfile for a build by ipybox
// itself: the repository Dockerfile's final stage (see its header).
//
//go:embed image.Dockerfile
var imageDockerfile []byte

// LocalBase is the Debian base scripts/image.sh makes with debootstrap on
// a machine that cannot pull; BuildImage prefers it when the daemon has
// it, and otherwise builds FROM DebianBase (which the daemon pulls).
const (
	LocalBase  = "ipybox-base:bookworm"
	DebianBase = "debian:bookworm-slim"
)

// BuildTimeout bounds BuildImage: a cold build installs a few hundred
// Debian packages (minutes on two cores).
const BuildTimeout = 30 * time.Minute

// BuildImage builds the default kernel image, tagged tag, on the daemon at
// host ("" for $DOCKER_HOST or the default socket), from the embedded
// Dockerfile and the ipybox binary at binary (the running executable; it
// becomes the image's /usr/local/bin/ipybox). Nothing of the working
// folder is read. version labels the image. progress gets one line per
// Dockerfile step, and one every 30 s of a long step, each with the
// seconds since the start.
func BuildImage(ctx context.Context, host, tag, binary, version string, progress func(string)) error {
	c, err := docker.New(host)
	if err != nil {
		return fmt.Errorf("container: %w", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, BuildTimeout)
	defer cancel()
	base := DebianBase
	if _, err := c.ImageInspect(ctx, LocalBase); err == nil {
		base = LocalBase
	} else if !errors.Is(err, docker.ErrNotFound) {
		return fmt.Errorf("container: image %s: %w", LocalBase, err)
	}
	tarball, err := buildContext(binary)
	if err != nil {
		return err
	}
	start := time.Now()
	var mu sync.Mutex // step, and one progress call at a time
	step := "starting"
	say := func(s string) { // with mu held
		progress(fmt.Sprintf("%s (%d s)", s, int(time.Since(start).Seconds())))
	}
	mu.Lock()
	say("building " + tag + " FROM " + base)
	mu.Unlock()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the 30 s ticks; owned here, ended by done
		defer wg.Done()
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				mu.Lock()
				say("still at " + step)
				mu.Unlock()
			}
		}
	}()
	var last []string // the build's last lines (up to 20), for a failure
	err = c.Build(ctx, bytes.NewReader(tarball), tag, map[string]string{"BASE": base, "VERSION": version}, func(l string) {
		if m := stepLine.FindStringSubmatch(l); m != nil {
			mu.Lock()
			step = m[1]
			say(truncate(l, 100))
			mu.Unlock()
		}
		if last = append(last, l); len(last) > 20 {
			last = last[1:]
		}
	})
	close(done)
	wg.Wait() // bound: the ticker goroutine returns at done, closed above
	if err != nil {
		return fmt.Errorf("container: building %s: %w; scripts/image.sh builds it from a checkout; the build's last lines:\n  %s", tag, err, strings.Join(last, "\n  "))
	}
	say("built " + tag)
	return nil
}

// stepLine is the classic builder's line for each Dockerfile step.
var stepLine = regexp.MustCompile(`^(Step [0-9]+/[0-9]+) : `)

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// buildContext is the tar build context: the embedded Dockerfile and the
// binary, as "ipybox" (mode 0755).
func buildContext(binary string) ([]byte, error) {
	f, err := os.Open(binary)
	if err != nil {
		return nil, fmt.Errorf("container: the ipybox binary, for the image: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("container: the ipybox binary, for the image: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("container: the ipybox binary %s is not a regular file", binary)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files := []struct {
		name string
		mode int64
		size int64
		r    io.Reader
	}{
		{"Dockerfile", 0o644, int64(len(imageDockerfile)), bytes.NewReader(imageDockerfile)},
		{"ipybox", 0o755, st.Size(), f},
	}
	for _, e := range files {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: e.mode, Size: e.size, ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := io.CopyN(tw, e.r, e.size); err != nil {
			return nil, fmt.Errorf("container: the build context's %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
