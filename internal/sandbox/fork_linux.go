package sandbox

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/linelog"
	"github.com/ipybox/ipybox/internal/seccomp"
)

// A forked kernel (Options.Zygote): bwrap builds the sandbox exactly as
// for an exec'd kernel (buildView and initConfig, unchanged), and its
// init, instead of starting the program, hands the host the sandbox's
// namespace descriptors and two sockets (fork and report). The host
// passes them to the sandbox fork server (kernel.NewSandboxZygote), a
// Python that has imported ipykernel and has seen nothing of any session.
// Its child C joins the namespaces, takes the sandbox's uid and gid,
// drops every capability, and forks the kernel G, which is born in the
// sandbox's pid namespace. G says hello on the fork socket; the init
// learns its pid from the credentials the kernel attaches to the message
// (SO_PASSCRED), and sends G its session: argv, environment, working
// directory, resource limits, its standard streams, the seccomp program
// and the Landlock rulesets, all computed here by the code that restricts
// an exec'd program (filterOptions, landlockRuleset,
// seccomp.SocketRuleset). G applies them in startRestricted's order and
// returns the guard's listener, which the init serves; only then does
// user code run. C exits once it has forked G, and G's parent is the
// fork server (a child subreaper), outside the sandbox, which keeps the
// report socket (G closed its copy first thing) and reports G's wait
// status on it; C's error, if it fails to join, comes on it too. The
// init exits (ending the sandbox) when the report socket closes without
// a status: when the fork server dies.

// forkTimeout bounds the init's wait for the forked kernel's messages.
const forkTimeout = 30 * time.Second

// forkNamespaces are the namespaces a forked kernel joins, in the order
// the init sends them (the host reorders them for joining).
var forkNamespaces = []string{"user", "mnt", "uts", "ipc", "net", "cgroup", "pid"}

// filterOptions is the seccomp filter of the program c describes,
// exec'd (startRestricted) or forked (forkSetupOf).
func filterOptions(c *initConfig) seccomp.Options {
	return seccomp.Options{Confine: true, DenyUnix: c.DenyUnixSockets, Guard: c.Guard != nil}
}

// rlimitsOf are the resource limits of the program c describes, exec'd
// (startRestricted) or forked (forkSetupOf).
func rlimitsOf(c *initConfig) []seccomp.Rlimit {
	var out []seccomp.Rlimit
	if c.Memory > 0 {
		out = append(out, seccomp.Rlimit{Resource: unix.RLIMIT_DATA, Value: uint64(c.Memory)})
	}
	if c.Pids > 0 {
		out = append(out, seccomp.Rlimit{Resource: unix.RLIMIT_NPROC, Value: uint64(c.Pids)})
	}
	if c.FileSize > 0 {
		out = append(out, seccomp.Rlimit{Resource: unix.RLIMIT_FSIZE, Value: uint64(c.FileSize)})
	}
	return out
}

// forkSetup is what the init sends a forked kernel.
type forkSetup struct {
	Argv       []string   `json:"argv"`
	Env        []string   `json:"env"`
	Dir        string     `json:"dir"`
	Rlimits    [][2]int64 `json:"rlimits,omitempty"`
	Filter     string     `json:"filter"`
	SeccompNr  int        `json:"seccomp_nr"`
	Guard      bool       `json:"guard,omitempty"`
	Kernel     bool       `json:"kernel,omitempty"`
	PythonPath []string   `json:"pythonpath,omitempty"`
}

// forkedProgram has the host fork the program into this sandbox, and
// returns its pid and a function that waits for its exit (the init's exit
// code) while reaping orphans.
func forkedProgram(c *initConfig, ctl *os.File) (int, func() int, error) {
	if ctl == nil {
		return 0, nil, errors.New("a forked program needs the control socket")
	}
	setup, setupChild, err := seqpacketPair()
	if err != nil {
		return 0, nil, err
	}
	defer setup.Close()
	report, reportChild, err := seqpacketPair()
	if err != nil {
		setupChild.Close()
		return 0, nil, err
	}
	if err := unix.SetsockoptInt(int(setup.Fd()), unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		return 0, nil, fmt.Errorf("fork socket: %w", err)
	}
	fds := []int{}
	for _, ns := range forkNamespaces {
		fd, err := unix.Open("/proc/self/ns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, nil, fmt.Errorf("namespace %s: %w", ns, err)
		}
		defer unix.Close(fd)
		fds = append(fds, fd)
	}
	fds = append(fds, int(setupChild.Fd()), int(reportChild.Fd()))
	err = unix.Sendmsg(int(ctl.Fd()), []byte("fork\n"), unix.UnixRights(fds...), nil, 0)
	setupChild.Close()
	reportChild.Close()
	if err != nil {
		return 0, nil, fmt.Errorf("ask for a fork: %w", err)
	}
	reports := make(chan forkReport, 2)
	go readReports(report, reports) // lifetime: the report socket (G's life, or the fork server's)
	pid, early, err := forkHandshake(c, setup, reports)
	if err != nil {
		if pid > 0 {
			syscall.Kill(-pid, syscall.SIGKILL)
		}
		return 0, nil, err
	}
	return pid, func() int { return waitForked(early, reports) }, nil
}

// forkReport is one message of C's report socket; eof: it closed.
type forkReport struct {
	Exit  *int   `json:"exit"`
	Error string `json:"error"`
	eof   bool
}

func readReports(f *os.File, out chan<- forkReport) {
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		if err != nil || n == 0 {
			out <- forkReport{eof: true} // bound: buffered; C's error or G's exit came before, once
			return
		}
		var r forkReport
		if json.Unmarshal(buf[:n], &r) == nil && (r.Exit != nil || r.Error != "") {
			out <- r // bound: buffered; C sends one error, or the fork server one exit, then closes
		}
	}
}

// forkHandshake receives the kernel's hello, sends its setup, and serves
// the guard on the listener it returns. It returns the kernel's pid in
// the sandbox (and a pid with an error when the kernel is to be killed).
func forkHandshake(c *initConfig, setup *os.File, reports <-chan forkReport) (int, *forkReport, error) {
	type msg struct {
		data []byte
		pid  int
		fds  []int
		err  error
	}
	recv := func() <-chan msg {
		ch := make(chan msg, 1)
		go func() { // bound: the socket's peer sends or closes; the init exits past forkTimeout
			buf := make([]byte, 64<<10)
			oob := make([]byte, unix.CmsgSpace(4*4)+unix.CmsgSpace(int(unsafe.Sizeof(unix.Ucred{}))))
			n, oobn, _, _, err := unix.Recvmsg(int(setup.Fd()), buf, oob, 0)
			m := msg{err: err}
			if err == nil {
				m.data = buf[:n]
				m.pid, m.fds = parseOOB(oob[:oobn])
			}
			ch <- m // bound: ch is buffered
		}()
		return ch
	}
	timeout := time.After(forkTimeout)
	var early *forkReport
	await := func() (msg, error) {
		got := recv()
		var m msg
		select { // bound: timeout is a timer case
		case m = <-got:
		case r := <-reports:
			if r.Error != "" {
				return msg{}, errors.New(r.Error)
			}
			// The kernel exited (a program that ends at once), or C died;
			// what it said last tells which.
			early = &r
			select {
			case m = <-got:
			case <-time.After(time.Second):
				return msg{}, errors.New("the forked kernel exited before it started")
			}
		case <-timeout:
			return msg{}, fmt.Errorf("no forked kernel after %v", forkTimeout)
		}
		if m.err != nil || len(m.data) == 0 {
			return m, fmt.Errorf("the forked kernel closed its socket (%v)", m.err)
		}
		return m, nil
	}
	hello, err := await()
	closeFDs(hello.fds)
	if err != nil {
		return 0, nil, err
	}
	pid := hello.pid
	if pid <= 1 {
		return 0, nil, fmt.Errorf("the forked kernel's hello carries no credentials")
	}
	// A socket that sends with SO_PASSCRED on and no address gets an
	// abstract one (autobind), which the kernel would then see in its
	// network namespace; the hello's credentials were all it was for.
	if err := unix.SetsockoptInt(int(setup.Fd()), unix.SOL_SOCKET, unix.SO_PASSCRED, 0); err != nil {
		return pid, nil, fmt.Errorf("fork socket: %w", err)
	}
	rulesets, err := forkRulesets(c)
	if err != nil {
		return pid, nil, err
	}
	defer closeFDs(rulesets)
	js, err := forkSetupOf(c)
	if err != nil {
		return pid, nil, err
	}
	rights := unix.UnixRights(append([]int{0, 1, 2}, rulesets...)...)
	if err := unix.Sendmsg(int(setup.Fd()), js, rights, nil, 0); err != nil {
		return pid, nil, fmt.Errorf("send the kernel its setup: %w", err)
	}
	res, err := await()
	if err != nil {
		closeFDs(res.fds)
		return pid, nil, err
	}
	if err := forkReady(c, res.data, res.fds); err != nil {
		return pid, nil, err
	}
	return pid, early, nil
}

// forkReady reads the forked kernel's last message (data, with the
// descriptors fds it carried): "ok" with the guard's listener, which it
// serves, or an error.
func forkReady(c *initConfig, data []byte, fds []int) error {
	var r struct {
		OK    int    `json:"ok"`
		Error string `json:"error"`
	}
	if json.Unmarshal(data, &r); r.OK != 1 {
		closeFDs(fds)
		return fmt.Errorf("forked kernel: %s", r.Error)
	}
	if c.Guard == nil {
		closeFDs(fds)
		return nil
	}
	if len(fds) != 1 {
		closeFDs(fds)
		return errors.New("forked kernel: no guard listener")
	}
	serveGuard(fds[0], c.Guard)
	return nil
}

// serveGuard serves the workspace guard on a forked kernel's listener,
// as seccomp.Start does for an exec'd one, and sets the init's umask to
// 0 (the guard applies the kernel's own).
func serveGuard(listener int, pol *seccomp.Policy) {
	log := func(msg string) { fmt.Fprintf(os.Stderr, "ipybox sandbox: %s\n", msg) }
	g := seccomp.NewGuard(listener, *pol, log)
	go func() { // lifetime: the init
		if err := g.Serve(); err != nil && err != unix.EBADF {
			log(fmt.Sprintf("guard: stopped: %v", err))
		}
		unix.Close(listener)
	}()
	unix.Umask(0)
}

// forkRulesets builds the Landlock rulesets an exec'd program would get:
// applyLandlock's, and with a guard, the socket ruleset.
func forkRulesets(c *initConfig) ([]int, error) {
	var out []int
	fd, err := landlockRuleset(c)
	if err != nil {
		return nil, fmt.Errorf("landlock: %w", err)
	}
	if fd >= 0 {
		out = append(out, fd)
	}
	if c.Guard != nil {
		fd, err := seccomp.SocketRuleset(c.Guard.SocketDirs)
		if err != nil {
			closeFDs(out)
			return nil, err
		}
		out = append(out, fd)
	}
	return out, nil
}

// forkSetupOf is the setup message for c's program.
func forkSetupOf(c *initConfig) ([]byte, error) {
	prog, err := seccomp.Program(filterOptions(c))
	if err != nil {
		return nil, err
	}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&prog[0])), len(prog)*int(unsafe.Sizeof(prog[0])))
	dir, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	st := forkSetup{Argv: c.Argv, Env: programEnvOf(c), Dir: dir, Filter: hex.EncodeToString(raw),
		SeccompNr: unix.SYS_SECCOMP, Guard: c.Guard != nil, Kernel: c.Kernel}
	for _, kv := range st.Env {
		if v, ok := strings.CutPrefix(kv, "PYTHONPATH="); ok && v != "" {
			st.PythonPath = filepath.SplitList(v)
		}
	}
	for _, r := range rlimitsOf(c) {
		st.Rlimits = append(st.Rlimits, [2]int64{int64(r.Resource), int64(r.Value)})
	}
	return json.Marshal(st)
}

// waitForked waits for the forked kernel's exit report while reaping the
// orphans that the init inherits, and returns the init's exit code.
func waitForked(early *forkReport, reports <-chan forkReport) int {
	chld := make(chan os.Signal, 8)
	signal.Notify(chld, syscall.SIGCHLD)
	reap := func() {
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil) // bound: WNOHANG
			if pid <= 0 || err != nil {
				return
			}
		}
	}
	reap()
	r := early
	for r == nil {
		select { // lifetime: the kernel (C reports its exit, or dies with the fork server, and the socket closes)
		case <-chld:
			reap()
		case rep := <-reports:
			r = &rep
		}
	}
	if r.Exit == nil {
		return 128 + int(syscall.SIGKILL)
	}
	ws := syscall.WaitStatus(*r.Exit)
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

func parseOOB(oob []byte) (pid int, fds []int) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, nil
	}
	for _, m := range msgs {
		if r, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, r...)
			continue
		}
		if cr, err := unix.ParseUnixCredentials(&m); err == nil {
			pid = int(cr.Pid)
		}
	}
	return pid, fds
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func seqpacketPair() (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "fork"), os.NewFile(uintptr(fds[1]), "fork-child"), nil
}

// Host side.

// forks reports whether a kernel of spec, run by exe in the view, is
// forked: a Forker is set and runs exe itself.
func (s *Sandbox) forks(path, exe string) bool {
	return s.forker != nil && exe == path && s.forker.Python() == path
}

// joinFork waits for the init's request for a fork (bounded by
// startTimeout and ctx) and has the Forker fork the kernel into the
// sandbox. On error, the sandbox is ended.
func (s *Sandbox) joinFork(ctx context.Context, cmd *exec.Cmd, ctl *os.File, tail *linelog.Writer, path string) error {
	got := make(chan forkAsk, 1)
	go func() { // bound: the init sends or exits; abortStart shuts the socket down
		buf := make([]byte, 4096)
		oob := make([]byte, unix.CmsgSpace(4*(len(forkNamespaces)+2)))
		n, oobn, _, _, err := unix.Recvmsg(int(ctl.Fd()), buf, oob, 0)
		var r forkAsk
		if err == nil {
			r.line = string(buf[:n])
			_, r.fds = parseOOB(oob[:oobn])
		}
		got <- r // bound: got is buffered
	}()
	wait, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	var r forkAsk
	select { // bound: wait has startTimeout
	case r = <-got:
	case <-wait.Done():
		abortStartFork(cmd, ctl, got)
		return fmt.Errorf("sandbox: waiting for the sandbox to start %s: %w", path, wait.Err())
	}
	files := make([]*os.File, len(r.fds))
	for i, fd := range r.fds {
		files[i] = os.NewFile(uintptr(fd), "sandbox-ns")
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if r.line != "fork\n" || len(files) != len(forkNamespaces)+2 {
		// An error line, or bwrap's exit: awaitReady reports it.
		return s.failFork(cmd, ctl, tail, path, r.line)
	}
	order, parents, err := joinOrder(files[:len(forkNamespaces)])
	defer func() {
		for _, f := range parents {
			f.Close()
		}
	}()
	if err == nil {
		uid, gid := os.Getuid(), os.Getgid()
		if s.mapped {
			uid, gid = 0, 0
		}
		err = s.forker.Join(ctx, &kernel.JoinRequest{Namespaces: order, UID: uid, GID: gid,
			Setup: files[len(forkNamespaces)], Report: files[len(forkNamespaces)+1]})
	}
	if err != nil {
		shutdownCtl(ctl)
		cmd.Process.Kill()
		cmd.Wait() // bound: killed above; WaitDelay
		ctl.Close()
		return fmt.Errorf("sandbox: fork %s into the sandbox: %w", path, err)
	}
	return nil
}

// failFork ends a sandbox whose init did not ask for a fork and says why.
func (s *Sandbox) failFork(cmd *exec.Cmd, ctl *os.File, tail *linelog.Writer, path, line string) error {
	shutdownCtl(ctl)
	cmd.Process.Kill()
	cmd.Wait() // bound: killed above; WaitDelay
	ctl.Close()
	why := strings.TrimSpace(strings.TrimPrefix(line, "error: "))
	if why == "" {
		why = "bwrap exited before the process started"
	}
	tail.Flush()
	if t := tail.Tail(8); t != "" {
		why += ": " + t
	}
	return launchError{fmt.Errorf("sandbox: start %s: %s", path, why)}
}

// forkAsk is the init's first message on the control socket in fork
// mode: "fork" with the descriptors, or an error line.
type forkAsk struct {
	line string
	fds  []int
}

// abortStartFork is abortStart for a start that waits for the init's
// request for a fork.
func abortStartFork(cmd *exec.Cmd, ctl *os.File, got <-chan forkAsk) {
	shutdownAndReap(cmd, ctl)
	r := <-got // bound: at once: the socket is shut down
	closeFDs(r.fds)
	ctl.Close()
}

// nsGetParent is NS_GET_PARENT: the parent of a user namespace.
const nsGetParent = 0xb702

// joinOrder returns the namespaces to join, in an order that works both
// for host root and for an unprivileged owner: the user namespaces from
// the one below the host's own down to the sandbox's, but the sandbox's
// own (bwrap nests one for --disable-userns) last, after the others, which
// its parent owns. A namespace the host is in already is left out.
func joinOrder(ns []*os.File) (order, parents []*os.File, err error) {
	self := func(name string) (unix.Stat_t, error) {
		var st unix.Stat_t
		err := unix.Stat("/proc/self/ns/"+name, &st)
		return st, err
	}
	same := func(f *os.File, st unix.Stat_t) bool {
		var fst unix.Stat_t
		return unix.Fstat(int(f.Fd()), &fst) == nil && fst.Ino == st.Ino && fst.Dev == st.Dev
	}
	hostUser, err := self("user")
	if err != nil {
		return nil, nil, err
	}
	var chain []*os.File // innermost first
	cur := ns[0]
	for i := 0; !same(cur, hostUser); i++ {
		if i > 8 {
			return nil, parents, errors.New("the sandbox's user namespace is nested too deep")
		}
		chain = append(chain, cur)
		fd, err := unix.IoctlRetInt(int(cur.Fd()), nsGetParent)
		if err != nil {
			return nil, parents, fmt.Errorf("parent of the sandbox's user namespace: %w", err)
		}
		unix.CloseOnExec(fd)
		cur = os.NewFile(uintptr(fd), "userns-parent")
		parents = append(parents, cur)
	}
	if len(chain) == 0 {
		return nil, parents, errors.New("the sandbox has no user namespace of its own")
	}
	var others []*os.File
	for i, name := range forkNamespaces[1:] {
		st, err := self(name)
		if err == nil && same(ns[i+1], st) {
			continue
		}
		others = append(others, ns[i+1])
	}
	for i := len(chain) - 1; i >= 1; i-- {
		order = append(order, chain[i])
	}
	if len(chain) == 1 {
		return append(append(order, chain[0]), others...), parents, nil
	}
	return append(append(order, others...), chain[0]), parents, nil
}
