package seccomp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The guard carries out each call it allows itself, on the path it read
// and resolved, and hands an opened file to the caller with ADDFD: a
// guard that only checked and then let the kernel continue the call would
// check one path while the kernel used another (the caller's other
// threads can rewrite the path between the two reads).
//
// It resolves paths as the caller would, from the caller's working
// directory or descriptor, but never through a "magic" link of /proc (a
// descriptor, a cwd or a root link) other than the caller's own: the
// guard's own descriptors (the listener, sockets to the host) must never
// reach the caller. /dev/stdout, /dev/fd/N and /proc/self/fd/N name the
// caller's descriptors, and are resolved through the caller's /proc entry.
//
// A call below a root is refused (EACCES) when its path, or for a rename
// or a link either path, is in hostpaths' list, in Protected, in a git
// repository's folder, or in what that repository's config names
// (core.hooksPath, include.path...), found by walking up from the path to
// its root: the cost depends on the path's depth, not on how much the
// workspace holds. Creating the last name of a bare repository's layout
// (HEAD beside objects/, refs/ or commondir) is refused as well.

// Guard answers the calls that a filter built with Options.Guard hands to
// it. Serve runs it.
type Guard struct {
	fd  int
	pol Policy
	log func(msg string)

	bareMu sync.Mutex // serialises the check and the creation of bare-layout names

	gitMu  sync.Mutex
	gitLRU map[gitKey]gitInfo
}

// NewGuard returns a guard for the listener fd (from InstallListener) and
// the policy. log receives one line per refusal (nil: none).
func NewGuard(fd int, pol Policy, log func(string)) *Guard {
	clean := func(ps []string) []string {
		var out []string
		for _, p := range ps {
			if p != "" {
				out = append(out, filepath.Clean(p))
			}
		}
		return out
	}
	pol.Roots = clean(pol.Roots)
	pol.Protected = clean(pol.Protected)
	pol.Open = clean(pol.Open)
	if pol.Workspace != "" {
		pol.Workspace = filepath.Clean(pol.Workspace)
	}
	if log == nil {
		log = func(string) {}
	}
	return &Guard{fd: fd, pol: pol, log: log, gitLRU: map[gitKey]gitInfo{}}
}

// guardWorkers is how many calls the guard carries out at once: a call
// that blocks (opening a FIFO for writing waits for a reader) holds one.
const guardWorkers = 4

// Serve answers calls until the listener fails (every guarded process has
// exited, or the listener was closed). The guard applies the caller's own
// umask to what it creates; Start sets the guarding process's umask to 0
// once the program runs.
func (g *Guard) Serve() error {
	work := make(chan *notif)
	ready := make(chan error, guardWorkers)
	for range guardWorkers {
		go g.worker(work, ready)
	}
	for range guardWorkers {
		if err := <-ready; err != nil { // bound: each worker sends first
			close(work)
			return err
		}
	}
	defer close(work)
	for {
		// Wait for a call, or for the hang-up when every process under
		// the filter has exited (a receive would wait for ever then).
		pfd := []unix.PollFd{{Fd: int32(g.fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, -1); err != nil { // lifetime: the guarded processes (POLLHUP after the last)
			if err == unix.EINTR {
				continue
			}
			return err
		}
		if pfd[0].Revents&unix.POLLIN == 0 {
			return nil // POLLHUP: nobody left to guard
		}
		n := new(notif)
		if err := ioctl(g.fd, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(n)); err != nil {
			if err == unix.EINTR || err == unix.ENOENT {
				continue // interrupted, or the caller died before we read it
			}
			return err
		}
		work <- n // lifetime: the guard; a worker is free when its call returns
	}
}

func (g *Guard) worker(work <-chan *notif, ready chan<- error) {
	ready <- nil          // bound: ready has room for every worker
	for n := range work { // lifetime: the guard (Serve closes work)
		g.answer(n)
	}
}

// Kernel structures of the user-notification API.
type seccompData struct {
	nr   int32
	arch uint32
	ip   uint64
	args [6]uint64
}

type notif struct {
	id    uint64
	pid   uint32
	flags uint32
	data  seccompData
}

type notifResp struct {
	id    uint64
	val   int64
	error int32
	flags uint32
}

type notifAddfd struct {
	id         uint64
	flags      uint32
	srcfd      uint32
	newfd      uint32
	newfdFlags uint32
}

const (
	ioctlNotifIDValid = 0x40082102 // _IOW('!', 2, __u64)
	ioctlNotifAddfd   = 0x40182103 // _IOW('!', 3, struct seccomp_notif_addfd)
)

func ioctl(fd int, req uint, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}

// caller is one notification's process and arguments.
type caller struct {
	tid  int
	id   uint64
	args [6]uint64
}

func (g *Guard) valid(c *caller) bool {
	id := c.id
	return ioctl(g.fd, ioctlNotifIDValid, unsafe.Pointer(&id)) == nil
}

// answer carries out or refuses one call, and answers it.
func (g *Guard) answer(n *notif) {
	c := &caller{tid: int(n.pid), id: n.id, args: n.data.args}
	var val int64
	var errno unix.Errno
	call, ok := callByNr(n.data.nr)
	if !ok {
		errno = unix.ENOSYS
	} else {
		var fd int
		fd, val, errno = g.do(c, call)
		if fd >= 0 {
			g.sendFD(c, fd, call)
			unix.Close(fd)
			return
		}
	}
	resp := notifResp{id: c.id, val: val}
	if errno != 0 {
		resp.error = -int32(errno)
		resp.val = 0
	}
	ioctl(g.fd, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp))
}

// sendFD installs fd in the caller and answers its open with the number.
func (g *Guard) sendFD(c *caller, fd int, call call) {
	flags := call.fixedFlags
	if call.flags >= 0 {
		flags = c.args[call.flags]
	}
	add := notifAddfd{id: c.id, flags: unix.SECCOMP_ADDFD_FLAG_SEND, srcfd: uint32(fd)}
	if flags&unix.O_CLOEXEC != 0 {
		add.newfdFlags = unix.O_CLOEXEC
	}
	if err := ioctl(g.fd, ioctlNotifAddfd, unsafe.Pointer(&add)); err != nil {
		errno, _ := err.(unix.Errno)
		if errno == unix.ENOENT {
			return // the caller is gone
		}
		resp := notifResp{id: c.id, error: -int32(errno)}
		ioctl(g.fd, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp))
	}
}

// do carries out one allowed call, or says why not. fd >= 0 is a file to
// hand to the caller as the call's result.
func (g *Guard) do(c *caller, call call) (fd int, val int64, errno unix.Errno) {
	flags := call.fixedFlags
	if call.flags >= 0 {
		flags = c.args[call.flags]
	}
	mode := uint32(0)
	if call.mode >= 0 {
		mode = uint32(c.args[call.mode])
		if mode&setugid != 0 { // the filter refuses these already
			return -1, 0, unix.EPERM
		}
	}
	switch call.op {
	case opOpen:
		return g.doOpen(c, call, int(flags), mode)
	case opMkdir, opMknod, opSymlink:
		return -1, 0, g.doCreate(c, call, mode)
	case opUnlink:
		return -1, 0, g.doUnlink(c, call, flags)
	case opRename, opLink:
		return -1, 0, g.doMove(c, call, flags)
	case opTruncate:
		return -1, 0, g.doTruncate(c, call)
	case opChmod, opFchmod:
		return -1, 0, g.doChmod(c, call, flags, mode)
	}
	return -1, 0, unix.ENOSYS
}

// doCreate makes a folder, a node or a symbolic link.
func (g *Guard) doCreate(c *caller, call call, mode uint32) unix.Errno {
	var target string
	if call.op == opSymlink {
		t, err := readString(c, c.args[call.target])
		if err != nil {
			return errnoOf(err)
		}
		target = t
	}
	p, err := g.resolve(c, call.dirfd, call.path, false)
	if err != nil {
		return errnoOf(err)
	}
	defer p.close()
	if p.obj >= 0 || p.dot {
		return unix.EEXIST
	}
	if e := g.check(c, p, true); e != 0 {
		return e
	}
	um := callerUmask(c)
	if g.inRoot(p) {
		um |= unix.S_IWOTH // see worldWritable
	}
	return errnoOf(g.create(p, func() error {
		switch call.op {
		case opMkdir:
			if err := unix.Mkdirat(p.dir, p.opName(), mode&^um&0o7777); err != nil {
				return err
			}
			return g.noInheritedSetgid(p)
		case opMknod:
			dev := 0
			if call.dev >= 0 {
				dev = int(c.args[call.dev])
			}
			return unix.Mknodat(p.dir, p.name, mode&^(um&0o777), dev)
		default:
			return unix.Symlinkat(target, p.dir, p.name)
		}
	}))
}

// doUnlink removes a name.
func (g *Guard) doUnlink(c *caller, call call, flags uint64) unix.Errno {
	p, err := g.resolve(c, call.dirfd, call.path, false)
	if err != nil {
		return errnoOf(err)
	}
	defer p.close()
	switch {
	case p.obj >= 0:
		return unix.EACCES
	case p.dot && flags&unix.AT_REMOVEDIR != 0:
		return unix.EINVAL
	case p.dot:
		return unix.EISDIR
	}
	if e := g.check(c, p, false); e != 0 {
		return e
	}
	return errnoOf(unix.Unlinkat(p.dir, p.opName(), int(flags&unix.AT_REMOVEDIR)))
}

// doMove renames a name, or makes a second name of a file: both the
// source and the destination must be allowed.
func (g *Guard) doMove(c *caller, call call, flags uint64) unix.Errno {
	follow := call.op == opLink && flags&unix.AT_SYMLINK_FOLLOW != 0
	var from *resolved
	var err error
	if call.op == opLink && flags&unix.AT_EMPTY_PATH != 0 {
		from, err = g.resolveEmpty(c, call.dirfd, call.path)
	} else {
		from, err = g.resolve(c, call.dirfd, call.path, follow)
	}
	if err != nil {
		return errnoOf(err)
	}
	defer from.close()
	to, err := g.resolve(c, call.dirfd2, call.path2, false)
	if err != nil {
		return errnoOf(err)
	}
	defer to.close()
	if to.obj >= 0 || to.dot || from.dot || call.op == opRename && from.obj >= 0 {
		return unix.EBUSY
	}
	if e := g.check(c, from, false); e != 0 {
		return e
	}
	if e := g.check(c, to, true); e != 0 {
		return e
	}
	if call.op == opLink && g.inRoot(to) && !unnamed(from) {
		// A second name of a file in the workspace would show its content
		// after the file became a secret that a start masks by name. Only
		// an unnamed file (O_TMPFILE) may get its first name this way.
		g.log("guard: refused a hard link in the workspace")
		return unix.EPERM
	}
	if call.op == opRename && flags&unix.RENAME_EXCHANGE != 0 {
		// The destination moves to the source's place: it must be allowed
		// there too, and its own path is checked above.
		if e := g.check(c, &resolved{dir: from.dir, name: to.name, obj: -1}, true); e != 0 {
			return e
		}
	}
	var undo []func()
	if call.op == opRename {
		undo = append(undo, func() { unix.Renameat2(to.dir, to.name, from.dir, from.name, unix.RENAME_NOREPLACE) })
	}
	return errnoOf(g.create(to, func() error {
		if call.op == opRename {
			return unix.Renameat2(from.dir, from.opName(), to.dir, to.opName(), uint(flags))
		}
		if from.obj >= 0 {
			return unix.Linkat(unix.AT_FDCWD, selfFD(from.obj), to.dir, to.name, unix.AT_SYMLINK_FOLLOW)
		}
		return unix.Linkat(from.dir, from.name, to.dir, to.name, 0)
	}, undo...))
}

// unnamed reports whether r is a file without a name (made with O_TMPFILE).
func unnamed(r *resolved) bool {
	var st unix.Stat_t
	var err error
	if r.obj >= 0 {
		err = unix.Fstat(r.obj, &st)
	} else {
		err = unix.Fstatat(r.dir, r.name, &st, unix.AT_SYMLINK_NOFOLLOW)
	}
	return err == nil && st.Nlink == 0
}

// doTruncate changes a file's length.
func (g *Guard) doTruncate(c *caller, call call) unix.Errno {
	p, err := g.resolve(c, call.dirfd, call.path, true)
	if err != nil {
		return errnoOf(err)
	}
	defer p.close()
	if e := g.check(c, p, false); e != 0 {
		return e
	}
	f, err := p.open(unix.O_WRONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return errnoOf(err)
	}
	defer unix.Close(f)
	return errnoOf(unix.Ftruncate(f, int64(c.args[1])))
}

// doChmod changes a file's mode, by path or by the caller's descriptor.
func (g *Guard) doChmod(c *caller, call call, flags uint64, mode uint32) unix.Errno {
	var p *resolved
	if call.op == opFchmod {
		obj, err := openCallerFD(c, int(int32(c.args[call.fd])))
		if err != nil {
			return errnoOf(err)
		}
		p = &resolved{dir: -1, obj: obj}
		if !g.valid(c) {
			p.close()
			return unix.ESRCH
		}
	} else {
		var err error
		if p, err = g.resolve(c, call.dirfd, call.path, flags&unix.AT_SYMLINK_NOFOLLOW == 0); err != nil {
			return errnoOf(err)
		}
	}
	defer p.close()
	if e := g.check(c, p, false); e != 0 {
		return e
	}
	if mode&unix.S_IWOTH != 0 && g.inRoot(p) {
		g.log("guard: refused making a file or folder of the workspace writable by every user")
		return unix.EACCES
	}
	return errnoOf(p.chmod(mode))
}

// The roots are where the host's programs work: a file or folder there
// that every local user may write would let any of them plant what the
// guard keeps kernel code from planting (a hook in a repository, a
// .claude folder at the root). So the guard leaves S_IWOTH out of what
// kernel code creates there, and refuses a chmod that adds it; ACLs are
// refused for all (the filter refuses the xattr calls).

// noInheritedSetgid takes off the S_ISGID bit a folder just made inherits
// from a setgid parent: no file or folder kernel code makes carries a
// setuid or setgid bit.
func (g *Guard) noInheritedSetgid(p *resolved) error {
	var st unix.Stat_t
	if err := unix.Fstatat(p.dir, p.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil
	}
	if st.Mode&unix.S_ISGID == 0 || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	return unix.Fchmodat(p.dir, p.name, st.Mode&0o1777, 0)
}

func (g *Guard) doOpen(c *caller, call call, flags int, mode uint32) (int, int64, unix.Errno) {
	// As the kernel does: with O_CREAT|O_EXCL (or O_NOFOLLOW) a link as
	// the last name is not followed.
	follow := flags&unix.O_NOFOLLOW == 0 && !(flags&unix.O_CREAT != 0 && flags&unix.O_EXCL != 0)
	p, err := g.resolve(c, call.dirfd, call.path, follow)
	if err != nil {
		return -1, 0, errnoOf(err)
	}
	defer p.close()
	if e := g.check(c, p, flags&unix.O_CREAT != 0); e != 0 {
		return -1, 0, e
	}
	um := callerUmask(c)
	if g.inRoot(p) {
		um |= unix.S_IWOTH // see worldWritable
	}
	m := mode &^ um & 0o7777
	fd := -1
	err = g.create(p, func() error {
		var err error
		fd, err = p.open(flags|unix.O_CLOEXEC, m)
		return err
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, 0, errnoOf(err)
	}
	return fd, 0, 0
}

// resolved is a path resolved for one call: the folder (an O_PATH
// descriptor) and the last name in it, or, for a path that names one of
// the caller's descriptors (/dev/stdout, /proc/self/fd/3), that object.
type resolved struct {
	dir     int // -1 with obj
	name    string
	slash   bool // the path ended with "/"
	dot     bool // the last name was "." or "..": dir is that folder itself
	obj     int  // -1 unless the path named a descriptor
	dirPath string
}

func (r *resolved) close() {
	if r.dir >= 0 {
		unix.Close(r.dir)
	}
	if r.obj >= 0 {
		unix.Close(r.obj)
	}
}

// opName is the name to pass to an *at call, with the trailing slash kept.
func (r *resolved) opName() string {
	if r.slash {
		return r.name + "/"
	}
	return r.name
}

func (r *resolved) open(flags int, mode uint32) (int, error) {
	switch {
	case r.obj >= 0:
		return unix.Open(selfFD(r.obj), flags&^(unix.O_CREAT|unix.O_EXCL), 0)
	case r.dot:
		return unix.Openat(r.dir, ".", flags&^(unix.O_CREAT|unix.O_EXCL), 0)
	default:
		return unix.Openat(r.dir, r.opName(), flags|unix.O_NOFOLLOW, mode)
	}
}

func (r *resolved) chmod(mode uint32) error {
	switch {
	case r.obj >= 0:
		return unix.Fchmodat(unix.AT_FDCWD, selfFD(r.obj), mode, 0)
	case r.dot:
		return unix.Fchmodat(r.dir, ".", mode, 0)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(r.dir, r.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return unix.EOPNOTSUPP // a link's own mode cannot change on Linux
	}
	return unix.Fchmodat(r.dir, r.name, mode, 0)
}

// path returns where the resolved path is, as the caller sees it: "" for
// a descriptor that has no path (a pipe, a socket) or a folder that was
// removed (nothing can be made in it). An error when the path cannot be
// told (longer than PATH_MAX): the caller refuses the call.
func (r *resolved) path() (string, error) {
	if r.obj >= 0 {
		return fdPath(r.obj)
	}
	d := r.dirPath
	if d == "" {
		var err error
		if d, err = fdPath(r.dir); err != nil || d == "" {
			return "", err
		}
		r.dirPath = d
	}
	if r.dot {
		return d, nil
	}
	return filepath.Join(d, r.name), nil
}

func selfFD(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// fdPath is the path of one of the guard's descriptors. The kernel writes
// " (deleted)" after the path of a removed file or folder, and a name may
// end so too: the link count tells which. A path longer than PATH_MAX is
// an error (kernel code could build one deep down, then rename the
// folders above it short).
func fdPath(fd int) (string, error) {
	p, err := os.Readlink(selfFD(fd))
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(p, "/") {
		return "", nil // a pipe, a socket, an anonymous inode
	}
	if strings.HasSuffix(p, " (deleted)") {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return "", err
		}
		if st.Nlink == 0 {
			return "", nil // removed: nothing can be made below it
		}
	}
	return p, nil
}

// maxLinks is how many symbolic links a path may pass through, as in the
// kernel.
const maxLinks = 40

// resolve reads the path argument pathArg of c and resolves it from the
// descriptor argument dirfdArg (-1: the working directory), following a
// last-name link when follow is set.
func (g *Guard) resolve(c *caller, dirfdArg, pathArg int, follow bool) (*resolved, error) {
	p, err := readString(c, c.args[pathArg])
	if err != nil {
		return nil, err
	}
	if p == "" {
		return nil, unix.ENOENT
	}
	dirfd := unix.AT_FDCWD
	if dirfdArg >= 0 {
		dirfd = int(int32(c.args[dirfdArg]))
	}
	hops := 0
	r, err := g.walk(c, dirfd, -1, p, follow, &hops)
	if err != nil {
		return nil, err
	}
	if !g.valid(c) { // the /proc entries opened were the caller's
		r.close()
		return nil, unix.ESRCH
	}
	return r, nil
}

// resolveEmpty resolves linkat's AT_EMPTY_PATH source: the caller's
// descriptor itself.
func (g *Guard) resolveEmpty(c *caller, dirfdArg, pathArg int) (*resolved, error) {
	if p, err := readString(c, c.args[pathArg]); err != nil || p != "" {
		return g.resolve(c, dirfdArg, pathArg, false)
	}
	obj, err := openCallerFD(c, int(int32(c.args[dirfdArg])))
	if err != nil {
		return nil, err
	}
	if !g.valid(c) {
		unix.Close(obj)
		return nil, unix.ESRCH
	}
	return &resolved{dir: -1, obj: obj}, nil
}

// walk resolves p. base is an O_PATH descriptor the guard owns (-1: none
// yet; then dirfd, the caller's, says where a relative p starts).
func (g *Guard) walk(c *caller, dirfd, base int, p string, follow bool, hops *int) (*resolved, error) {
	p = callerMagic(p, c.tid)
	if n, rest, ok := callerFDPath(p, c.tid); ok {
		obj, err := openCallerFD(c, n)
		if err != nil {
			return nil, err
		}
		if rest == "" {
			if base >= 0 {
				unix.Close(base)
			}
			return &resolved{dir: -1, obj: obj}, nil
		}
		if base >= 0 {
			unix.Close(base)
		}
		return g.walk(c, dirfd, obj, rest, follow, hops)
	}
	start := base
	switch {
	case strings.HasPrefix(p, "/"):
		// Absolute: the caller's root is the guard's.
	case base >= 0:
	case dirfd == unix.AT_FDCWD:
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/cwd", c.tid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, procErr(err)
		}
		start = fd
	default:
		fd, err := openCallerFD(c, dirfd)
		if err != nil {
			return nil, err
		}
		start = fd
	}
	defer func() {
		if start >= 0 {
			unix.Close(start)
		}
	}()
	dir, name, slash := splitLast(p)
	atFD := start
	if atFD < 0 {
		atFD = unix.AT_FDCWD
	}
	dfd, err := unix.Openat2(atFD, dir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, err
	}
	r := &resolved{dir: dfd, name: name, slash: slash, obj: -1}
	if name == "." || name == ".." {
		fd, err := unix.Openat2(dfd, name, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS})
		unix.Close(dfd)
		if err != nil {
			return nil, err
		}
		return &resolved{dir: fd, name: ".", dot: true, obj: -1}, nil
	}
	if !follow && !slash {
		return r, nil
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
		return r, nil // missing (to be created) or not a link
	}
	if *hops++; *hops > maxLinks {
		r.close()
		return nil, unix.ELOOP
	}
	target, err := readlinkat(dfd, name)
	if err != nil {
		r.close()
		return nil, err
	}
	if slash {
		target += "/"
	}
	// The link's target is resolved from the folder that holds it.
	return g.walk(c, unix.AT_FDCWD, dfd, target, follow, hops)
}

// splitLast splits p into its folder and last name ("." for a name alone;
// trailing slashes are dropped and reported).
func splitLast(p string) (dir, name string, slash bool) {
	trimmed := strings.TrimRight(p, "/")
	if trimmed == "" { // "/" or "//"
		return "/", ".", false
	}
	slash = len(trimmed) < len(p)
	i := strings.LastIndexByte(trimmed, '/')
	switch {
	case i < 0:
		return ".", trimmed, slash
	case i == 0:
		return "/", trimmed[1:], slash
	default:
		return trimmed[:i], trimmed[i+1:], slash
	}
}

// callerMagic rewrites the names of the caller's own /proc entry and its
// descriptors (/proc/self, /proc/thread-self, /dev/fd, /dev/stdin...) to
// /proc/<tid>, where callerFDPath finds them.
func callerMagic(p string, tid int) string {
	self := "/proc/" + strconv.Itoa(tid)
	switch p {
	case "/dev/stdin":
		return self + "/fd/0"
	case "/dev/stdout":
		return self + "/fd/1"
	case "/dev/stderr":
		return self + "/fd/2"
	}
	for _, pre := range []string{"/dev/fd", "/proc/self/fd", "/proc/thread-self/fd"} {
		if rest, ok := strings.CutPrefix(p, pre); ok && (rest == "" || rest[0] == '/') {
			return self + "/fd" + rest
		}
	}
	for _, pre := range []string{"/proc/self", "/proc/thread-self"} {
		if rest, ok := strings.CutPrefix(p, pre); ok && (rest == "" || rest[0] == '/') {
			return self + rest
		}
	}
	return p
}

// callerFDPath matches /proc/<tid>/fd/<n>[/rest] and
// /proc/<tid>/task/<tid>/fd/<n>[/rest] for the caller's own tid.
func callerFDPath(p string, tid int) (n int, rest string, ok bool) {
	self := "/proc/" + strconv.Itoa(tid)
	r, ok := strings.CutPrefix(p, self+"/fd/")
	if !ok {
		r, ok = strings.CutPrefix(p, self+"/task/"+strconv.Itoa(tid)+"/fd/")
	}
	if !ok {
		return 0, "", false
	}
	num, rest, _ := strings.Cut(r, "/")
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 {
		return 0, "", false
	}
	return n, rest, true
}

// openCallerFD opens the caller's descriptor n (O_PATH).
func openCallerFD(c *caller, n int) (int, error) {
	if n < 0 {
		return -1, unix.EBADF
	}
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/fd/%d", c.tid, n), unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return -1, unix.EBADF
		}
		return -1, procErr(err)
	}
	return fd, nil
}

func procErr(err error) error {
	if errors.Is(err, unix.ENOENT) {
		return unix.ESRCH
	}
	return err
}

func readlinkat(dfd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// readString reads a NUL-terminated path from the caller's memory.
func readString(c *caller, addr uint64) (string, error) {
	if addr == 0 {
		return "", unix.EFAULT
	}
	var out []byte
	const page = 4096
	for len(out) < unix.PathMax {
		n := page - int(addr%page) // up to the end of the page
		buf := make([]byte, n)
		got, err := readMem(c.tid, buf, addr)
		if err != nil {
			if errors.Is(err, unix.ESRCH) {
				return "", unix.ESRCH
			}
			return "", unix.EFAULT
		}
		if i := indexByte(buf[:got], 0); i >= 0 {
			return string(append(out, buf[:i]...)), nil
		}
		out = append(out, buf[:got]...)
		addr += uint64(got)
		if got < n {
			return "", unix.EFAULT
		}
	}
	return "", unix.ENAMETOOLONG
}

// readMem reads the caller's memory at addr: process_vm_readv, or its
// /proc/<tid>/mem where a container's filter refuses that call.
func readMem(tid int, buf []byte, addr uint64) (int, error) {
	n, err := unix.ProcessVMReadv(tid, []unix.Iovec{{Base: &buf[0], Len: uint64(len(buf))}},
		[]unix.RemoteIovec{{Base: uintptr(addr), Len: len(buf)}}, 0)
	if err == nil || !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.ENOSYS) {
		return n, err
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", tid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.ReadAt(buf, int64(addr))
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// callerUmask reads the caller's umask (0o022 when it cannot).
func callerUmask(c *caller) uint32 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.tid))
	if err != nil {
		return 0o022
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
				return uint32(m)
			}
		}
	}
	return 0o022
}

func errnoOf(err error) unix.Errno {
	if err == nil {
		return 0
	}
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EIO
}
