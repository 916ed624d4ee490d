package container

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/docker"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestImageDockerfileMatchesRepository keeps the Dockerfile ipybox builds
// its default image from equal to the repository Dockerfile's final stage
// (but for the binary's COPY), so that the image is the same whoever
// builds it, and the two builds share the daemon's cache.
func TestImageDockerfileMatchesRepository(t *testing.T) {
	repo, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stages := regexp.MustCompile(`(?m)^FROM `).FindAllIndex(repo, -1)
	if len(stages) != 2 {
		t.Fatalf("the repository Dockerfile has %d stages, want 2 (a Go build stage and the image); update internal/container/image.Dockerfile with it", len(stages))
	}
	final := string(repo[stages[1][0]:])
	const from, to = "COPY --from=build /out/ipybox /usr/local/bin/ipybox\n", "COPY ipybox /usr/local/bin/ipybox\n"
	if strings.Count(final, from) != 1 {
		t.Fatalf("the repository Dockerfile's final stage does not copy the binary with %q", from)
	}
	final = strings.Replace(final, from, to, 1)
	ours := string(imageDockerfile)
	i := strings.Index(ours, "\nFROM ")
	if i < 0 || ours[i+1:] != final {
		t.Errorf("internal/container/image.Dockerfile is not the repository Dockerfile's final stage with %q; copy it again", strings.TrimSpace(to))
	}
	for _, arg := range []string{"ARG BASE=debian:bookworm-slim\n", "ARG VERSION=devel\n"} {
		if i < 0 || !strings.Contains(ours[:i], arg) || !strings.Contains(string(repo[:stages[0][0]]), arg) {
			t.Errorf("both Dockerfiles must declare %q before their stages", strings.TrimSpace(arg))
		}
	}
}

// TestBuildImage builds the default image as ipybox does on its first use
// (under another tag): a progress line for each step, the binary given at
// /usr/local/bin/ipybox, a Python with ipykernel, and the release label.
func TestBuildImage(t *testing.T) {
	testenv.NeedsDocker(t)
	tag := fmt.Sprintf("ipybox-firstuse-test:%d-%d", os.Getpid(), time.Now().UnixNano())
	c, err := docker.New("")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.ImageRemove(ctx, tag); err != nil {
			t.Errorf("removing %s: %v", tag, err)
		}
	})
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var lines []string
	ctx := context.Background()
	err = BuildImage(ctx, "", tag, exe, "9.8.7-test", func(l string) {
		mu.Lock()
		lines = append(lines, l)
		mu.Unlock()
	})
	if err != nil {
		t.Fatalf("BuildImage: %v\n%s", err, strings.Join(lines, "\n"))
	}
	t.Logf("progress:\n%s", strings.Join(lines, "\n"))
	steps := 0
	total := ""
	for _, l := range lines {
		if m := regexp.MustCompile(`^Step ([0-9]+)/([0-9]+) : .* \([0-9]+ s\)$`).FindStringSubmatch(l); m != nil {
			steps++
			total = m[2]
			if m[1] != fmt.Sprint(steps) {
				t.Errorf("progress line %q out of order (want step %d)", l, steps)
			}
		}
	}
	if steps == 0 || fmt.Sprint(steps) != total {
		t.Errorf("%d step lines, want one per step (%s)", steps, total)
	}

	want := fmt.Sprintf("%x", sha256sum(t, exe))
	out := runIn(t, c, tag, "import hashlib, ipykernel, matplotlib; print(hashlib.sha256(open('/usr/local/bin/ipybox','rb').read()).hexdigest())")
	if strings.TrimSpace(out) != want {
		t.Errorf("the image's /usr/local/bin/ipybox has sha256 %q, want the given binary's %s", strings.TrimSpace(out), want)
	}
	img, err := c.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	if v := img.Config.Labels["org.opencontainers.image.version"]; v != "9.8.7-test" {
		t.Errorf("version label %q, want 9.8.7-test", v)
	}
}

func sha256sum(t *testing.T, path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return s[:]
}

// runIn runs python3 -c code in a container of image, and returns its
// output.
func runIn(t *testing.T, c *docker.Client, image, code string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, err := c.Create(ctx, "", &docker.CreateConfig{Image: image, Entrypoint: []string{"python3", "-c", code}, Cmd: []string{}, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Remove(context.Background(), id, true)
	if err := c.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if code, err := c.Wait(ctx, id); err != nil || code != 0 {
		var out testenv.Buffer
		c.Logs(ctx, id, &out, &out)
		t.Fatalf("python3 in %s: exit %d, %v\n%s", image, code, err, out.String())
	}
	var out testenv.Buffer
	if err := c.Logs(ctx, id, &out, nil); err != nil {
		t.Fatal(err)
	}
	return out.String()
}
