package sandbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ipybox/ipybox/internal/hostproc"
	"github.com/ipybox/ipybox/internal/seccomp"
)

// bwrapWorks holds, for this process, the bwrap paths whose probe passed,
// keyed by what was asked for (bwrapKey): each new Sandbox (each session
// of the MCP server, each ipybox.Start) would otherwise pay one more bwrap
// run and prep step, about a tenth of its start. A failure is not kept, so
// a fixed host is seen at the next Probe.
var bwrapWorks sync.Map // bwrapKey -> resolved path

type bwrapKey struct {
	bwrap  string // as configured, or as found on PATH when not configured
	mapped bool   // through the prep step, as MappedID
}

// Probe checks that the sandbox can run here: bwrap exists, and it can
// create the user, pid and network namespaces with the options Start uses.
// It caches the answer per Sandbox (a failure caused by ctx is not cached),
// and runs bwrap only when no Sandbox of this process has probed the same
// bwrap the same way with success. Errors are *ProbeError values that name
// the cause and the fix.
func (s *Sandbox) Probe(ctx context.Context) error {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if s.probed {
		return s.probeErr
	}
	err := checkInit(ctx, s.initBinary)
	if pe, ok := err.(*ProbeError); ok && s.initSource != s.initBinary {
		e := *pe
		e.Cause = strings.Replace(e.Cause, s.initBinary, s.initSource+" (run from its private copy "+s.initBinary+")", 1)
		err = &e
	}
	if err == nil {
		if gerr := seccomp.GuardSupported(); gerr != nil {
			err = &ProbeError{Cause: gerr.Error(), Fix: "run ipybox on Linux 5.14 or newer, or run without the sandbox (kernel code could then plant files that host programs run)"}
		}
	}
	var path string
	if err == nil {
		key := bwrapKey{s.bwrap, s.mapped}
		if key.bwrap == "" {
			key.bwrap, _ = hostproc.LookPath("bwrap", s.hostWritable()) // as probeBwrap would: PATH may have changed
		}
		if p, ok := bwrapWorks.Load(key); ok && key.bwrap != "" && s.bwrapOutside(p.(string)) == nil {
			path = p.(string)
		} else if path, err = probeBwrap(ctx, s.bwrap, s.hostWritable(), s.probeWrap); err == nil {
			bwrapWorks.Store(key, path)
		}
	}
	if err != nil && ctx.Err() != nil {
		return err
	}
	s.probed, s.probeErr = true, err
	if err == nil {
		s.bwrap = path
	}
	return err
}

// quickCheck is what a kernel start checks before it runs bwrap: a Probe
// that already failed, the guard's kernel support, and bwrap on PATH. The
// full Probe (an init and a bwrap run, about 40 ms) runs only when a start
// fails, to say why (see explainStart); a start that succeeds proves what
// it would.
func (s *Sandbox) quickCheck(context.Context) error {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if s.probed {
		return s.probeErr
	}
	if err := seccomp.GuardSupported(); err != nil {
		return &ProbeError{Cause: err.Error(), Fix: "run ipybox on Linux 5.14 or newer, or run without the sandbox (kernel code could then plant files that host programs run)"}
	}
	if s.bwrap == "" {
		p, err := hostproc.LookPath("bwrap", s.hostWritable())
		if err != nil {
			return &ProbeError{Cause: "bwrap (bubblewrap) not found on PATH", Output: err.Error(), Fix: bwrapInstall}
		}
		s.bwrap = p
	} else if err := s.bwrapOutside(s.bwrap); err != nil {
		return err
	}
	return nil
}

// bwrapInstall says how to get bwrap.
const bwrapInstall = "install bubblewrap (`apt-get install bubblewrap`, `dnf install bubblewrap`, `pacman -S bubblewrap`) so that bwrap is on PATH, " +
	"in a folder outside the workspace (ipybox never runs a bwrap from a folder kernel code can write)"

// bwrapOutside refuses a bwrap (configured, or kept from an earlier
// probe) that lies where kernel code can write: the host runs it.
func (s *Sandbox) bwrapOutside(p string) error {
	if w := hostproc.ProgramInside(p, s.hostWritable()); w != "" {
		return &ProbeError{Cause: fmt.Sprintf("bwrap %s lies in %s, which kernel code can write", p, w), Fix: bwrapInstall}
	}
	return nil
}

// started records that a process started: the sandbox works here.
func (s *Sandbox) started() {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if !s.probed {
		s.probed, s.probeErr = true, nil
	}
}

// explainStart turns a failed start into the Probe's explanation when the
// sandbox cannot run here at all; otherwise it returns err.
func (s *Sandbox) explainStart(ctx context.Context, err error) error {
	s.probeMu.Lock()
	probed := s.probed
	s.probeMu.Unlock()
	if probed {
		return err
	}
	if perr := s.Probe(ctx); perr != nil {
		return perr
	}
	return err
}

// probeWrap runs the probe the way processes will run: through the prep
// step, as MappedID, when host root creates the sandbox.
func (s *Sandbox) probeWrap(cmd *exec.Cmd) (*exec.Cmd, error) {
	if !s.mapped {
		return cmd, nil
	}
	st := &staging{dir: s.privDir}
	cmd.Path = st.add(cmd.Path, false, true)
	cmd.Args[0] = cmd.Path
	return s.prepCmd(cmd, st)
}

// probeBwrap runs bwrap (empty: found on PATH outside writable, the
// folders kernel code can write) the way a start would, and returns its
// path.
func probeBwrap(ctx context.Context, bwrap string, writable []string, wrap func(*exec.Cmd) (*exec.Cmd, error)) (string, error) {
	install := bwrapInstall
	if bwrap == "" {
		p, err := hostproc.LookPath("bwrap", writable)
		if err != nil {
			return "", &ProbeError{Cause: "bwrap (bubblewrap) not found on PATH", Output: err.Error(), Fix: install}
		}
		bwrap = p
	} else if fi, err := os.Stat(bwrap); err != nil || fi.IsDir() {
		return "", &ProbeError{Cause: fmt.Sprintf("bwrap not found at %s", bwrap), Fix: install}
	} else if w := hostproc.ProgramInside(bwrap, writable); w != "" {
		return "", &ProbeError{Cause: fmt.Sprintf("bwrap %s lies in %s, which kernel code can write", bwrap, w), Fix: install}
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	args := append(append([]string{}, namespaceFlags...), "--ro-bind", "/", "/", "--proc", "/proc", "--remount-ro", "/proc", "--dev", "/dev", "--", "true")
	cmd := exec.Command(bwrap, args...)
	cmd.Env = initEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd, err := wrap(cmd)
	if err != nil {
		return "", &ProbeError{Cause: "cannot prepare the sandbox", Output: err.Error()}
	}
	var outBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outBuf, &outBuf
	err = runGroup(ctx, cmd)
	out := outBuf.Bytes()
	if err == nil {
		return bwrap, nil
	}
	if ctx.Err() != nil {
		return "", fmt.Errorf("sandbox probe: %w", ctx.Err())
	}
	msg := strings.TrimSpace(string(out))
	if msg == "" {
		msg = err.Error()
	}
	return "", &ProbeError{Cause: fmt.Sprintf("%s cannot create the sandbox's namespaces", bwrap), Output: msg, Fix: namespaceFix(msg)}
}

// namespaceFix suggests a fix from bwrap's message and the host's settings.
func namespaceFix(msg string) string {
	if strings.Contains(msg, "Unknown option") || strings.Contains(msg, "disable-userns") {
		return "bubblewrap 0.8 or newer is needed (for --disable-userns); upgrade it"
	}
	read := func(p string) string {
		b, _ := os.ReadFile(p)
		return strings.TrimSpace(string(b))
	}
	var fixes []string
	if read("/proc/sys/kernel/unprivileged_userns_clone") == "0" {
		fixes = append(fixes, "enable unprivileged user namespaces: `sysctl -w kernel.unprivileged_userns_clone=1`")
	}
	if read("/proc/sys/user/max_user_namespaces") == "0" {
		fixes = append(fixes, "allow user namespaces: `sysctl -w user.max_user_namespaces=15000`")
	}
	if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == "1" {
		fixes = append(fixes, "AppArmor restricts unprivileged user namespaces (Ubuntu 23.10+): add an AppArmor profile "+
			"that grants `userns` to /usr/bin/bwrap, or `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`")
	}
	if len(fixes) == 0 {
		fixes = append(fixes, "user and network namespaces must be available to this user; inside a container, allow "+
			"them (for example docker --security-opt seccomp=unconfined --security-opt apparmor=unconfined "+
			"--security-opt systempaths=unconfined: the last because docker's masked /proc paths keep bwrap from mounting a /proc), "+
			"or run ipybox on the host")
	}
	return strings.Join(fixes, "; ")
}

// runGroup starts cmd (a bwrap in a process group of its own, as
// probeBwrap and runConfined make it) and waits for it until ctx ends,
// then kills the group.
func runGroup(ctx context.Context, cmd *exec.Cmd) error {
	err := cmd.Start()
	for _, f := range cmd.ExtraFiles {
		if f != nil {
			f.Close()
		}
	}
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }() // bound: done is buffered
	select {
	case err = <-done:
	case <-ctx.Done():
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done // bound: the group was killed; bwrap's child dies with it (--die-with-parent)
		err = ctx.Err()
	}
	return err
}

// runConfined runs argv (a program and its arguments) with env in a
// sandbox of its own that can change nothing and reach nothing: the
// host's tree read-only, fresh /tmp, /var/tmp and /run (a read-only mount
// still lets a named pipe be written: /run/initctl would take a runlevel
// from root), /dev of its own, no network, no capabilities,
// working in /, and a seccomp filter that refuses unix sockets (a socket
// file such as the Docker daemon's is reachable through a read-only
// mount), the kernel keyrings and what the sandbox's filter refuses. It
// runs as this user (a sandbox's processes run as MappedID when host root
// makes them; this one must read what the user can, to say where an
// interpreter's files are). It is for a program that ipybox must ask
// something although kernel code may have chosen or written it
// (askPython). It returns the program's standard output, at most 64 KiB.
func (s *Sandbox) runConfined(ctx context.Context, env []string, argv ...string) ([]byte, error) {
	if err := s.quickCheck(ctx); err != nil {
		return nil, err
	}
	prog, err := seccomp.Program(seccomp.Options{Confine: true, DenyUnix: true})
	if err != nil {
		return nil, err
	}
	filter, err := filterPipe(prog)
	if err != nil {
		return nil, err
	}
	defer filter.Close()
	args := append(append([]string{}, namespaceFlags...), "--seccomp", "3", "--ro-bind", "/", "/", "--proc", "/proc", "--remount-ro", "/proc",
		"--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/var/tmp", "--tmpfs", "/run", "--chdir", "/", "--")
	cmd := exec.Command(s.bwrap, append(args, argv...)...)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{filter}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out := &capped{max: 64 << 10}
	cmd.Stdout = out
	err = runGroup(ctx, cmd)
	return out.b.Bytes(), err
}

// filterPipe returns the read end of a pipe that holds prog, as bwrap's
// --seccomp reads it.
func filterPipe(prog []unix.SockFilter) (*os.File, error) {
	b := make([]byte, 0, 8*len(prog))
	for _, f := range prog {
		b = binary.NativeEndian.AppendUint16(b, f.Code)
		b = append(b, f.Jt, f.Jf)
		b = binary.NativeEndian.AppendUint32(b, f.K)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer w.Close()
	if len(b) > 64<<10 {
		r.Close()
		return nil, fmt.Errorf("the seccomp filter (%d bytes) does not fit a pipe", len(b))
	}
	if _, err := w.Write(b); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// capped keeps the first max bytes written to it, and drops the rest.
type capped struct {
	b   bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.b.Len(); room > 0 {
		c.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
