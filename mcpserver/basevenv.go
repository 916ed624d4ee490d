package mcpserver

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/hostproc"
	"github.com/ipybox/ipybox/internal/safefs"
)

// When the base interpreter (--python, IPYBOX_PYTHON or discovery) is a
// virtualenv's own (PyPI's ipykernel in a venv), `python -m venv` makes
// the workspace's virtualenv from that venv's base (home = /usr/bin), so
// the named venv's packages would not be in it: the kernel would import
// the system's ipykernel, or none. So ipybox asks the base, on the host
// and isolated (-I, in the private folder of host processes), whether it
// is a venv and where its packages live; then
//   - it writes baseVenvPth into the workspace virtualenv when it makes
//     it, naming those folders (after the venv's own site-packages,
//     before the system's);
//   - the sandbox of the tenant's kernels and of the venv and pip helpers
//     shows that venv's prefix read-only (tenant.sandboxConfig).
// Both come from the base's answer, never from a file in the workspace
// (the virtualenv's .pth files and pyvenv.cfg are kernel-facing). A base
// that lies in a folder kernel code can write is not asked at all: asking
// runs it, and its venv's .pth files, on the host (invariant 14).

// baseVenvPth is the .pth file ipybox writes into the workspace virtualenv.
const baseVenvPth = "ipybox-base-venv.pth"

const baseVenvTimeout = 30 * time.Second

// baseVenvProbe prints whether the interpreter is a venv's, its prefix,
// and its purelib and platlib folders.
const baseVenvProbe = "import sys, sysconfig\nprint(sys.prefix != sys.base_prefix)\nprint(sys.prefix)\n" +
	"print(sysconfig.get_path('purelib'))\nprint(sysconfig.get_path('platlib'))"

// baseVenv is what a base interpreter that is a venv's said of itself.
type baseVenv struct {
	prefix string   // sys.prefix, links resolved
	sites  []string // purelib and platlib, each inside prefix
}

// writableByKernels lists the folders kernel code can write: the
// workspace (every tenant's folder) and the sandbox's allowWrite paths
// (the binds among them).
func (t *tenant) writableByKernels() []string {
	w := []string{t.dir, t.s.workspace} // other tenants' folders too
	if t.s.factory.sandbox != nil {
		for _, p := range t.s.factory.sandbox.Filesystem.AllowWrite {
			if filepath.IsAbs(p) {
				w = append(w, p)
			}
		}
	}
	return w
}

// probeBaseVenv asks base whether it is a venv's interpreter; nil when it
// is not, or cannot say (logged: the workspace virtualenv then gets only
// the system's packages, as before).
func (t *tenant) probeBaseVenv(ctx context.Context, base string) *baseVenv {
	writable := t.writableByKernels()
	for _, p := range []string{filepath.Dir(base), base} {
		if w := hostproc.Inside(p, writable); w != "" {
			t.s.log.Warn("the Python interpreter lies in a folder kernel code can write; not asking it whether it is a virtualenv's (its packages are not added to the workspace's virtualenv)", "python", base, "folder", w)
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, baseVenvTimeout)
	defer cancel()
	out, err := runCommand(ctx, t.dir, helperEnv(nil), base, "-I", "-c", baseVenvProbe)
	if err != nil {
		t.s.log.Warn("could not ask the Python interpreter whether it is a virtualenv's", "python", base, "err", err, "output", clipTo(string(out), 512))
		return nil
	}
	bv, err := parseBaseVenv(string(out), writable)
	if err != nil {
		t.s.log.Warn("the Python interpreter's answer about its virtualenv is not usable", "python", base, "err", err)
		return nil
	}
	return bv
}

// parseBaseVenv reads baseVenvProbe's answer: nil, nil when the
// interpreter is not a venv's. The prefix must be absolute, not /, not
// under /usr (the sandbox shows /usr anyway; a venv there is the
// system's) and not in a folder of writable; a package folder counts only
// inside the prefix.
func parseBaseVenv(out string, writable []string) (*baseVenv, error) {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 4 {
		return nil, fmt.Errorf("unexpected answer %q", clipTo(out, 512))
	}
	if lines[0] != "True" {
		return nil, nil
	}
	prefix, err := filepath.EvalSymlinks(lines[1])
	if err != nil || !filepath.IsAbs(prefix) {
		return nil, fmt.Errorf("prefix %q: not an existing absolute folder", lines[1])
	}
	if prefix == "/" || prefix == "/usr" || strings.HasPrefix(prefix, "/usr/") {
		return nil, fmt.Errorf("prefix %s: the system's", prefix)
	}
	if w := hostproc.Inside(prefix, writable); w != "" {
		return nil, fmt.Errorf("prefix %s lies in %s, which kernel code can write", prefix, w)
	}
	bv := &baseVenv{prefix: prefix}
	for _, l := range lines[2:] {
		p, err := filepath.EvalSymlinks(l)
		if err != nil || !filepath.IsAbs(p) || !strings.HasPrefix(p, prefix+"/") || slices.Contains(bv.sites, p) {
			continue
		}
		bv.sites = append(bv.sites, p)
	}
	if len(bv.sites) == 0 {
		return nil, fmt.Errorf("no package folder inside the prefix %s in %q", prefix, clipTo(out, 512))
	}
	return bv, nil
}

// writeBaseVenvPth writes baseVenvPth into the site-packages of the
// virtualenv being made in dir, naming bv's package folders.
func writeBaseVenvPth(dir string, bv *baseVenv) error {
	site, err := venvSitePackages(dir)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(dir, filepath.Join(site, baseVenvPth))
	if err != nil {
		return err
	}
	body := "# ipybox: the packages of the base interpreter's virtualenv, " + bv.prefix + "\n" + strings.Join(bv.sites, "\n") + "\n"
	if err := safefs.WriteFile(dir, rel, []byte(body), 0o644); err != nil {
		return fmt.Errorf("create the virtualenv %s: %w", dir, err)
	}
	return nil
}

// sandboxConfig is the sandbox policy of the tenant's kernels and helpers:
// the server's, with the base venv's prefix read-only (nil without a
// sandbox). It is final once venvPython has returned (or, inside it, once
// the base was asked).
func (t *tenant) sandboxConfig() *ipybox.SandboxConfig {
	if t.s.factory.sandbox == nil || t.baseVenv == nil {
		return t.s.factory.sandbox
	}
	cp := *t.s.factory.sandbox
	cp.ExtraRead = append(slices.Clone(cp.ExtraRead), t.baseVenv.prefix)
	return &cp
}

// clipTo cuts s to n bytes.
func clipTo(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
