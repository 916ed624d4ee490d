package sandbox

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// When ipybox runs as root, the sandbox must not: uid 0 inside a user
// namespace created by root is host root, and host root, even without a
// capability, may write whatever root owns and the kernel checks by uid
// (sysctls under /proc/sys, files on any writable mount), and is exempt
// from RLIMIT_NPROC. So bwrap itself runs as an unprivileged host uid,
// MappedID, and everything else follows from that: uid 0 inside the
// sandbox is MappedID outside.
//
// MappedID cannot read root's files, though: not the workspace (often
// under /root), not the run directory (0700), not the init binary (a test
// binary lives in a 0700 directory). A "prep" step of the init binary
// bridges this. It runs as root, in a mount namespace of its own, where it
//   - clones each host path that bwrap must bind (the workspace, the run
//     directory, allowWrite and extraRead paths, the launcher's files) as
//     a detached mount, the directories idmapped so that their owner on
//     disk is MappedID (so the sandbox writes the workspace, and its files
//     land on disk with the workspace owner's ids);
//   - mounts a private tmpfs over the sandbox's private directory (the
//     stage) and attaches the clones there, where MappedID can reach them;
//   - drops to MappedID and execs bwrap, whose bind sources point into the
//     stage.
// None of this is visible outside that process's mount namespace, and it
// vanishes with it.

// runsAsRoot reports whether the sandbox is created by host root, and so
// must run as MappedID instead.
func runsAsRoot() bool { return os.Geteuid() == 0 }

// prepConfig is what the launcher tells the prep step.
type prepConfig struct {
	// Parent is the pid of the ipybox process; the prep step refuses to
	// continue when it is gone (its parent-death signal is cleared when
	// it changes uid).
	Parent int `json:"parent"`
	// Stage is the directory to cover with a private tmpfs and fill.
	Stage string `json:"stage"`
	// Mounts are the host paths to attach in the stage.
	Mounts []prepMount `json:"mounts,omitempty"`
	// Bwrap and Argv are the program to exec once done, as MappedID.
	Bwrap string   `json:"bwrap"`
	Argv  []string `json:"argv"`
	// CloseFDs are the descriptors of the prep step itself (its
	// configuration and the idmap namespaces), closed before the exec.
	CloseFDs []int `json:"close_fds,omitempty"`
}

// prepMount attaches Source at Stage/Name.
type prepMount struct {
	Source string `json:"source"`
	Name   string `json:"name"`
	// UsernsFD, when not 0, is a user namespace descriptor whose mapping
	// makes the clone an idmapped mount.
	UsernsFD int `json:"userns_fd,omitempty"`
	// Optional makes a failed idmap fall back to a plain bind (read-only
	// roots: a plain bind shows what others may read).
	Optional bool `json:"optional,omitempty"`
	// NoFollow clones Source without following a link in its last
	// component; a link is refused.
	NoFollow bool `json:"no_follow,omitempty"`
}

// stageRoot is one host path given to bwrap through the stage. Each is
// idmapped, so that its owner on disk is MappedID; for a writable
// directory this is required, for the others (read-only binds, files such
// as the init binary, sockets and the mask) it is best effort.
type stageRoot struct {
	host   string
	name   string
	dir    bool
	ro     bool // bound read-only
	pinned bool // cloned without following a link, and never idmapped
}

// staging rewrites bwrap's bind sources to point into the stage.
type staging struct {
	dir   string
	roots []stageRoot
}

// add registers a host path (once) and returns its staged path.
func (st *staging) add(host string, dir, ro bool) string {
	for i, r := range st.roots {
		if r.host == host {
			st.roots[i].ro = r.ro && ro
			return filepath.Join(st.dir, r.name)
		}
	}
	name := "r" + strconv.Itoa(len(st.roots))
	st.roots = append(st.roots, stageRoot{host: host, name: name, dir: dir, ro: ro})
	return filepath.Join(st.dir, name)
}

// pin registers a protected path as a root of its own, so that the prep
// step clones it without following a link (a link there is an attack, and
// fails the start) and bwrap binds the clone.
func (st *staging) pin(host string) {
	for i, r := range st.roots {
		if r.host == host {
			st.roots[i].pinned = true
			return
		}
	}
	name := "r" + strconv.Itoa(len(st.roots))
	st.roots = append(st.roots, stageRoot{host: host, name: name, ro: true, pinned: true})
}

// src returns the staged path of a bind source: below the deepest root
// that holds it, or the path itself when no root does (the system
// directories, which MappedID can read).
func (st *staging) src(p string) string {
	best := -1
	for i, r := range st.roots {
		if (best < 0 || len(r.host) > len(st.roots[best].host)) && under(p, r.host) {
			best = i
		}
	}
	if best < 0 {
		return p
	}
	rel, _ := filepath.Rel(st.roots[best].host, p)
	return filepath.Join(st.dir, st.roots[best].name, rel)
}

// rewrite replaces the sources of the bind options in args.
func (st *staging) rewrite(args []string) []string {
	out := append([]string(nil), args...)
	for i := 0; i+2 < len(out); i++ {
		switch out[i] {
		case "--bind", "--ro-bind", "--bind-try", "--ro-bind-try", "--dev-bind", "--dev-bind-try":
			out[i+1] = st.src(out[i+1])
			i += 2
		case "--setenv", "--symlink":
			i += 2 // two operands that are not sources
		}
	}
	return out
}

// idmapNS returns a user namespace descriptor that maps the owner ids
// uid:gid to MappedID, for idmapped mounts. A user namespace needs a
// process to be created in: a holder (the init binary in "hold" mode) is
// started in a new one with that mapping, and the namespace outlives it
// through the descriptor, which is kept for the life of the process (one
// per owner, so a handful at most).
func (s *Sandbox) idmapNS(uid, gid uint32) (*os.File, error) {
	idmaps.mu.Lock()
	defer idmaps.mu.Unlock()
	key := [2]uint32{uid, gid}
	if f, ok := idmaps.m[key]; ok {
		return f, nil
	}
	cmd := exec.Command(s.initBinary, InitCommand, "hold")
	cmd.Env = initEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: int(uid), HostID: MappedID, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: int(gid), HostID: MappedID, Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("user namespace for idmapped mounts: %w", err)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	stdin.Close()
	cmd.Wait() // bound: the holder exits at its stdin's EOF
	if err != nil {
		return nil, fmt.Errorf("user namespace for idmapped mounts: %w", err)
	}
	idmaps.m[key] = f
	return f, nil
}

// idmaps caches the idmap namespaces of idmapNS.
var idmaps = struct {
	mu sync.Mutex
	m  map[[2]uint32]*os.File
}{m: map[[2]uint32]*os.File{}}

// holdMain blocks until standard input closes: the holder of a user
// namespace while its descriptor is opened.
func holdMain() int {
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// prepCmd turns a bwrap command into the prep step that runs it as
// MappedID, with st's roots attached in the stage. The descriptors of cmd
// (cmd.ExtraFiles, from 3) keep their numbers; the prep configuration and
// the namespaces follow them.
func (s *Sandbox) prepCmd(bwrap *exec.Cmd, st *staging) (*exec.Cmd, error) {
	pc := prepConfig{Parent: os.Getpid(), Stage: st.dir, Bwrap: bwrap.Path, Argv: bwrap.Args}
	extra := append([]*os.File(nil), bwrap.ExtraFiles...)
	nextFD := 3 + len(extra) + 1 // the configuration takes the first free number
	nsFD := map[*os.File]int{}
	for _, r := range st.roots {
		m := prepMount{Source: r.host, Name: r.name, NoFollow: r.pinned}
		if r.pinned {
			pc.Mounts = append(pc.Mounts, m)
			continue
		}
		{
			var fst unix.Stat_t
			if err := unix.Stat(r.host, &fst); err != nil {
				return nil, fmt.Errorf("sandbox: %s: %w", r.host, err)
			}
			ns, err := s.idmapNS(fst.Uid, fst.Gid)
			if err != nil {
				return nil, fmt.Errorf("sandbox: %w", err)
			}
			fd, ok := nsFD[ns]
			if !ok {
				fd = nextFD
				nextFD++
				nsFD[ns] = fd
				extra = append(extra, nil) // placeholder, filled below
			}
			// Only a writable directory needs the idmap to work; anything
			// else falls back to a plain bind, which shows what others
			// may read.
			m.UsernsFD, m.Optional = fd, r.ro || !r.dir
		}
		pc.Mounts = append(pc.Mounts, m)
	}
	cfgFD := 3 + len(bwrap.ExtraFiles)
	pc.CloseFDs = append(pc.CloseFDs, cfgFD)
	for _, fd := range nsFD {
		pc.CloseFDs = append(pc.CloseFDs, fd)
	}
	js, err := json.Marshal(pc)
	if err != nil {
		return nil, err
	}
	cfg, err := memFile("prep-config", js)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	files := append([]*os.File(nil), bwrap.ExtraFiles...)
	files = append(files, cfg)
	for len(files) < nextFD-3 {
		files = append(files, nil)
	}
	for ns, fd := range nsFD {
		// A duplicate: whoever closes the command's files after Start must
		// not close the Sandbox's own descriptor.
		d, err := unix.FcntlInt(ns.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			cfg.Close()
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		files[fd-3] = os.NewFile(uintptr(d), "idmap-userns")
	}
	cmd := exec.Command(s.initBinary, InitCommand, "prep", strconv.Itoa(cfgFD))
	cmd.Env = initEnv()
	cmd.ExtraFiles = files
	cmd.SysProcAttr = bwrap.SysProcAttr
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bwrap.Stdin, bwrap.Stdout, bwrap.Stderr
	return cmd, nil
}

// prepMain is the prep step; args are the configuration descriptor. It
// returns only on failure.
func prepMain(args []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "ipybox sandbox prep: "+format+"\n", a...)
		return exitInitFailed
	}
	if len(args) != 1 {
		return fail("want 1 argument (this command is internal to ipybox)")
	}
	fd, err := strconv.Atoi(args[0])
	if err != nil || fd < 3 {
		return fail("bad configuration descriptor %q", args[0])
	}
	f := os.NewFile(uintptr(fd), "prep-config")
	js, err := io.ReadAll(io.LimitReader(f, 1<<20))
	f.Close()
	var c prepConfig
	if err == nil {
		err = json.Unmarshal(js, &c)
	}
	if err != nil {
		return fail("bad configuration: %v", err)
	}
	if os.Geteuid() != 0 {
		return fail("must run as root")
	}
	// Mount namespaces and credentials: the thread that changes them is
	// the one that execs, so it must not change under us.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fail("unshare(CLONE_NEWNS): %v", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fail("make the mount namespace private: %v", err)
	}
	if err := stageMounts(&c); err != nil {
		return fail("%v", err)
	}
	if err := dropToMapped(c.Parent); err != nil {
		return fail("%v", err)
	}
	for _, fd := range c.CloseFDs {
		unix.CloseOnExec(fd)
	}
	err = syscall.Exec(c.Bwrap, c.Argv, initEnv())
	return fail("exec %s: %v", c.Bwrap, err)
}

// stageMounts clones each mount's source (idmapped when asked), covers
// the stage with a private tmpfs, and attaches the clones there. Every
// clone is taken first: some sources live in the stage directory, which
// the tmpfs is about to cover.
func stageMounts(c *prepConfig) error {
	trees := make([]int, len(c.Mounts))
	dirs := make([]bool, len(c.Mounts))
	for i, m := range c.Mounts {
		flags := unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC
		if m.NoFollow {
			flags |= unix.AT_SYMLINK_NOFOLLOW
		}
		t, err := unix.OpenTree(unix.AT_FDCWD, m.Source, uint(flags))
		if err != nil {
			return fmt.Errorf("clone %s: %v", m.Source, err)
		}
		trees[i] = t
		var st unix.Stat_t
		if err := unix.Fstat(t, &st); err != nil {
			return fmt.Errorf("stat %s: %v", m.Source, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return fmt.Errorf("%s is a symbolic link now (protected paths must not be links); refusing to start", m.Source)
		}
		dirs[i] = st.Mode&unix.S_IFMT == unix.S_IFDIR
		if m.UsernsFD == 0 {
			continue
		}
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(m.UsernsFD)}
		if err := unix.MountSetattr(t, "", unix.AT_EMPTY_PATH, &attr); err != nil {
			if m.Optional {
				continue
			}
			return fmt.Errorf("%s: an idmapped mount failed (%v): running the sandbox as root needs idmapped mounts "+
				"(Linux 5.12 or newer, and a file system that supports them: ext4, xfs, btrfs, tmpfs since 6.3…); "+
				"run ipybox as an unprivileged user, or choose a workspace on such a file system", m.Source, err)
		}
	}
	if err := unix.Mount("tmpfs", c.Stage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0711,size=1m"); err != nil {
		return fmt.Errorf("stage %s: %v", c.Stage, err)
	}
	for i, m := range c.Mounts {
		target := filepath.Join(c.Stage, m.Name)
		var err error
		if dirs[i] {
			err = os.Mkdir(target, 0o711)
		} else {
			var t *os.File
			t, err = os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if t != nil {
				t.Close()
			}
		}
		if err != nil {
			return fmt.Errorf("stage %s: %v", target, err)
		}
		if err := unix.MoveMount(trees[i], "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("attach %s at %s: %v", m.Source, target, err)
		}
		unix.Close(trees[i])
	}
	return nil
}

// dropToMapped becomes MappedID, with no supplementary group and no
// capability left, and sets the parent-death signal again (the uid change
// cleared it), then makes sure the parent did not die in between.
func dropToMapped(parent int) error {
	if err := syscall.Setgroups([]int{}); err != nil {
		return fmt.Errorf("setgroups: %v", err)
	}
	if err := syscall.Setresgid(MappedID, MappedID, MappedID); err != nil {
		return fmt.Errorf("setresgid(%d): %v", MappedID, err)
	}
	if err := syscall.Setresuid(MappedID, MappedID, MappedID); err != nil {
		return fmt.Errorf("setresuid(%d): %v", MappedID, err)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_PDEATHSIG): %v", err)
	}
	if os.Getppid() != parent {
		return fmt.Errorf("ipybox exited")
	}
	return nil
}
