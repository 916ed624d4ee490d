package ipybox_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestContainerInitBinaryInKernelWritable (the class of acc3 attack 18):
// when ipybox's binary lies in a folder kernel code can write (here the
// test binary's folder, named in KernelWritable, as ./ipybox in the
// workspace would be), the container's first process is a private copy
// of it, not the file there; the kernel runs as before.
func TestContainerInitBinaryInKernelWritable(t *testing.T) {
	testenv.NeedsDocker(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ex := startContainer(t, nil, &ipybox.Options{KernelWritable: []string{filepath.Dir(self)}})
	got := cellText(t, ex, "print([l.split()[3] for l in open('/proc/self/mountinfo') if l.split()[4] == '/run/ipybox-init'])")
	t.Logf("init mount: %s", got)
	if strings.Contains(got, filepath.Base(filepath.Dir(self))) || !strings.Contains(got, "ipybox-init-") {
		t.Errorf("the container's init binary is bound from %s, want the private copy (ipybox-init-*)", got)
	}
}
