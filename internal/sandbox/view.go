//go:build linux

package sandbox

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ipybox/ipybox/internal/seccomp"
	"github.com/ipybox/ipybox/internal/statedir"
	"github.com/ipybox/ipybox/internal/wsguard"
)

// Paths inside the sandbox that the launcher provides.
const (
	insideDir   = "/run/ipybox-sandbox"
	insideInit  = insideDir + "/init"
	insideProxy = insideDir + "/proxy.sock"
)

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

// viewInput is what one process adds to the sandbox's fixed layout.
type viewInput struct {
	runDir    string            // the kernel's run directory (read-only); "" for Command
	socketDir string            // the part of runDir the kernel may write; "" means all of it
	dir       string            // working directory
	home      string            // $HOME of the process ("" when unset)
	extraRO   []string          // more read-only host paths (the Python prefix)
	binds     map[string]string // inside path -> host path, bound read-only under insideDir
}

// view is the file-system layout of one sandboxed process.
type view struct {
	args     []string   // bwrap options: namespaces, mounts, --chdir
	roots    []string   // host paths visible inside (at the same path)
	writable []string   // writable paths inside
	binds    []bind     // the explicit binds of host directories and files
	files    []string   // the launcher's files bound (the mask, the init…)
	pinned   []string   // protected paths staged one by one (as root)
	fds      []*os.File // sources of --ro-bind-fd, in fdRef order
	remount  []string   // tmpfs mounts made read-only once filled
	runDir   string     // the kernel's run directory ("" for Command)
	tmpDir   string     // TMPDIR for the process ("" for /tmp)
	guard    *seccomp.Policy
}

func runDirOf(v *view) string {
	if v.runDir == "" {
		return "\x00" // under nothing
	}
	return v.runDir
}

// fdRef stands for the i-th descriptor of view.fds in bwrap's arguments;
// launchCmd replaces it with the descriptor's number in the child.
func fdRef(i int) string { return fmt.Sprintf("@fd%d", i) }

// openNoFollow opens p as an O_PATH descriptor, refusing a link.
func openNoFollow(p string) (*os.File, error) {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK {
		unix.Close(fd)
		return nil, fmt.Errorf("it is a symbolic link now; refusing to start")
	}
	return os.NewFile(uintptr(fd), p), nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// visible reports whether a host path is visible at the same path inside.
func (v *view) visible(p string) bool { return underAny(p, v.roots) }

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

// buildView computes the bwrap options for one process, in the order
// bwrap needs them: the fixed layout, the explicit binds (with the masks
// that must come before them), the workspace's protection, the masks, and
// the launcher's own files. It never creates a path in the workspace
// but ipybox's own .ipybox folder.
func (s *Sandbox) buildView(in viewInput) (_ *view, retErr error) {
	v := &view{}
	defer func() {
		if retErr != nil {
			closeAll(v.fds)
		}
	}()
	s.layoutArgs(v)
	v.runDir = in.runDir
	binds, fixed, err := s.explicitBinds(in)
	if err != nil {
		return nil, err
	}
	v.binds = binds
	v.files = append(v.files, s.maskFile)
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
	early, late, err := s.denyRead(v, binds, fixed, home)
	if err != nil {
		return nil, err
	}
	for _, m := range early {
		// Traversable (so the binds inside stay reachable), not listable.
		v.add("--perms", "0111", "--tmpfs", m.path)
		v.remount = append(v.remount, m.path)
	}
	if home != "" {
		s.sized(v)
		v.add("--tmpfs", home)
	}
	for _, b := range binds {
		if b.rw {
			v.add("--bind", b.path, b.path)
		} else {
			v.add("--ro-bind", b.path, b.path)
		}
	}
	prot, err := s.protection()
	if err != nil {
		return nil, err
	}
	if err := s.protectArgs(v, prot); err != nil {
		return nil, err
	}
	if err := s.stateArgs(v); err != nil {
		return nil, err
	}
	if err := s.denyWriteArgs(v, fixed); err != nil {
		return nil, err
	}
	s.maskArgs(v, late, prot, binds)
	s.guardPolicy(v, prot)

	// The launcher's own files.
	inside := make([]string, 0, len(in.binds))
	for k := range in.binds {
		inside = append(inside, k)
	}
	sort.Strings(inside)
	for _, k := range inside {
		v.add("--ro-bind", in.binds[k], k)
		v.files = append(v.files, in.binds[k])
	}
	for _, p := range v.remount {
		v.add("--remount-ro", p)
	}
	if s.cfg.RootMode == RootMinimal {
		v.add("--remount-ro", "/")
	}
	dir := in.dir
	if dir == "" {
		dir = s.workspace
	}
	if !v.visible(dir) && dir != home {
		return nil, fmt.Errorf("working directory %s is not visible in the sandbox; use a directory inside the workspace", dir)
	}
	v.add("--chdir", dir)
	return v, nil
}

func (v *view) add(a ...string) { v.args = append(v.args, a...) }

// sized bounds the next tmpfs by the memory limit: without a size, a
// tmpfs may take half the host's RAM, and outlives the process that
// filled it.
func (s *Sandbox) sized(v *view) {
	if m := s.cfg.Limits.memory(); m > 0 {
		v.add("--size", strconv.FormatInt(m, 10))
	}
}

// layoutArgs adds the namespaces and the fixed file system: the root
// (minimal or the whole host, read-only), /proc, /dev and the private
// temporary folders.
func (s *Sandbox) layoutArgs(v *view) {
	v.add(namespaceFlags...)
	if s.mapped {
		// bwrap runs as MappedID; uid 0 inside is that uid outside.
		v.add("--uid", "0", "--gid", "0")
	}
	v.add("--hostname", "ipybox")
	if s.cfg.RootMode == RootHost {
		v.add("--ro-bind", "/", "/")
		v.roots = append(v.roots, "/")
	} else {
		v.add("--ro-bind", "/usr", "/usr")
		v.roots = append(v.roots, "/usr")
		for _, l := range []string{"/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"} {
			fi, err := os.Lstat(l)
			switch {
			case err != nil:
			case fi.Mode()&fs.ModeSymlink != 0:
				if target, err := os.Readlink(l); err == nil {
					v.add("--symlink", target, l)
				}
			case fi.IsDir():
				v.add("--ro-bind", l, l)
				v.roots = append(v.roots, l)
			}
		}
		v.add("--ro-bind", "/etc", "/etc")
		v.roots = append(v.roots, "/etc")
	}
	// /proc is read-only: its writable files include host-global knobs
	// (/proc/sys, /proc/sysrq-trigger) that must not be reachable, whatever
	// the uid inside maps to. Reads, and writes through /proc/self/fd,
	// still work. /dev itself is read-only; /dev/shm (POSIX shared memory,
	// multiprocessing's semaphores) is a bounded tmpfs of its own.
	v.add("--proc", "/proc", "--remount-ro", "/proc", "--dev", "/dev")
	s.sized(v)
	v.add("--tmpfs", "/dev/shm", "--remount-ro", "/dev")
	s.sized(v)
	v.add("--tmpfs", "/tmp")
	v.writable = append(v.writable, "/tmp", "/dev/shm")
	if s.cfg.RootMode == RootHost {
		// The host's shared temporary and runtime directories hold other
		// programs' sockets and files: replace them with private ones.
		for _, d := range []string{"/var/tmp", "/run"} {
			if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
				v.add("--tmpfs", d)
				v.writable = append(v.writable, d)
			}
		}
	}
}

// explicitBinds lists the host paths the process is given: the
// interpreter's prefix, extraRead, allowWrite, the workspace and the run
// directory, parents first (a nested bind then overrides its parent).
// fixed are the workspace and the run directory, which no mask may hide.
func (s *Sandbox) explicitBinds(in viewInput) (binds []bind, fixed []string, err error) {
	ws := s.workspace
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
		return nil, nil, fmt.Errorf("extraRead: %w", err)
	}
	for _, p := range extraRead {
		addBind(p, false)
	}
	denyWrite, err := s.resolveExisting(s.cfg.Filesystem.DenyWrite)
	if err != nil {
		return nil, nil, fmt.Errorf("denyWrite: %w", err)
	}
	allowWrite, err := expandAll(s.cfg.Filesystem.AllowWrite, ws, s.home, false)
	if err != nil {
		return nil, nil, fmt.Errorf("allowWrite: %w", err)
	}
	for _, p := range allowWrite {
		switch {
		case p == "/tmp" || p == "/private/tmp":
			s.log.Debug("sandbox: allowWrite /tmp: the sandbox has a private, writable /tmp; the host's is not shared")
		case p == "/":
			return nil, nil, fmt.Errorf("allowWrite: %q would make the whole file system writable", p)
		case underAny(p, denyWrite):
			s.log.Warn("sandbox: allowWrite path is inside a denyWrite path; it stays read-only", "path", p)
			addBind(p, false)
		default:
			addBind(p, true)
		}
	}
	fixed = []string{ws}
	addBind(ws, true)
	if in.runDir != "" {
		// The host writes the connection file and the runtime there: the
		// kernel may write only its socket directory.
		if in.socketDir != "" && in.socketDir != in.runDir {
			addBind(in.runDir, false)
			addBind(in.socketDir, true)
		} else {
			addBind(in.runDir, true)
		}
		fixed = append(fixed, in.runDir)
	}
	sort.SliceStable(binds, func(i, j int) bool { return len(binds[i].path) < len(binds[j].path) })
	return binds, fixed, nil
}

// denyRead sorts the configured denyRead paths (and, in the host root
// mode, the home directory's dot files) into the masks that contain an
// explicit bind, which go before the binds (the binds then show through
// them), and the others, which go after.
func (s *Sandbox) denyRead(v *view, binds []bind, fixed []string, home string) (early, late []secretPath, err error) {
	denyRead, err := s.resolveExisting(s.cfg.Filesystem.DenyRead)
	if err != nil {
		return nil, nil, fmt.Errorf("denyRead: %w", err)
	}
	if s.cfg.RootMode == RootHost {
		for _, d := range s.homeDotfiles() {
			if !slices.Contains(denyRead, d) {
				denyRead = append(denyRead, d)
			}
		}
	}
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
			if underAny(s.workspace, []string{p}) {
				s.log.Warn("sandbox: denyRead contains the workspace; everything in it but the workspace is hidden", "path", p)
			}
			early = append(early, m)
			continue
		}
		late = append(late, m)
	}
	return early, late, nil
}

// protectArgs mounts the protected paths that exist at the workspace
// root read-only onto themselves (the guard refuses changes to them, at
// any depth, in any case). Kernel code of another sandbox of the same
// workspace may swap such a path for a link between this check and
// bwrap's mount: as root, each is staged on its own (the prep step clones
// it without following a link); otherwise bwrap binds it from a
// descriptor opened without following links, and dies if what it mounted
// is not that.
func (s *Sandbox) protectArgs(v *view, prot *wsguard.Protection) error {
	for _, p := range prot.ReadOnly {
		if s.mapped {
			v.add("--ro-bind", p, p)
			v.pinned = append(v.pinned, p)
			continue
		}
		f, err := openNoFollow(p)
		if err != nil {
			return fmt.Errorf("protect %s: %w", p, err)
		}
		v.add("--ro-bind-fd", fdRef(len(v.fds)), p)
		v.fds = append(v.fds, f)
	}
	return nil
}

// stateArgs hides ipybox's state folder (.ipybox: the MCP server
// registry) behind an empty, read-only one, and binds into it what
// processes of this sandbox share: the virtualenv, read-only unless
// Options.Writable lists it (the approved install_package), and the other
// Writable paths (a session's own packages).
func (s *Sandbox) stateArgs(v *view) error {
	ws := s.workspace
	if _, err := statedir.Ensure(ws); err != nil {
		return err
	}
	ipy := filepath.Join(ws, ".ipybox")
	v.add("--perms", "0755", "--tmpfs", ipy)
	v.remount = append(v.remount, ipy)
	venv := filepath.Join(ipy, "venv")
	shared := []string{venv}
	for _, w := range s.writableState {
		if !slices.Contains(shared, w) {
			shared = append(shared, w)
		}
	}
	for _, p := range shared {
		fi, err := os.Lstat(p)
		if err != nil || !fi.IsDir() {
			continue // a link is never bound: it could lead anywhere
		}
		if slices.Contains(s.writableState, p) {
			v.add("--bind", p, p)
			v.writable = append(v.writable, p)
		} else {
			v.add("--ro-bind", p, p)
		}
		v.roots = append(v.roots, p)
	}
	return nil
}

// denyWriteArgs mounts the configured denyWrite paths read-only where they
// are writable.
func (s *Sandbox) denyWriteArgs(v *view, fixed []string) error {
	denyWrite, err := s.resolveExisting(s.cfg.Filesystem.DenyWrite)
	if err != nil {
		return fmt.Errorf("denyWrite: %w", err)
	}
	for _, p := range denyWrite {
		switch {
		case !underAny(p, v.writable):
			// Already read-only, or not visible.
		case slices.ContainsFunc(fixed, func(f string) bool { return under(f, p) }):
			s.log.Warn("sandbox: denyWrite contains the workspace or the run directory, which stay writable", "path", p)
		default:
			v.add("--ro-bind", p, p)
		}
	}
	return nil
}

// maskArgs hides the denyRead paths, the secrets under /etc and the
// workspace's secrets.
func (s *Sandbox) maskArgs(v *view, late []secretPath, prot *wsguard.Protection, binds []bind) {
	late = append(late, s.etcSecrets...)
	for _, m := range prot.Masks {
		late = append(late, secretPath{m, false})
	}
	for _, m := range prot.MaskDirs {
		late = append(late, secretPath{m, true})
	}
	for _, m := range late {
		if s.mapped && !othersReach(m.path, binds) {
			// As MappedID, the sandbox cannot reach it anyway (a 0700
			// parent such as /root), and bwrap could not mount over it.
			continue
		}
		if m.dir {
			v.add("--perms", "0000", "--tmpfs", m.path)
			v.remount = append(v.remount, m.path)
		} else {
			v.add("--ro-bind", s.maskFile, m.path)
		}
	}
}

// privateTmp is the process's temporary folder when /tmp holds the
// workspace (see guardPolicy).
const privateTmp = "/tmp/.ipybox-tmp"

// guardPolicy is what the guard in the sandbox protects: the writable
// places that host programs see (the workspace and allowWrite folders),
// but the shared state this sandbox may write.
func (s *Sandbox) guardPolicy(v *view, prot *wsguard.Protection) {
	pol := &seccomp.Policy{Workspace: s.workspace, Home: s.home, Protected: prot.Protected,
		GitRelative: prot.GitRelative, Open: slices.Clone(s.writableState)}
	for _, b := range v.binds {
		if b.rw && !under(b.path, runDirOf(v)) {
			pol.Roots = append(pol.Roots, b.path)
		}
	}
	// Socket files may be made where the process writes but host programs
	// do not look: its private /tmp, /dev/shm and home, its run directory.
	// Landlock allows a folder with everything beneath it, so a private
	// folder that holds a root (a workspace in /tmp) gets a socket folder
	// of its own instead, and TMPDIR points there.
	for _, w := range v.writable {
		switch {
		case underAny(w, pol.Roots):
		case slices.ContainsFunc(pol.Roots, func(r string) bool { return under(r, w) }):
			if w == "/tmp" {
				v.add("--perms", "0700", "--dir", privateTmp)
				v.tmpDir = privateTmp
				pol.SocketDirs = append(pol.SocketDirs, privateTmp)
			}
		default:
			pol.SocketDirs = append(pol.SocketDirs, w)
		}
	}
	v.guard = pol
}

// othersReach reports whether an unprivileged uid can reach p in the
// sandbox's view: p is below an explicit bind (which the prep step stages
// for it), or every directory above p is searchable by others.
func othersReach(p string, binds []bind) bool {
	if slices.ContainsFunc(binds, func(b bind) bool { return under(p, b.path) }) {
		return true
	}
	for d := filepath.Dir(p); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == "/" {
			return true
		}
	}
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

// programEnv returns the environment of a sandboxed program: exactly env,
// plus the proxy variables when the proxy is on and a writable
// MPLCONFIGDIR when env has none. It travels in the init's configuration
// and is applied at the program's exec only (see initEnv).
func (s *Sandbox) programEnv(env []string) []string {
	out := make([]string, 0, len(env)+8)
	have := map[string]bool{}
	set := func(k, v string) {
		out = append(out, k+"="+v)
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
		// Loopback goes direct, to the sandbox's own, unless the
		// allowlist names a loopback address: the host's, which only the
		// proxy reaches (the runtime reaches the tool server's forward
		// with its own connection, which ignores these variables).
		for _, k := range []string{"NO_PROXY", "no_proxy"} {
			set(k, s.proxy.NoProxy())
		}
	}
	if !have["MPLCONFIGDIR"] {
		set("MPLCONFIGDIR", "/tmp/matplotlib")
	}
	return out
}
