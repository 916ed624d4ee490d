package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/ipybox/ipybox/internal/testenv"
)

// TestContainerMissingTagNotBuilt: only the default image is built on
// first use (TestBuildImage builds it); a missing image of any other tag
// ends exec at once, before a kernel, with what to do, and nothing is
// built or pulled.
func TestContainerMissingTagNotBuilt(t *testing.T) {
	testenv.NeedsDocker(t)
	tag := fmt.Sprintf("ipybox-missing-test:%d", os.Getpid())
	stdout, stderr, code := runBinary(t, "", "exec", "--workspace", containerDir(t, 0), "--container-tag", tag, "-c", "print('ran')")
	if code != exitFail || stdout != "" {
		t.Fatalf("exit %d, stdout %q, want %d and nothing (stderr %q)", code, stdout, exitFail, stderr)
	}
	for _, want := range []string{`--container-tag: image "` + tag + `" is not on this host (ipybox never pulls)`, "builds ipybox:latest itself on the first use"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q lacks %q", stderr, want)
		}
	}
	if strings.Contains(stderr, "building") {
		t.Errorf("a build started for %s: %q", tag, stderr)
	}
}
