package mcpserver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestRedteam4ConfinementVariants: more pairs of confinements than
// issue 34.4 shows. A session saved by a kernel under one is restored by
// a server under another only when that one is the same or stronger:
// the sandbox's host root mode (the whole host file system visible) is
// weaker than the minimal root; a container and the sandbox are not
// ordered; one more --bind folder is a change. Each such pair starts
// fresh, with the note, and the planted module of the package folder is
// not importable.
func TestRedteam4ConfinementVariants(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	hostRoot := ipybox.DefaultSandbox()
	hostRoot.RootMode = "host"
	type conf struct {
		sb    *ipybox.SandboxConfig
		ct    *ipybox.ContainerConfig
		binds []Bind
	}
	sandboxed := conf{sb: ipybox.DefaultSandbox()}
	container := conf{ct: &ipybox.ContainerConfig{}}
	cases := []struct {
		name     string
		from, to conf
	}{
		{"the same (control: restored)", sandboxed, conf{sb: ipybox.DefaultSandbox()}},
		{"minimal root to host root", sandboxed, conf{sb: hostRoot}},
		{"one more bind", sandboxed, conf{sb: ipybox.DefaultSandbox(), binds: []Bind{{HostPath: t.TempDir(), RelPath: "data"}}}},
		{"sandbox to container", sandboxed, container},
		{"container to sandbox", container, sandboxed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.from.ct != nil || c.to.ct != nil {
				testenv.NeedsDocker(t)
			}
			ws := t.TempDir()
			opts := func(cf conf) *Options {
				return &Options{Workspace: ws, Sandbox: cf.sb, Container: cf.ct, Binds: cf.binds, Sessions: SessionOptions{NoZygote: true}}
			}
			srv := newServer(t, opts(c.from))
			cs := connectHTTPAs(t, serveHTTP(t, srv), testToken, newVersion, nil)
			h := createSession(t, cs)
			if got := runIn(t, cs, h, `import sys, os
x = 42
pkg = [p for p in sys.path if 'packages' in p and os.access(p, os.W_OK)]
if pkg:
    open(os.path.join(pkg[0], 'planted_mod4.py'), 'w').write('PLANTED = 1\n')
print('planted', pkg, sys.path)`); !strings.Contains(got, "planted") {
				t.Fatalf("the kernel could not plant: %q", got)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			srv2 := newServer(t, opts(c.to))
			cs2 := connectHTTPAs(t, serveHTTP(t, srv2), testToken, newVersion, nil)
			got := runIn(t, cs2, h, "import importlib.util\nprint('x', globals().get('x'))\nprint('mod', importlib.util.find_spec('planted_mod4') is not None)")
			if strings.HasPrefix(c.name, "the same") {
				if !strings.Contains(got, "x 42") || !strings.Contains(got, "mod True") {
					t.Errorf("not restored under the same confinement, so the test shows nothing:\n%s", got)
				}
				return
			}
			if strings.Contains(got, "x 42") || strings.Contains(got, "mod True") || !strings.Contains(got, "restored only under the confinement that wrote it") {
				t.Errorf("restored under a confinement that is not as strong:\n%s", got)
			}
		})
	}
}
