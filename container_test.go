package ipybox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/container"
	"github.com/ipybox/ipybox/internal/docker"
	"github.com/ipybox/ipybox/internal/testenv"
)

// containerWorkspace returns a fresh workspace the container's user can
// write: under root, that user is container.MappedID.
func containerWorkspace(t *testing.T) string {
	t.Helper()
	ws := t.TempDir()
	if os.Geteuid() == 0 {
		if err := os.Chown(ws, container.MappedID, container.MappedID); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}

// startContainer starts an Executor whose kernel runs in a container.
func startContainer(t *testing.T, cfg *ipybox.ContainerConfig, opts *ipybox.Options) *ipybox.Executor {
	t.Helper()
	img := testenv.NeedsDocker(t)
	var o ipybox.Options
	if opts != nil {
		o = *opts
	}
	var c ipybox.ContainerConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Image == "" {
		c.Image = img
	}
	o.Container = &c
	if o.WorkDir == "" {
		o.WorkDir = containerWorkspace(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ex, err := ipybox.Start(ctx, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ex.Close() })
	return ex
}

// ownContainers lists the kernel containers this process owns.
func ownContainers(t *testing.T) []string {
	t.Helper()
	c, err := docker.New("")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := c.List(ctx, container.LabelKernel)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	prefix := fmt.Sprintf("%s/%d/", host, os.Getpid())
	var out []string
	for _, ct := range list {
		if strings.HasPrefix(ct.Labels[container.LabelOwner], prefix) {
			out = append(out, strings.Join(ct.Names, ",")+" "+ct.State)
		}
	}
	return out
}

func cellText(t *testing.T, ex *ipybox.Executor, code string) string {
	t.Helper()
	return run(t, ex, code).Text
}

// TestContainerSession: the session's semantics hold with the kernel in a
// container: state, streaming, files and images through the workspace,
// timeout with state kept, reset, kernel death and restart, and Close
// leaves no container.
func TestContainerSession(t *testing.T) {
	testenv.NeedsDocker(t)
	testenv.CheckGoroutines(t)
	ws := containerWorkspace(t)
	ex := startContainer(t, &ipybox.ContainerConfig{Env: map[string]string{"FROM_CONFIG": "c1"}},
		&ipybox.Options{WorkDir: ws, KernelEnv: map[string]string{"FROM_KERNEL_ENV": "k1"}})

	if got := cellText(t, ex, "import os\nx = 41\nprint(os.getcwd(), os.environ['FROM_CONFIG'], os.environ['FROM_KERNEL_ENV'], os.path.exists('/.dockerenv'))"); got != "/app/workspace c1 k1 True" {
		t.Errorf("cwd/env = %q", got)
	}
	if got := cellText(t, ex, "x + 1"); got != "42" {
		t.Errorf("state: %q", got)
	}
	// Streaming: the first line arrives before the cell ends.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var first time.Time
	t0 := time.Now()
	for ev, err := range ex.Stream(ctx, "import time\nprint('a', flush=True)\ntime.sleep(1)\nprint('b')", nil) {
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := ev.(*ipybox.Output); ok && first.IsZero() {
			first = time.Now()
		}
	}
	if first.IsZero() || first.Sub(t0) > 900*time.Millisecond {
		t.Errorf("first output after %v: not streamed", first.Sub(t0))
	}
	// Files go both ways through the workspace.
	if err := os.WriteFile(filepath.Join(ws, "in.txt"), []byte("from host"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := cellText(t, ex, "print(open('in.txt').read())\nopen('out.txt', 'w').write('from kernel')"); !strings.HasPrefix(got, "from host") {
		t.Errorf("read host file: %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "out.txt")); err != nil || string(b) != "from kernel" {
		t.Errorf("kernel's file on the host: %q, %v", b, err)
	}
	// Images are saved on the host.
	res := run(t, ex, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()")
	if len(res.Images) != 1 {
		t.Fatalf("images = %v", res.Images)
	}
	if fi, err := os.Stat(res.Images[0]); err != nil || fi.Size() == 0 || !strings.HasPrefix(res.Images[0], ws) {
		t.Errorf("image %s: %v", res.Images[0], err)
	}
	// A timeout interrupts through the Engine API and keeps the state.
	_, err := ex.Execute(ctx, "import time\ntime.sleep(30)", &ipybox.ExecOptions{Timeout: time.Second})
	if !errors.Is(err, ipybox.ErrTimeout) {
		t.Fatalf("timeout: %v", err)
	}
	if got := cellText(t, ex, "x"); got != "41" {
		t.Errorf("after timeout: %q", got)
	}
	// Reset: a new container, state gone, files kept, the old one removed.
	if err := ex.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if got := cellText(t, ex, "print('x' in globals(), open('out.txt').read())"); got != "False from kernel" {
		t.Errorf("after reset: %q", got)
	}
	if got := ownContainers(t); len(got) != 1 {
		t.Errorf("after reset, containers: %v", got)
	}
	// Kernel death: the call fails, the next one gets a new kernel.
	_, err = ex.Execute(ctx, "import os\nos._exit(3)", nil)
	if !errors.Is(err, ipybox.ErrKernelDied) {
		t.Fatalf("death: %v", err)
	}
	if got := cellText(t, ex, "print(6 * 7)"); got != "42" {
		t.Errorf("after death: %q", got)
	}
	if err := ex.Close(); err != nil {
		t.Fatal(err)
	}
	if got := ownContainers(t); len(got) != 0 {
		t.Errorf("after Close, containers left: %v", got)
	}
}

// TestContainerToolCallsAndShellApproval: a tool call from the container
// reaches the host's tool server over the bind-mounted socket, with the
// application's approval; shell commands are approved too.
func TestContainerToolCallsAndShellApproval(t *testing.T) {
	testenv.NeedsDocker(t)
	ex := startContainer(t, nil, &ipybox.Options{ApproveShellCommands: true})
	register(t, ex, "gostdio", testmcpStdio(t))
	reqs, events, err := collect(t, ex, "from mcptools.gostdio.tool_1 import Params, run\nprint(run(Params(s='hi')))", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := resultText(events); got != "tool-1: hi" {
		t.Errorf("tool call: %q", got)
	}
	if len(reqs) != 1 || reqs[0].Server != "gostdio" || reqs[0].Tool != "tool-1" {
		t.Errorf("requests: %+v", reqs)
	}
	// Rejected: ApprovalRejectedError in the cell.
	_, events, err = collect(t, ex, "from mcptools.gostdio.tool_1 import Params, run\ntry:\n    run(Params(s='no'))\nexcept Exception as e:\n    print(type(e).__name__)", nil,
		func(r *ipybox.ApprovalRequest) { r.Reject("no") })
	if err != nil || resultText(events) != "ApprovalRejectedError" {
		t.Errorf("rejected: %q, %v", resultText(events), err)
	}
	marker := filepath.Join(ex.Workspace(), "shell-ran")
	reqs, _, _ = collect(t, ex, "!touch /app/workspace/shell-ran", nil, func(r *ipybox.ApprovalRequest) { r.Reject("no") })
	if len(reqs) != 1 || reqs[0].Command != "touch /app/workspace/shell-ran" {
		t.Errorf("shell requests: %+v", reqs)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a rejected shell command ran")
	}
	collect(t, ex, "!touch /app/workspace/shell-ran", nil, nil)
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("an approved shell command did not run: %v", err)
	}
}

// TestContainerPool: a Pool hands out ready container Executors, and
// closing it leaves no container behind.
func TestContainerPool(t *testing.T) {
	img := testenv.NeedsDocker(t)
	testenv.CheckGoroutines(t)
	ws := containerWorkspace(t)
	pool := ipybox.NewPool(1, &ipybox.Options{WorkDir: ws, Container: &ipybox.ContainerConfig{Image: img}})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ex, err := pool.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := cellText(t, ex, "import os\nprint(os.path.exists('/.dockerenv'))"); got != "True" {
		t.Errorf("pooled executor: %q", got)
	}
	deadline := time.Now().Add(60 * time.Second)
	for pool.Ready() == 0 && time.Now().Before(deadline) { // the refill
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(ownContainers(t)); n != 2 {
		t.Errorf("containers with one in use and one ready: %d", n)
	}
	ex.Close()
	if err := pool.Close(); err != nil {
		t.Fatal(err)
	}
	if got := ownContainers(t); len(got) != 0 {
		t.Errorf("after Close, containers left: %v", got)
	}
}
