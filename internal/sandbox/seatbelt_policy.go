package sandbox

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"

	"github.com/ipybox/ipybox/internal/hostpaths"
)

// This file is the macOS sandbox's policy, built on any system so that it
// is tested here (seatbelt_policy_test.go); sandbox_darwin.go runs it.

// seatbeltPolicy turns the Config into a profile's policy. Seatbelt
// matches real paths (/private/var, not /var), so the paths the user
// configured are resolved, but never inside the workspace or another
// writable directory, where kernel code could plant a link: there only
// the directory itself is resolved, and the rest is kept as written.
func (s *Sandbox) seatbeltPolicy(writable, sockets, programs []string) (*seatbeltPolicy, error) {
	ws, err := filepath.EvalSymlinks(s.workspace)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	aw, err := expandAll(s.cfg.Filesystem.AllowWrite, s.workspace, s.home, false)
	if err != nil {
		return nil, err
	}
	// roots maps each writable directory, by the path configured and by
	// its real path, to its real path.
	roots := map[string]string{s.workspace: ws, ws: ws}
	var realWritable []string
	for _, w := range append(writable, aw...) {
		r, err := filepath.EvalSymlinks(w)
		if err != nil {
			return nil, fmt.Errorf("writable directory %s: %w", w, err)
		}
		roots[w], roots[r] = r, r
		realWritable = append(realWritable, r)
	}
	// real resolves p: within a writable directory only that directory,
	// elsewhere the longest existing prefix before any glob character.
	real := func(p string) string {
		for w, r := range roots {
			if under(p, w) {
				return r + strings.TrimPrefix(p, w)
			}
		}
		static := p
		if hasMeta(p) {
			static = staticPrefix(p)
		}
		for dir := static; dir != "/" && dir != "."; dir = filepath.Dir(dir) {
			if r, err := filepath.EvalSymlinks(dir); err == nil {
				return r + strings.TrimPrefix(p, dir)
			}
		}
		return p
	}
	pol := &seatbeltPolicy{Workspace: ws, Writable: realWritable, Sockets: sockets}
	for i, sk := range pol.Sockets {
		pol.Sockets[i] = real(sk)
	}
	if a, ok := s.proxyAddr.(*net.TCPAddr); ok && s.proxy != nil {
		pol.ProxyPort = a.Port
	}
	if s.cfg.RootMode != RootHost && s.home != "" {
		// The minimal root mode hides the home directory's contents (keys,
		// tokens, shell history); "host" shows the whole file system.
		pol.HideHome = []string{real(s.home)}
	}
	// What stays readable under a hidden home: the programs' prefixes
	// (bin/python's grandparent: a venv, a pyenv version) and extraRead.
	// A venv's pyvenv.cfg is not followed to its base interpreter: in the
	// workspace, kernel code could rewrite it to widen what it may read;
	// such a base under the home needs extraRead.
	extra, err := expandAll(s.cfg.ExtraRead, s.workspace, s.home, false)
	if err != nil {
		return nil, err
	}
	for _, prog := range programs {
		for _, p := range []string{prog, real(prog)} {
			if prefix := filepath.Dir(filepath.Dir(p)); prefix != "/" {
				extra = append(extra, prefix)
			}
		}
	}
	for _, e := range extra {
		if r := real(e); !slices.Contains(pol.ReadOnly, r) {
			pol.ReadOnly = append(pol.ReadOnly, r)
		}
	}

	denyRead, denyWrite, err := s.seatbeltDenials()
	if err != nil {
		return nil, err
	}
	for _, list := range []*[]string{&denyRead, &denyWrite} {
		var out []string
		for _, p := range *list {
			if r := real(p); !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
		*list = out
	}
	pol.DenyRead, pol.DenyWrite = denyRead, denyWrite
	return pol, nil
}

// seatbeltDenials lists what the profile denies: the configured denyRead
// and denyWrite paths, the workspace's secrets (masked and write-protected,
// as on Linux), the paths host programs read and act on anywhere in the
// workspace (internal/hostpaths), and what the host's git configuration
// names there.
func (s *Sandbox) seatbeltDenials() (denyRead, denyWrite []string, err error) {
	secrets := []string{filepath.Join(s.workspace, ".ipybox", "servers.json")}
	for _, e := range hostpaths.Entries {
		if e.Secret {
			secrets = append(secrets, hostGlobs(s.workspace, e)...)
		}
	}
	if ents, err := os.ReadDir(filepath.Join(s.workspace, ".ipybox")); err == nil {
		for _, e := range ents {
			if e.Name() != "venv" && !slices.Contains(s.writableState, filepath.Join(s.workspace, ".ipybox", e.Name())) {
				secrets = append(secrets, filepath.Join(s.workspace, ".ipybox", e.Name()))
			}
		}
	}
	if s.secrets != nil {
		secrets = append(secrets, s.secrets()...)
	}
	for _, l := range []struct {
		in  []string
		out *[]string
	}{{s.cfg.Filesystem.DenyRead, &denyRead}, {s.cfg.Filesystem.DenyWrite, &denyWrite}} {
		for _, p := range l.in {
			abs, err := expandPath(p, s.workspace, s.home)
			if err != nil {
				return nil, nil, err
			}
			*l.out = append(*l.out, abs)
		}
	}
	denyRead = append(denyRead, secrets...)
	denyWrite = append(denyWrite, secrets...)
	for _, e := range hostpaths.Entries {
		denyWrite = append(denyWrite, hostGlobs(s.workspace, e)...)
	}
	if prot, err := s.protection(); err == nil {
		denyWrite = append(denyWrite, prot.Protected...)
	}
	return denyRead, denyWrite, nil
}

// hostGlobs turns a hostpaths entry into the globs of the paths it
// protects below ws: the name and everything under it, at the root or at
// any depth, in any case (macOS file systems ignore case).
func hostGlobs(ws string, e hostpaths.Entry) []string {
	var b strings.Builder
	for _, r := range e.Pattern {
		if lo, up := unicode.ToLower(r), unicode.ToUpper(r); lo != up {
			b.WriteString("[" + string(lo) + string(up) + "]")
		} else {
			b.WriteRune(r)
		}
	}
	base := filepath.Join(ws, "**", b.String())
	if e.Root {
		base = filepath.Join(ws, b.String())
	}
	return []string{base, base + "/**"}
}
