package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/lifeline"
)

// On macOS the sandbox is sandbox-exec with a Seatbelt profile generated
// from the Config (see seatbelt.go), as Anthropic's sandbox-runtime does
// it. There are no namespaces: the process sees the host's file system,
// and the profile decides what it may read, write and connect to.
//
// This file is built to srt's published behaviour and checked here only
// by cross-compilation and by the golden tests of the profile generator:
// no macOS machine ran it.

// sandboxExec is run by its absolute path: a PATH lookup could find a
// planted program of that name.
const sandboxExec = "/usr/bin/sandbox-exec"

func platformSupported() error { return nil }

func (s *Sandbox) logFeatures() {
	s.log.Debug("sandbox: macOS sandbox-exec with a generated Seatbelt profile")
}

// listenProxy listens for the egress proxy on a loopback TCP port: without
// a network namespace, the sandboxed process reaches it there, the one
// address its profile lets it connect to.
func (s *Sandbox) listenProxy() (net.Listener, error) {
	return net.Listen("tcp", "127.0.0.1:0")
}

func forwardURL(f Forward) string { return "unix://" + f.Socket }

// Probe checks that sandbox-exec exists and applies a profile, and that
// ipybox does not run as root (sandbox-exec does not change the user, and
// a sandboxed process is never host root). The result is cached.
func (s *Sandbox) Probe(ctx context.Context) error {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if s.probed {
		return s.probeErr
	}
	err := probeSeatbelt(ctx)
	if err != nil && ctx.Err() != nil {
		return err // cut short: no verdict to cache
	}
	s.probed, s.probeErr = true, err
	return err
}

func probeSeatbelt(ctx context.Context) error {
	if os.Geteuid() == 0 {
		return &ProbeError{Cause: "ipybox runs as root, and sandbox-exec would run the kernel as root",
			Fix: "run ipybox as an ordinary user"}
	}
	if fi, err := os.Stat(sandboxExec); err != nil || fi.IsDir() {
		return &ProbeError{Cause: sandboxExec + " not found",
			Fix: "it ships with macOS; without it there is no sandbox (run without --sandbox, knowing that kernel code then has your rights)"}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, sandboxExec, "-p",
		"(version 1)(deny default)(allow process-exec)(allow process-fork)(allow file-read*)", "/usr/bin/true").CombinedOutput() // bound: ctx (10s); true starts nothing
	if ctx.Err() != nil {
		return fmt.Errorf("sandbox probe: %w", ctx.Err())
	}
	if err != nil {
		return &ProbeError{Cause: "sandbox-exec cannot apply a profile: " + err.Error(), Output: strings.TrimSpace(string(out)),
			Fix: "check that the system's sandbox works (sandbox-exec -p '(version 1)(allow default)' /usr/bin/true)"}
	}
	return nil
}

// Start implements kernel.Launcher: the kernel runs under sandbox-exec,
// with a lifeline like a direct kernel. It runs Probe first and never runs
// the process unsandboxed.
func (s *Sandbox) Start(ctx context.Context, spec *kernel.Spec) (kernel.Process, error) {
	runDir, err := s.checkStart(ctx, spec)
	if err != nil {
		return nil, err
	}
	socketDir := runDir
	if spec.SocketDir != "" {
		socketDir = filepath.Clean(spec.SocketDir)
		if !under(socketDir, runDir) {
			return nil, fmt.Errorf("sandbox: socket directory %s is not inside the run directory %s", socketDir, runDir)
		}
	}
	sockets := []string{socketDir}
	for _, f := range s.forwards {
		sockets = append(sockets, f.Socket)
	}
	cmd, err := s.seatbeltCmd(spec.Path, spec.Args, spec.Env, spec.Dir, []string{socketDir}, sockets, []string{spec.Path})
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = spec.Stdout, spec.Stderr
	p, err := lifeline.Start(cmd)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	return p, nil
}

// Command returns a command that runs path under sandbox-exec with the
// sandbox's profile (no sockets but the egress proxy). The caller starts
// and waits for it.
func (s *Sandbox) Command(ctx context.Context, path string, args, env []string, dir string) (*exec.Cmd, error) {
	path, err := s.commandPath(ctx, path)
	if err != nil {
		return nil, err
	}
	return s.seatbeltCmd(path, args, env, dir, nil, nil, []string{path})
}

// seatbeltCmd builds the sandbox-exec command for one process: its
// profile, a private TMPDIR, and the proxy variables.
func (s *Sandbox) seatbeltCmd(path string, args, env []string, dir string, writable, sockets, programs []string) (*exec.Cmd, error) {
	tmp, err := os.MkdirTemp(s.privDir, "tmp-")
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	pol, err := s.seatbeltPolicy(append(writable, tmp), sockets, programs)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	profile, err := seatbeltProfile(pol)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	env = slices.Clip(env)
	env = append(env, "TMPDIR="+tmp)
	if envValue(env, "MPLCONFIGDIR") == "" {
		env = append(env, "MPLCONFIGDIR="+filepath.Join(tmp, "matplotlib"))
	}
	if s.proxy != nil {
		url := "http://" + s.proxyAddr.String()
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			env = append(env, k+"="+url)
		}
		env = append(env, "NO_PROXY=", "no_proxy=")
	}
	cmd := exec.Command(sandboxExec, append([]string{"-p", profile, path}, args...)...)
	cmd.Env = env
	cmd.Dir = dir
	if cmd.Dir == "" {
		cmd.Dir = s.workspace
	}
	return cmd, nil
}

// InitMain fails: the macOS sandbox has no init.
func InitMain(args []string) int {
	fmt.Fprintln(os.Stderr, "ipybox sandbox init:", errors.New("the sandbox init runs only on Linux"))
	return 125
}
