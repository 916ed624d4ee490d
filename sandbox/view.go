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

	"github.com/ipybox/ipybox/internal/safefs"
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

// buildView computes the bwrap options for one process. It may create
// placeholders in the workspace (see protectWorkspace).
func (s *Sandbox) buildView(in viewInput) (_ *view, retErr error) {
	v := &view{}
	defer func() {
		if retErr != nil {
			closeAll(v.fds)
		}
	}()
	add := func(a ...string) { v.args = append(v.args, a...) }
	add(namespaceFlags...)
	if s.mapped {
		// bwrap runs as MappedID; uid 0 inside is that uid outside.
		add("--uid", "0", "--gid", "0")
	}
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
	// /proc is read-only: its writable files include host-global knobs
	// (/proc/sys, /proc/sysrq-trigger) that must not be reachable, whatever
	// the uid inside maps to. Reads, and writes through /proc/self/fd,
	// still work.
	// The private file systems live in memory: each is bounded by the
	// memory limit (without a size, a tmpfs may take half the host's RAM,
	// and outlives the process that filled it). /dev itself is read-only;
	// /dev/shm (POSIX shared memory, multiprocessing's semaphores) is a
	// bounded tmpfs of its own.
	sized := func() {
		if m := s.cfg.Limits.memory(); m > 0 {
			add("--size", strconv.FormatInt(m, 10))
		}
	}
	add("--proc", "/proc", "--remount-ro", "/proc", "--dev", "/dev")
	sized()
	add("--tmpfs", "/dev/shm", "--remount-ro", "/dev")
	sized()
	add("--tmpfs", "/tmp")
	v.writable = append(v.writable, "/tmp", "/dev/shm")
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
	// Parents first, so that a nested bind overrides its parent.
	sort.SliceStable(binds, func(i, j int) bool { return len(binds[i].path) < len(binds[j].path) })
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

	// denyRead: a mask that contains an explicit bind goes before the
	// binds (which then show through it); the others go after them.
	denyRead, err := s.resolveExisting(s.cfg.Filesystem.DenyRead)
	if err != nil {
		return nil, fmt.Errorf("denyRead: %w", err)
	}
	if s.cfg.RootMode == RootHost {
		for _, d := range s.homeDotfiles() {
			if !slices.Contains(denyRead, d) {
				denyRead = append(denyRead, d)
			}
		}
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
		sized()
		add("--tmpfs", home)
	}
	for _, b := range binds {
		if b.rw {
			add("--bind", b.path, b.path)
		} else {
			add("--ro-bind", b.path, b.path)
		}
	}

	// Write protection: the workspace's protected names, then denyWrite.
	prot, err := s.protectWorkspace()
	if err != nil {
		return nil, err
	}
	// Kernel code of another sandbox of the same workspace may swap a
	// protected path for a link between this check and bwrap's mount. As
	// root, each is staged on its own (the prep step clones it without
	// following a link); otherwise bwrap binds it from a descriptor opened
	// without following links, and dies if what it mounted is not that.
	for _, p := range prot.readOnly {
		if s.mapped {
			add("--ro-bind", p, p)
			v.pinned = append(v.pinned, p)
			continue
		}
		f, err := openNoFollow(p)
		if err != nil {
			return nil, fmt.Errorf("protect %s: %w", p, err)
		}
		add("--ro-bind-fd", fdRef(len(v.fds)), p)
		v.fds = append(v.fds, f)
	}
	// .ipybox holds the MCP server registry: masked whole (an empty,
	// read-only directory; a mask on servers.json alone would not survive
	// the host's atomic rewrite of it), but its virtualenv stays
	// writable, so that pip install works.
	if err := safefs.MkdirAll(ws, ".ipybox", 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", filepath.Join(ws, ".ipybox"), err)
	}
	ipy := filepath.Join(ws, ".ipybox")
	add("--perms", "0755", "--tmpfs", ipy)
	remount = append(remount, ipy)
	venv := filepath.Join(ipy, "venv")
	if fi, err := os.Lstat(venv); err == nil && fi.IsDir() {
		add("--bind", venv, venv)
	}
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

	// Masks: denyRead, the secrets under /etc and in the workspace.
	late = append(late, s.etcSecrets...)
	for _, m := range prot.masks {
		late = append(late, secretPath{m, false})
	}
	for _, m := range prot.maskDirs {
		late = append(late, secretPath{m, true})
	}
	for _, m := range late {
		if s.mapped && !othersReach(m.path, binds) {
			// As MappedID, the sandbox cannot reach it anyway (a 0700
			// parent such as /root), and bwrap could not mount over it.
			continue
		}
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
		v.files = append(v.files, in.binds[k])
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
