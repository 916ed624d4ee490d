package ipybox_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/sandbox"
	"github.com/ipybox/ipybox/internal/testenv"
)

func startSandboxed(t *testing.T, opts *ipybox.Options) *ipybox.Executor {
	t.Helper()
	testenv.NeedsTool(t, "bwrap")
	var o ipybox.Options
	if opts != nil {
		o = *opts
	}
	if o.Sandbox == nil {
		o.Sandbox = ipybox.DefaultSandbox()
	}
	if o.Zygote == nil && os.Getenv("IPYBOX_TEST_SANDBOX_FORK") == "1" {
		// The suites against forked kernels (docs/sandbox.md, "Forked
		// kernels"), unchanged otherwise.
		o.Zygote = sandboxZygote(t, o.Python)
	}
	return start(t, &o)
}

// TestSandboxedKernelStillWorks is the "what still works" list of the
// sandbox: state, shell commands, plots, approved tool calls, timeouts,
// interrupts and reset, all inside bwrap.
func TestSandboxedKernelStillWorks(t *testing.T) {
	home, _ := os.UserHomeDir()
	canary := filepath.Join(home, ".ipybox-test-canary-"+filepath.Base(t.TempDir()))
	if err := os.WriteFile(canary, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(canary)
	ex := startSandboxed(t, nil)
	run(t, ex, "x = 41")
	if got := run(t, ex, "x + 1").Text; got != "42" {
		t.Errorf("state: %q", got)
	}
	run(t, ex, "open('made-inside.txt', 'w').write('hi')")
	if got := strings.TrimSpace(run(t, ex, "!ls").Text); !strings.Contains(got, "made-inside.txt") {
		t.Errorf("!ls: %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(ex.Workspace(), "made-inside.txt")); err != nil || string(b) != "hi" {
		t.Errorf("workspace write not visible on the host: %v", err)
	}
	res := run(t, ex, "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()")
	if len(res.Images) != 1 {
		t.Errorf("plot: images = %v (text %q)", res.Images, res.Text)
	}
	// Proof it is sandboxed: pid 1 is the sandbox's init, and /proc shows
	// only the sandbox's few processes.
	if got := run(t, ex, "import os\nprocs = [p for p in os.listdir('/proc') if p.isdigit()]\nb'__sandbox-init' in open('/proc/1/cmdline', 'rb').read() and len(procs) < 6").Text; got != "True" {
		t.Errorf("the kernel is not in the sandbox's pid namespace: %s", got)
	}
	// The home directory inside is private: the host's files are not there.
	if got := run(t, ex, "import os\nos.path.exists("+strconv.Quote(canary)+")").Text; got != "False" {
		t.Errorf("a file in the host's home is visible: %s", got)
	}

	// Tool calls with approval go through the forwarded tool server.
	register(t, ex, "go", testmcpStdio(t))
	reqs, events, err := collect(t, ex, "from mcptools.go.tool_1 import Params, run\nrun(Params(s='boxed'))", nil, nil)
	if err != nil || len(reqs) != 1 || resultText(events) != "'tool-1: boxed'" {
		t.Errorf("tool call: err %v, %d requests, text %q", err, len(reqs), resultText(events))
	}
	_, _, err = collect(t, ex, "run(Params(s='no'))", nil, func(r *ipybox.ApprovalRequest) { r.Reject("nope") })
	var pe *ipybox.PythonError
	if !errors.As(err, &pe) || pe.Name != "ApprovalRejectedError" {
		t.Errorf("rejected call: %v", err)
	}

	// Timeout interrupts (SIGINT reaches the kernel through the init) and
	// keeps state; cancel too.
	begin := time.Now()
	_, err = ex.Execute(context.Background(), "import time\ntime.sleep(10)", &ipybox.ExecOptions{Timeout: 500 * time.Millisecond})
	if !errors.Is(err, ipybox.ErrTimeout) || time.Since(begin) > 3*time.Second {
		t.Errorf("timeout: %v after %v", err, time.Since(begin))
	}
	var te *ipybox.TimeoutError
	if errors.As(err, &te) && te.Restarted {
		t.Errorf("the interrupt did not reach the sandboxed kernel: it was restarted")
	}
	if got := run(t, ex, "x").Text; got != "41" {
		t.Errorf("state after timeout: %q", got)
	}
	if err := ex.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := ex.Execute(context.Background(), "x", nil); err == nil {
		t.Errorf("x survived Reset")
	}
	if got := run(t, ex, "open('made-inside.txt').read()").Text; got != "'hi'" {
		t.Errorf("file after reset: %q", got)
	}
}

func TestSandboxHidesHostEnvironment(t *testing.T) {
	t.Setenv("SECRET_TOKEN", "canary-7f3a")
	ex := startSandboxed(t, &ipybox.Options{KernelEnv: map[string]string{"GIVEN": "1"}})
	res := run(t, ex, `import os, glob
hits = [k for k, v in os.environ.items() if "canary-7f3a" in v]
for p in glob.glob("/proc/*/environ"):
    try:
        if b"canary-7f3a" in open(p, "rb").read():
            hits.append(p)
    except OSError:
        pass
print(hits, os.environ.get("GIVEN"))`)
	if res.Text != "[] 1" {
		t.Errorf("host environment leaked into the sandbox: %s", res.Text)
	}
}

func TestSandboxFailsClosed(t *testing.T) {
	py := testenv.NeedsPython(t)
	// No bwrap on PATH: a clear error, and no kernel.
	t.Setenv("PATH", t.TempDir())
	_, err := ipybox.Start(context.Background(), &ipybox.Options{Python: py, WorkDir: t.TempDir(), Sandbox: ipybox.DefaultSandbox()})
	if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "bwrap") || !strings.Contains(err.Error(), "bubblewrap") {
		t.Fatalf("err = %v, want ErrUnavailable naming bwrap and the fix", err)
	}
}

// TestSandboxNeverRunsWorkspacePythonOnHost: a workspace interpreter (a
// venv the sandboxed code can rewrite) is run only inside the sandbox.
func TestSandboxNeverRunsWorkspacePythonOnHost(t *testing.T) {
	t.Parallel()
	py := testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	hostOnly := t.TempDir() // not visible inside the sandbox
	marker := filepath.Join(hostOnly, "ran-on-host")
	fake := filepath.Join(ws, "python3")
	script := "#!/bin/sh\necho ran > " + marker + " 2>/dev/null\nexec " + py + " \"$@\"\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	sb := ipybox.DefaultSandbox()
	// The fake is a wrapper the sandbox cannot look into: a real
	// interpreter outside /usr (a virtualenv, such as PyPI's stack) must
	// be made visible by hand for the exec to find it.
	out, err := exec.Command(py, "-c", "import sys; print(sys.prefix)").Output()
	if err != nil {
		t.Fatal(err)
	}
	if prefix := strings.TrimSpace(string(out)); !strings.HasPrefix(prefix, "/usr/") && prefix != "/usr" {
		sb.ExtraRead = append(sb.ExtraRead, prefix)
	}
	ex := start(t, &ipybox.Options{Python: fake, WorkDir: ws, Sandbox: sb})
	if got := run(t, ex, "1 + 1").Text; got != "2" {
		t.Fatalf("kernel: %q", got)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Errorf("the workspace's interpreter ran on the host")
	}
}

func TestSandboxedStdioServer(t *testing.T) {
	t.Parallel()
	testenv.NeedsTool(t, "bwrap")
	ex := start(t, &ipybox.Options{NoToolApproval: true})
	cfg := testmcpStdio(t)
	// The test server binary lives in a temp dir: make it visible.
	policy := `{"extraRead": ["` + filepath.Dir(cfg.Command) + `"]}`
	cfg.Sandbox = []byte(policy)
	register(t, ex, "boxed", cfg)
	res := run(t, ex, `from mcptools.boxed.tool_1 import Params, run
from mcptools.boxed import pid
print(run(Params(s="in a box")), int(pid.run(pid.Params())) < 50)`)
	if res.Text != "tool-1: in a box True" {
		t.Errorf("sandboxed server: %q (want its pid from a new pid namespace)", res.Text)
	}
	// A crash, then a call: the server is started again in its sandbox.
	run(t, ex, "from mcptools.boxed import crash\ntry:\n    crash.run(crash.Params())\nexcept Exception:\n    pass")
	res = run(t, ex, `print(run(Params(s="again")), int(pid.run(pid.Params())) < 50)`)
	if res.Text != "tool-1: again True" {
		t.Errorf("sandboxed server after a crash: %q", res.Text)
	}
}

// TestSandboxedStdioServerStderr: a sandboxed stdio server that fails at
// start is reported with what it wrote to stderr, as an unsandboxed one is.
func TestSandboxedStdioServerStderr(t *testing.T) {
	t.Parallel()
	testenv.NeedsTool(t, "bwrap")
	sh := testenv.NeedsTool(t, "sh")
	ex := start(t, &ipybox.Options{NoToolApproval: true})
	cfg := ipybox.ServerConfig{Command: sh, Args: []string{"-c", "echo 'error: API_KEY is required' >&2; exit 1"}, Sandbox: []byte("true")}
	_, err := ex.RegisterMCPServer(context.Background(), "broken", cfg)
	if err == nil || !strings.Contains(err.Error(), "API_KEY is required") {
		t.Fatalf("registering a sandboxed server that fails: %v; want its stderr in the error", err)
	}
}

// TestSandboxAttacksFromKernel runs attacks as cells in the sandboxed
// kernel against fixtures on the host. Each prints BLOCKED or OPEN; the
// controls prove the harness can see an open door.
func TestSandboxAttacksFromKernel(t *testing.T) {
	t.Parallel()
	// Host fixtures: a TCP listener on loopback, a file outside the view.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("host service\n"))
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	hostFile := filepath.Join(t.TempDir(), "host-secret.txt")
	os.WriteFile(hostFile, []byte("secret"), 0o644)

	ex := startSandboxed(t, &ipybox.Options{Approver: ipybox.ApproveAll})
	register(t, ex, "go", testmcpStdio(t))
	run(t, ex, `import os, socket, ctypes, subprocess
def attempt(f):
    try:
        f()
        return "OPEN"
    except BaseException as e:
        return "BLOCKED"
libc = ctypes.CDLL(None, use_errno=True)
def syscall_ok(nr, *args):
    if libc.syscall(nr, *args) < 0:
        raise OSError(ctypes.get_errno(), "denied")
def sh(cmd):
    if subprocess.run(cmd, shell=True, capture_output=True).returncode != 0:
        raise OSError(cmd)`)
	for _, tc := range []struct{ name, code, want string }{
		{"control: workspace write", `attempt(lambda: open("ok.txt", "w").write("x"))`, "OPEN"},
		{"control: tool server via forwarder", `attempt(lambda: __import__("mcptools.go.tool_1", fromlist=["run"]).run(__import__("mcptools.go.tool_1", fromlist=["Params"]).Params(s="x")))`, "OPEN"},
		{"read /etc/shadow", `attempt(lambda: open("/etc/shadow").read())`, "BLOCKED"},
		{"read a host file outside the view", `attempt(lambda: open(` + strconv.Quote(hostFile) + `).read())`, "BLOCKED"},
		{"write outside the workspace", `attempt(lambda: open("/usr/pwned", "w"))`, "BLOCKED"},
		{"write servers.json", `attempt(lambda: open(".ipybox/servers.json", "w"))`, "BLOCKED"},
		{"write .env", `attempt(lambda: open(".env", "a").write("X=1"))`, "BLOCKED"},
		{"remount root rw", `attempt(lambda: sh("mount -o remount,rw /"))`, "BLOCKED"},
		{"new user namespace", `attempt(lambda: sh("unshare -U true"))`, "BLOCKED"},
		{"TCP to a host loopback port", `attempt(lambda: socket.create_connection(("127.0.0.1", ` + strconv.Itoa(port) + `), timeout=2))`, "BLOCKED"},
		{"TCP to an external IP", `attempt(lambda: socket.create_connection(("1.1.1.1", 443), timeout=2))`, "BLOCKED"},
		{"DNS", `attempt(lambda: socket.getaddrinfo("example.com", 443))`, "BLOCKED"},
		{"AF_VSOCK", `attempt(lambda: socket.socket(40, socket.SOCK_STREAM))`, "BLOCKED"},
		{"io_uring_setup", `attempt(lambda: syscall_ok(425, 1, ctypes.create_string_buffer(120)))`, "BLOCKED"},
	} {
		if got := run(t, ex, tc.code).Text; got != "'"+tc.want+"'" {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// sandboxZygote starts a sandbox fork server for python (empty: the tests'
// interpreter) that the test's cleanup closes after its Executors.
func sandboxZygote(t *testing.T, python string) *ipybox.Zygote {
	t.Helper()
	testenv.NeedsTool(t, "bwrap")
	if python == "" {
		python = testenv.NeedsPython(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	z, err := ipybox.NewSandboxZygote(ctx, python, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { z.Close() })
	return z
}
