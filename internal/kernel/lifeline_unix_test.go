//go:build unix

package kernel_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/procexit"
	"github.com/ipybox/ipybox/internal/testenv"
)

// hostEnv makes the test binary a host process (see TestMain): it starts a
// kernel with the launcher its value names, has a cell start a child in
// the kernel's process group, prints both pids and waits to be killed.
const hostEnv = "IPYBOX_TEST_KERNEL_HOST"

func TestMain(m *testing.M) {
	if l := os.Getenv(hostEnv); l != "" {
		os.Exit(kernelHost(l))
	}
	os.Exit(m.Run())
}

// plainLauncher starts the kernel in its own process group and nothing
// more: no lifeline, no parent-death signal. It is the control that shows
// the test can fail.
type plainLauncher struct{}

func (plainLauncher) Start(ctx context.Context, spec *kernel.Spec) (kernel.Process, error) {
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = spec.Env, spec.Dir, spec.Stdout, spec.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return plainProcess{cmd, procexit.Go(cmd.Wait)}, nil
}

type plainProcess struct {
	cmd  *exec.Cmd
	exit *procexit.Exit
}

func (p plainProcess) ID() string { return strconv.Itoa(p.Pid()) }
func (p plainProcess) Pid() int   { return p.cmd.Process.Pid }
func (p plainProcess) Signal(_ context.Context, sig syscall.Signal) error {
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}
func (p plainProcess) Kill(ctx context.Context) error { return p.Signal(ctx, syscall.SIGKILL) }
func (p plainProcess) Wait(ctx context.Context) error { return p.exit.Wait(ctx) }

func kernelHost(launcher string) int {
	var l kernel.Launcher
	switch launcher {
	case "direct":
		l = kernel.DirectLauncher{}
	case "plain":
		l = plainLauncher{}
	case "zygote":
		z, err := kernel.NewZygote(context.Background(), os.Getenv("IPYBOX_PYTHON"), nil, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		l = z
	default:
		fmt.Fprintln(os.Stderr, "unknown launcher", launcher)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "ipybox-host-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	k, err := kernel.Start(ctx, &kernel.Options{Python: os.Getenv("IPYBOX_PYTHON"), Dir: dir, Launcher: l, HeartbeatInterval: time.Hour}) // no heartbeat while the test kills things
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	res, err := k.Execute(ctx, "import os, subprocess\n_p = subprocess.Popen(['sleep', '300'])\nprint(os.getpid(), _p.pid)", nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(res.Text)
	time.Sleep(5 * time.Minute) // until the test kills this process
	return 1
}

// TestKernelDiesWithHost: SIGKILL the host process (a re-exec of this test
// binary), which cannot clean up; its kernel, and the child a cell
// started, must be gone within seconds. DirectLauncher has no Linux
// parent-death signal, so only the lifeline (the pipe the kernel's shim
// watches) can end them; a kernel forked by the zygote, only the zygote's
// watch of its control socket. "plain" (no lifeline) is the control: there
// the kernel outlives its host, so the check can fail.
func TestKernelDiesWithHost(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	for _, tc := range []struct {
		launcher string
		survives bool
	}{
		{"direct", false},
		{"zygote", false},
		{"plain", true},
	} {
		t.Run(tc.launcher, func(t *testing.T) {
			if tc.launcher == "zygote" && runtime.GOOS != "linux" {
				t.Skip("the zygote needs Linux")
			}
			pids := runHostAndKill(t, py, tc.launcher)
			t.Cleanup(func() {
				for _, pid := range pids {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			begin := time.Now()
			deadline := begin.Add(10 * time.Second)
			if tc.survives {
				deadline = begin.Add(2 * time.Second)
			}
			var alive []int
			for {
				alive = alive[:0]
				for _, pid := range pids {
					if testenv.Alive(pid) {
						alive = append(alive, pid)
					}
				}
				if len(alive) == 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			switch {
			case tc.survives && len(alive) != len(pids):
				t.Errorf("control: without a lifeline the kernel and its child (%v) should outlive the host; alive after 2s: %v", pids, alive)
			case !tc.survives && len(alive) > 0:
				t.Errorf("kernel and cell child %v: still alive %v after the host was killed (10s)", pids, alive)
			case !tc.survives:
				t.Logf("kernel %d and cell child %d gone %v after the host's SIGKILL", pids[0], pids[1], time.Since(begin).Round(time.Millisecond))
			}
		})
	}
}

// runHostAndKill starts a host process with the given launcher, reads the
// pids of its kernel and of the kernel's child, SIGKILLs the host and
// returns the pids.
func runHostAndKill(t *testing.T, py, launcher string) []int {
	t.Helper()
	host := exec.Command(os.Args[0], "-test.run=^$")
	host.Env = append(os.Environ(), hostEnv+"="+launcher, "IPYBOX_PYTHON="+py)
	stderr := &strings.Builder{}
	host.Stderr = stderr
	out, err := host.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		s.Scan()
		lines <- s.Text()
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(60 * time.Second):
		host.Process.Kill()
		host.Wait()
		t.Fatalf("the host printed no pids within 60s; stderr: %s", stderr)
	}
	var pids []int
	for _, f := range strings.Fields(line) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			break
		}
		pids = append(pids, pid)
	}
	if len(pids) != 2 {
		host.Process.Kill()
		host.Wait()
		t.Fatalf("host said %q, want two pids; stderr: %s", line, stderr)
	}
	for _, pid := range pids {
		if !testenv.Alive(pid) {
			t.Fatalf("pid %d is not alive before the host is killed", pid)
		}
	}
	host.Process.Signal(syscall.SIGKILL)
	host.Wait()
	return pids
}
