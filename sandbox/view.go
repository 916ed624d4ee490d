package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Paths inside the sandbox that the launcher provides.
const (
	insideDir   = "/run/ipybox-sandbox"
	insideInit  = insideDir + "/init"
	insideProxy = insideDir + "/proxy.sock"
)

// ProxyPort is the TCP port on 127.0.0.1 inside the sandbox where the
// egress proxy listens (when allowedDomains is not empty); HTTP_PROXY and
// HTTPS_PROXY point there.
const ProxyPort = 3128

// namespaceFlags are the bwrap options every sandbox gets. With
// --as-pid-1 the init is pid 1 of the sandbox, instead of a reaper of
// bwrap's: a bwrap process inside would be one that the sandboxed code
// could ptrace (same uid, dumpable, no seccomp filter) and use to get
// around the filter. The init is not dumpable.
var namespaceFlags = []string{
	"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
	"--unshare-cgroup-try", "--disable-userns", "--cap-drop", "ALL",
	"--die-with-parent", "--new-session", "--as-pid-1",
}

// shellStartupFiles are write-protected when they exist in the workspace,
// and created empty (then protected) when the workspace is the home
// directory, where a shell would read them.
var shellStartupFiles = []string{
	".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
	".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout", ".gitconfig",
}

// viewInput is what one process adds to the sandbox's fixed layout.
type viewInput struct {
	runDir  string            // the kernel's run directory (writable); "" for Command
	dir     string            // working directory
	home    string            // $HOME of the process ("" when unset)
	extraRO []string          // more read-only host paths (the Python prefix)
	binds   map[string]string // inside path -> host path, bound read-only under insideDir
}

// view is the file-system layout of one sandboxed process.
type view struct {
	args     []string // bwrap options: namespaces, mounts, --chdir
	roots    []string // host paths visible inside (at the same path)
	writable []string // writable paths inside
}

// visible reports whether a host path is visible at the same path inside.
func (v *view) visible(p string) bool { return underAny(p, v.roots) }

// secretPath is a path under /etc that only its owner can read, and that
// a sandbox running as that owner (root) could otherwise read.
type secretPath struct {
	path string
	dir  bool
}

// scanEtc lists what must be masked under /etc: /etc/shadow and
// /etc/gshadow, and every file or directory that is not world-readable
// (ssh host keys, /etc/ssl/private, sudoers…).
func scanEtc(root string) []secretPath {
	var out []secretPath
	n := 0
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if n++; n > 50_000 {
			return filepath.SkipAll
		}
		if err != nil || d.Type()&fs.ModeSymlink != 0 || p == root {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		base := filepath.Base(p)
		forced := filepath.Dir(p) == root && (base == "shadow" || base == "gshadow" || base == "shadow-" || base == "gshadow-")
		if info.Mode().Perm()&0o004 == 0 || forced {
			out = append(out, secretPath{p, d.IsDir()})
			if d.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
	return out
}

// bind is one mount of a host path at the same path inside.
type bind struct {
	path string
	rw   bool
}

// buildView computes the bwrap options for one process. It may create
// placeholders in the workspace (see protectWorkspace).
func (s *Sandbox) buildView(in viewInput) (*view, error) {
	v := &view{}
	add := func(a ...string) { v.args = append(v.args, a...) }
	add(namespaceFlags...)
	add("--hostname", "ipybox")

	// The root: the minimal view, or the whole host read-only.
	if s.cfg.RootMode == RootHost {
		add("--ro-bind", "/", "/")
		v.roots = append(v.roots, "/")
	} else {
		add("--ro-bind", "/usr", "/usr")
		v.roots = append(v.roots, "/usr")
		for _, l := range []string{"/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"} {
			fi, err := os.Lstat(l)
			switch {
			case err != nil:
			case fi.Mode()&fs.ModeSymlink != 0:
				target, err := os.Readlink(l)
				if err != nil {
					return nil, fmt.Errorf("read link %s: %w", l, err)
				}
				add("--symlink", target, l)
			case fi.IsDir():
				add("--ro-bind", l, l)
				v.roots = append(v.roots, l)
			}
		}
		add("--ro-bind", "/etc", "/etc")
		v.roots = append(v.roots, "/etc")
	}
	add("--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp")
	v.writable = append(v.writable, "/tmp", "/dev")
	if s.cfg.RootMode == RootHost {
		// The host's shared temporary and runtime directories hold other
		// programs' sockets and files: replace them with private ones.
		for _, d := range []string{"/var/tmp", "/run"} {
			if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
				add("--tmpfs", d)
				v.writable = append(v.writable, d)
			}
		}
	}

	// The paths the process is given explicitly.
	ws := s.workspace
	var binds []bind
	addBind := func(p string, rw bool) {
		for i, b := range binds {
			if b.path == p {
				binds[i].rw = b.rw || rw
				return
			}
		}
		binds = append(binds, bind{p, rw})
	}
	for _, p := range in.extraRO {
		addBind(p, false)
	}
	extraRead, err := expandAll(s.cfg.ExtraRead, ws, s.home, false)
	if err != nil {
		return nil, fmt.Errorf("extraRead: %w", err)
	}
	for _, p := range extraRead {
		addBind(p, false)
	}
	denyWrite, err := s.resolveExisting(s.cfg.Filesystem.DenyWrite)
	if err != nil {
		return nil, fmt.Errorf("denyWrite: %w", err)
	}
	allowWrite, err := expandAll(s.cfg.Filesystem.AllowWrite, ws, s.home, false)
	if err != nil {
		return nil, fmt.Errorf("allowWrite: %w", err)
	}
	for _, p := range allowWrite {
		switch {
		case p == "/tmp" || p == "/private/tmp":
			s.log.Debug("sandbox: allowWrite /tmp: the sandbox has a private, writable /tmp; the host's is not shared")
		case p == "/":
			return nil, fmt.Errorf("allowWrite: %q would make the whole file system writable", p)
		case underAny(p, denyWrite):
			s.log.Warn("sandbox: allowWrite path is inside a denyWrite path; it stays read-only", "path", p)
			addBind(p, false)
		default:
			addBind(p, true)
		}
	}
	fixed := []string{ws}
	addBind(ws, true)
	if in.runDir != "" {
		addBind(in.runDir, true)
		fixed = append(fixed, in.runDir)
	}
	// Parents first, so that a nested bind overrides its parent.
	sort.SliceStable(binds, func(i, j int) bool { return len(binds[i].path) < len(binds[j].path) })
	for _, b := range binds {
		v.roots = append(v.roots, b.path)
		if b.rw {
			v.writable = append(v.writable, b.path)
		}
	}
	home := ""
	if s.cfg.RootMode == RootMinimal && in.home != "" && filepath.IsAbs(in.home) && in.home != "/" && !v.visible(filepath.Clean(in.home)) {
		// Python, IPython and pip expect a writable home; give a private one.
		home = filepath.Clean(in.home)
		v.writable = append(v.writable, home)
	}

	// denyRead: a mask that contains an explicit bind goes before the
	// binds (which then show through it); the others go after them.
	denyRead, err := s.resolveExisting(s.cfg.Filesystem.DenyRead)
	if err != nil {
		return nil, fmt.Errorf("denyRead: %w", err)
	}
	var early, late []secretPath
	for _, p := range denyRead {
		if !v.visible(p) {
			continue // not in the view anyway
		}
		if slices.Contains(fixed, p) || p == home {
			s.log.Warn("sandbox: denyRead names the workspace or the run directory; ignored", "path", p)
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		m := secretPath{p, fi.IsDir()}
		if m.dir && slices.ContainsFunc(binds, func(b bind) bool { return b.path != p && under(b.path, p) }) {
			if underAny(ws, []string{p}) {
				s.log.Warn("sandbox: denyRead contains the workspace; everything in it but the workspace is hidden", "path", p)
			}
			early = append(early, m)
			continue
		}
		late = append(late, m)
	}
	var remount []string
	for _, m := range early {
		// Traversable (so the binds inside stay reachable), not listable.
		add("--perms", "0111", "--tmpfs", m.path)
		remount = append(remount, m.path)
	}
	if home != "" {
		add("--tmpfs", home)
	}
	for _, b := range binds {
		if b.rw {
			add("--bind", b.path, b.path)
		} else {
			add("--ro-bind", b.path, b.path)
		}
	}

	// Write protection: the fixed list in the workspace, then denyWrite.
	prot, err := s.protectWorkspace()
	if err != nil {
		return nil, err
	}
	add(prot...)
	for _, p := range denyWrite {
		switch {
		case !underAny(p, v.writable):
			// Already read-only, or not visible.
		case slices.ContainsFunc(fixed, func(f string) bool { return under(f, p) }):
			s.log.Warn("sandbox: denyWrite contains the workspace or the run directory, which stay writable", "path", p)
		default:
			add("--ro-bind", p, p)
		}
	}

	// Masks: denyRead and the secrets under /etc.
	for _, e := range s.etcSecrets {
		late = append(late, e)
	}
	for _, m := range late {
		if m.dir {
			add("--perms", "0000", "--tmpfs", m.path)
			remount = append(remount, m.path)
		} else {
			add("--ro-bind", s.maskFile, m.path)
		}
	}

	// The launcher's own files.
	inside := make([]string, 0, len(in.binds))
	for k := range in.binds {
		inside = append(inside, k)
	}
	sort.Strings(inside)
	for _, k := range inside {
		add("--ro-bind", in.binds[k], k)
	}
	for _, p := range remount {
		add("--remount-ro", p)
	}
	if s.cfg.RootMode == RootMinimal {
		add("--remount-ro", "/")
	}
	dir := in.dir
	if dir == "" {
		dir = ws
	}
	if !v.visible(dir) && dir != home {
		return nil, fmt.Errorf("working directory %s is not visible in the sandbox; use a directory inside the workspace", dir)
	}
	add("--chdir", dir)
	return v, nil
}

// resolveExisting expands configured paths and resolves symbolic links, so
// that a mask lands on what a read would reach. Missing paths are dropped.
func (s *Sandbox) resolveExisting(list []string) ([]string, error) {
	m, err := expandAll(list, s.workspace, s.home, false)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range m {
		r, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out, nil
}

// protectWorkspace returns the bwrap options that write-protect the fixed
// list of workspace paths. Being mount points, they also cannot be removed
// or renamed from inside. It creates what must exist to be protected: the
// .ipybox directory, an empty .env, .git/hooks in an existing repository,
// and the shell start-up files when the workspace is the home directory.
func (s *Sandbox) protectWorkspace() ([]string, error) {
	ws := s.workspace
	var args []string
	ro := func(p string) { args = append(args, "--ro-bind", p, p) }

	// .ipybox holds the MCP server registry: read-only, but its venv stays
	// writable so that pip install works.
	ipy := filepath.Join(ws, ".ipybox")
	fi, err := os.Lstat(ipy)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Mkdir(ipy, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("create %s: %w", ipy, err)
		}
	case err != nil:
		return nil, err
	case !fi.IsDir():
		return nil, fmt.Errorf("%s is not a directory (a symbolic link?); refusing to start the sandbox: remove it", ipy)
	}
	ro(ipy)
	venv := filepath.Join(ipy, "venv")
	if fi, err := os.Lstat(venv); err == nil && fi.IsDir() {
		args = append(args, "--bind", venv, venv)
	}

	protectFile := func(name string, create bool) error {
		p := filepath.Join(ws, name)
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if !create {
				return nil
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("create placeholder %s: %w", p, err)
			}
			if f != nil {
				f.Close()
			}
		case err != nil:
			return err
		case fi.Mode()&fs.ModeSymlink != 0:
			s.log.Warn("sandbox: a protected workspace path is a symbolic link and cannot be write-protected", "path", p)
			return nil
		}
		ro(p)
		return nil
	}
	// .env feeds ${VAR} substitution on the host: protect it even when it
	// does not exist yet.
	if err := protectFile(".env", true); err != nil {
		return nil, err
	}
	envs, _ := filepath.Glob(filepath.Join(ws, ".env.*"))
	for _, p := range envs {
		if err := protectFile(filepath.Base(p), false); err != nil {
			return nil, err
		}
	}
	isHome := s.home != "" && ws == s.home
	for _, name := range shellStartupFiles {
		if err := protectFile(name, isHome); err != nil {
			return nil, err
		}
	}

	git := filepath.Join(ws, ".git")
	if fi, err := os.Lstat(git); err == nil {
		switch {
		case fi.IsDir():
			// A self-bind makes .git a mount point, so it cannot be renamed
			// away and replaced by a repository with other hooks.
			args = append(args, "--bind", git, git)
			hooks := filepath.Join(git, "hooks")
			if err := os.Mkdir(hooks, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return nil, fmt.Errorf("create %s: %w", hooks, err)
			}
			if fi, err := os.Lstat(hooks); err == nil && fi.IsDir() {
				ro(hooks)
			}
			if err := protectFile(filepath.Join(".git", "config"), false); err != nil {
				return nil, err
			}
		case fi.Mode().IsRegular(): // a worktree's pointer file
			ro(git)
		}
	}
	return args, nil
}

// envArgs returns the bwrap options that give the process exactly env,
// plus the proxy variables when the proxy is on and a writable
// MPLCONFIGDIR when env has none.
func (s *Sandbox) envArgs(env []string) []string {
	args := []string{"--clearenv"}
	have := map[string]bool{}
	set := func(k, v string) {
		args = append(args, "--setenv", k, v)
		have[k] = true
	}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		set(k, v)
	}
	if s.proxy != nil {
		url := fmt.Sprintf("http://127.0.0.1:%d", ProxyPort)
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			set(k, url)
		}
		for _, k := range []string{"NO_PROXY", "no_proxy"} {
			set(k, "localhost,127.0.0.1")
		}
	}
	if !have["MPLCONFIGDIR"] {
		set("MPLCONFIGDIR", "/tmp/matplotlib")
	}
	return args
}
