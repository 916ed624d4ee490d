package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ipybox/ipybox/internal/egress"
	"github.com/ipybox/ipybox/internal/seccomp"
)

// initConfig is what the launcher tells the init: JSON in a memfd whose
// descriptor number is the init's last argument.
type initConfig struct {
	// Path and Argv are the program to run, and Env its environment
	// (programEnv). The init itself starts with initEnv: Env reaches the
	// program only at its exec, after the seccomp filter, the guard and
	// Landlock are in place (never bwrap, the init, nor the limit step).
	Path string   `json:"path"`
	Argv []string `json:"argv"`
	Env  []string `json:"env,omitempty"`
	// CtlFD is the control socket to the host (0: none). The host writes
	// one byte per signal to forward; the init writes "ok\n" or
	// "error: …\n" once the program runs or failed to start.
	CtlFD int `json:"ctl_fd,omitempty"`
	// ArgsFD is bwrap's argument file, closed at once.
	ArgsFD int `json:"args_fd,omitempty"`
	// Forwards are TCP ports on 127.0.0.1 relayed to unix sockets.
	Forwards []Forward `json:"forwards,omitempty"`
	// Landlock asks for a best-effort ruleset: ReadOnly paths readable and
	// executable, Writable paths fully accessible.
	Landlock bool     `json:"landlock,omitempty"`
	ReadOnly []string `json:"read_only,omitempty"`
	Writable []string `json:"writable,omitempty"`
	// RestrictUnixConnect limits connecting to path unix sockets to those
	// below UnixConnect (Landlock ABI 9; best effort).
	RestrictUnixConnect bool     `json:"restrict_unix_connect,omitempty"`
	UnixConnect         []string `json:"unix_connect,omitempty"`
	// ScopeAbstract keeps abstract unix sockets within the Landlock domain
	// (Landlock ABI 6; best effort).
	ScopeAbstract bool `json:"scope_abstract,omitempty"`
	// DenyUnixSockets makes socket(AF_UNIX, …) fail with EPERM (seccomp).
	DenyUnixSockets bool `json:"deny_unix,omitempty"`
	// Memory, Pids and FileSize are the program's resource limits (0:
	// none); see limitMain.
	Memory   int64 `json:"memory,omitempty"`
	Pids     int   `json:"pids,omitempty"`
	FileSize int64 `json:"file_size,omitempty"`
	// Self is the init's own path inside the sandbox, which runs
	// limitMain where ptrace is not allowed.
	Self string `json:"self,omitempty"`
	// Guard is the workspace guard's policy; nil: no guard (the setuid
	// rules of the filter hold all the same).
	Guard *seccomp.Policy `json:"guard,omitempty"`
	// Fork: the program is not exec'd but forked into the sandbox by the
	// host's sandbox fork server (fork_linux.go); Kernel: its arguments
	// launch ipykernel (kernel.IsLaunch).
	Fork   bool `json:"fork,omitempty"`
	Kernel bool `json:"kernel,omitempty"`
}

// exitInitFailed is the init's exit code when the program did not run.
const exitInitFailed = 125

// InitMain runs the sandbox's init; args are the arguments after
// InitCommand. It returns the exit code for os.Exit: the program's own, or
// 128+n when a signal n ended it, or 125 when the sandbox could not be set
// up.
//
// The init is pid 1 of the sandbox. It makes itself non-dumpable, checks
// the loopback interface,
// starts the port forwarders, and starts the program in its own process
// group from a thread that has no_new_privs, Landlock (when asked) and the
// seccomp filter applied (see startRestricted). Only the program is
// restricted: the forwarders need AF_UNIX, and they are not kernel code.
// The init then stays as the program's parent: it relays signals from the
// host to the program's group, keeps forwarding, reaps orphans, and exits
// with the program's status, which ends the pid namespace.
func InitMain(args []string) int {
	if len(args) > 0 {
		switch args[0] {
		case "limit":
			return limitMain(args[1:])
		case "prep":
			return prepMain(args[1:])
		case "hold":
			return holdMain()
		case "guard":
			// A container's first program (see internal/container).
			return seccomp.GuardMain(args[1:])
		case "check":
			fmt.Println(initCheckReply)
			return 0
		}
	}
	if len(args) != 2 {
		fmt.Fprintf(os.Stderr, "ipybox sandbox init: want 2 arguments, got %d (this command is internal to ipybox)\n", len(args))
		return exitInitFailed
	}
	fd, err := strconv.Atoi(args[1])
	if err != nil || fd < 3 {
		fmt.Fprintf(os.Stderr, "ipybox sandbox init: bad configuration descriptor %q\n", args[1])
		return exitInitFailed
	}
	f := os.NewFile(uintptr(fd), "init-config")
	js, err := io.ReadAll(io.LimitReader(f, 16<<20))
	f.Close()
	var c initConfig
	if err == nil {
		err = json.Unmarshal(js, &c)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "ipybox sandbox init: bad configuration: %v\n", err)
		return exitInitFailed
	}
	if args[0] != "run" {
		fmt.Fprintf(os.Stderr, "ipybox sandbox init: unknown mode %q\n", args[0])
		return exitInitFailed
	}
	return runInit(&c)
}

// limitMain is the step between the init and the program when limits are
// set and ptrace is not allowed: "limit MEMORY PIDS FSIZE PATH ARGV0
// ARGS..." sets the resource limits
// (0: none) on itself and execs the program, which inherits them. The
// limits cannot be set from the init for the program alone (resource
// limits belong to a process, and the init must stay free to start
// threads whatever the program does), nor lowered by the program after it
// started, so they are set here, before the program's first instruction.
func limitMain(args []string) int {
	// fd 3 reports a failure to the init; a successful exec closes it.
	report := os.NewFile(3, "exec-error")
	syscall.CloseOnExec(3)
	fail := func(format string, a ...any) int {
		msg := fmt.Sprintf(format, a...)
		if _, err := report.WriteString(msg); err != nil {
			fmt.Fprintf(os.Stderr, "ipybox sandbox: %s\n", msg)
		}
		return exitInitFailed
	}
	if len(args) < 5 {
		return fail("limit: want MEMORY PIDS FSIZE PATH ARGV0 [ARGS...]")
	}
	mem, err1 := strconv.ParseInt(args[0], 10, 64)
	pids, err2 := strconv.ParseInt(args[1], 10, 64)
	fsize, err3 := strconv.ParseInt(args[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || mem < 0 || pids < 0 || fsize < 0 {
		return fail("limit: bad limits %q %q %q", args[0], args[1], args[2])
	}
	if fsize > 0 {
		if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: uint64(fsize), Max: uint64(fsize)}); err != nil {
			return fail("setrlimit(RLIMIT_FSIZE, %d): %v", fsize, err)
		}
	}
	// fd 4 holds the program's environment (NUL-separated); this step
	// itself runs with initEnv.
	envFile := os.NewFile(4, "program-env")
	raw, err := io.ReadAll(io.LimitReader(envFile, 16<<20))
	envFile.Close()
	if err != nil {
		return fail("limit: read the program's environment: %v", err)
	}
	env := []string{}
	for _, kv := range bytes.Split(raw, []byte{0}) {
		if len(kv) > 0 {
			env = append(env, string(kv))
		}
	}
	args = append(args[:2], args[3:]...)
	if mem > 0 {
		if err := unix.Setrlimit(unix.RLIMIT_DATA, &unix.Rlimit{Cur: uint64(mem), Max: uint64(mem)}); err != nil {
			return fail("setrlimit(RLIMIT_DATA, %d): %v", mem, err)
		}
	}
	if pids > 0 {
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: uint64(pids), Max: uint64(pids)}); err != nil {
			return fail("setrlimit(RLIMIT_NPROC, %d): %v", pids, err)
		}
	}
	err = syscall.Exec(args[2], args[3:], env)
	return fail("exec %s: %v", args[2], err)
}

// programEnvOf is the program's environment: the configuration's, never
// the init's own (initEnv).
func programEnvOf(c *initConfig) []string {
	if c.Env == nil {
		return []string{}
	}
	return c.Env
}

// memFile returns an in-memory file holding data, positioned at its start:
// the way configuration travels to a child without showing in any command
// line.
func memFile(name string, data []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func runInit(c *initConfig) int {
	var ctl *os.File
	if c.CtlFD > 0 {
		ctl = os.NewFile(uintptr(c.CtlFD), "ctl")
	}
	fail := func(format string, a ...any) int {
		msg := fmt.Sprintf(format, a...)
		if ctl != nil {
			fmt.Fprintf(ctl, "error: %s\n", strings.ReplaceAll(msg, "\n", " "))
		} else {
			fmt.Fprintf(os.Stderr, "ipybox sandbox: %s\n", msg)
		}
		return exitInitFailed
	}
	// Not dumpable: code in the sandbox (same uid) cannot ptrace the init,
	// which runs without the seccomp filter, nor read its /proc files.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail("prctl(PR_SET_DUMPABLE): %v", err)
	}
	if c.ArgsFD > 0 {
		unix.Close(c.ArgsFD) // bwrap's arguments, with the environment's values
	}
	closeInheritedOnExec()
	if err := loopbackUp(); err != nil {
		return fail("%v", err)
	}
	for _, f := range c.Forwards {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(f.Port)))
		if err != nil {
			return fail("forward port %d: %v", f.Port, err)
		}
		go serveForward(ln, f.Socket)
	}

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	var pgid int
	var wait func() int
	if c.Fork {
		pid, w, err := forkedProgram(c, ctl)
		if err != nil {
			return fail("%v", err)
		}
		pgid, wait = pid, w
	} else {
		cmd, err := startRestricted(c)
		if err != nil {
			return fail("%v", err)
		}
		pgid = cmd.Process.Pid
		wait = func() int { return reapUntil(pgid, fail) }
	}
	if ctl != nil {
		if _, err := ctl.Write([]byte("ok\n")); err != nil {
			syscall.Kill(-pgid, syscall.SIGKILL)
			wait() // bound: its group was killed above
			return exitInitFailed
		}
	}
	go func() {
		for sig := range sigs { // lifetime: the init
			syscall.Kill(-pgid, sig.(syscall.Signal))
		}
	}()
	if ctl != nil {
		go func() {
			buf := make([]byte, 64)
			for {
				n, err := ctl.Read(buf)
				for _, b := range buf[:n] {
					syscall.Kill(-pgid, syscall.Signal(b))
				}
				if err != nil {
					// The host closed its end: it is gone. Exiting ends
					// the sandbox: the init is its pid 1.
					os.Exit(128 + int(syscall.SIGKILL))
				}
			}
		}()
	}
	return wait()
}

// reapUntil reaps every child of the init (as pid 1, it inherits every
// orphan) until the program, pid, exits, and returns the init's exit code
// for its status. (Not cmd.Wait: the reaping loop would race with it.)
// Returning ends the pid namespace, and with it whatever the program left
// running.
func reapUntil(pgid int, fail func(string, ...any) int) int {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil) // lifetime: the program (pid 1 reaps until it exits)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return fail("wait: %v", err)
		}
		if pid != pgid {
			continue
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}

// startRestricted starts the program under the restrictions of
// internal/seccomp (no_new_privs, the filter, the guard when the policy has
// one), with Landlock when asked, applied to it alone: the init's own
// threads, which run the forwarders and the guard, stay unrestricted. The
// resource limits are set on the program at its exec, before its first
// instruction; where ptrace is not allowed for that, a limit step (the
// init binary again) sets them and execs the program.
func startRestricted(c *initConfig) (*exec.Cmd, error) {
	path, err := lookPathIn(c.Path, c.Env)
	if err != nil {
		return nil, err
	}
	newCmd := func(path string, argv, env []string) *exec.Cmd {
		return &exec.Cmd{
			Path:   path,
			Args:   argv,
			Env:    env,
			Stdin:  os.Stdin,
			Stdout: os.Stdout,
			Stderr: os.Stderr,
			// Its own process group, so that a signal reaches the commands
			// it starts too. No Pdeathsig: it would fire when the forking
			// thread is retired. If the init dies, bwrap's pid 1 exits and
			// the pid namespace goes with it.
			SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
		}
	}
	o := seccomp.StartOptions{
		Filter: filterOptions(c),
		Guard:  c.Guard,
		Before: func() error {
			if err := applyLandlock(c); err != nil {
				return fmt.Errorf("landlock: %w", err)
			}
			return nil
		},
		Log: func(msg string) { fmt.Fprintf(os.Stderr, "ipybox sandbox: %s\n", msg) },
	}
	o.Rlimits = rlimitsOf(c)
	cmd := newCmd(path, c.Argv, programEnvOf(c))
	err = seccomp.Start(cmd, o)
	if !errors.Is(err, seccomp.ErrNoTrace) {
		if err != nil {
			return nil, err
		}
		return cmd, nil
	}
	// No ptrace here: the limit step sets the limits and execs.
	execErr, execErrW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer execErr.Close()
	// The limit step is ipybox's binary: it starts with initEnv, and
	// gets the program's environment on fd 4, for the exec alone (a
	// loader variable there would otherwise run before the limits).
	var envBuf bytes.Buffer
	for _, kv := range programEnvOf(c) {
		envBuf.WriteString(kv)
		envBuf.WriteByte(0)
	}
	envFile, err := memFile("program-env", envBuf.Bytes())
	if err != nil {
		execErrW.Close()
		return nil, err
	}
	argv := append([]string{c.Self, InitCommand, "limit", strconv.FormatInt(c.Memory, 10), strconv.Itoa(c.Pids), strconv.FormatInt(c.FileSize, 10), path}, c.Argv...)
	cmd = newCmd(c.Self, argv, initEnv())
	cmd.ExtraFiles = []*os.File{execErrW, envFile} // fds 3 and 4 of the limit step
	o.Rlimits = nil
	err = seccomp.Start(cmd, o)
	execErrW.Close()
	envFile.Close()
	if err != nil {
		return nil, err
	}
	// The limit step closes its end on a successful exec (close on exec),
	// or writes why the exec failed.
	execErr.SetReadDeadline(time.Now().Add(30 * time.Second))
	msg, _ := io.ReadAll(io.LimitReader(execErr, 4096))
	if len(msg) > 0 {
		cmd.Process.Kill()
		cmd.Wait() // bound: killed above
		return nil, errors.New(string(msg))
	}
	return cmd, nil
}

// closeInheritedOnExec marks every inherited descriptor above stderr
// close-on-exec, so that nothing bwrap passed along reaches the program.
func closeInheritedOnExec() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// loopbackUp makes sure lo is up in the new network namespace. bwrap
// configures it already; this is a check that does not rely on it.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: get flags: %w", err)
	}
	flags := ifr.Uint16()
	if flags&unix.IFF_UP != 0 {
		return nil
	}
	ifr.SetUint16(flags | unix.IFF_UP | unix.IFF_RUNNING)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: bring up lo: %w", err)
	}
	return nil
}

// serveForward relays each connection on ln to the unix socket at sock.
// It runs until the init exits.
func serveForward(ln net.Listener, sock string) {
	for {
		c, err := ln.Accept() // lifetime: the init
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like
			continue
		}
		go relay(c, sock)
	}
}

func relay(c net.Conn, sock string) {
	defer c.Close()
	u, err := net.DialTimeout("unix", sock, 10*time.Second)
	if err != nil {
		return
	}
	defer u.Close()
	done := make(chan struct{})
	go func() {
		io.Copy(u, c)
		egress.CloseWrite(u)
		close(done)
	}()
	io.Copy(c, u)
	egress.CloseWrite(c)
	<-done // lifetime: the relayed connection
}
