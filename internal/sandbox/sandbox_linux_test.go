package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipybox/ipybox/internal/egress"
	"github.com/ipybox/ipybox/internal/kernel"
	"github.com/ipybox/ipybox/internal/testenv"
)

// The attack tests run code inside a real bwrap sandbox. The payloads are
// plain /usr/bin/python3 scripts: the kernel wiring is tested elsewhere.

const python = "/usr/bin/python3"

func needSandbox(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("tier 3 test (bwrap): skipped with -short")
	}
	testenv.NeedsTool(t, "bwrap")
	if _, err := os.Stat(python); err != nil {
		testenv.Missing(t, "%s: %v", python, err)
	}
}

// sbx is a Sandbox with its workspace and a run directory.
type sbx struct {
	*Sandbox
	ws, run string
}

func newSbx(t testing.TB, cfg *Config, opts *Options) *sbx {
	t.Helper()
	needSandbox(t)
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Workspace == "" {
		o.Workspace = t.TempDir()
	}
	if o.Zygote == nil && forkedByDefault() {
		o.Zygote = sandboxZygote(t)
	}
	s, err := New(cfg, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &sbx{Sandbox: s, ws: s.Workspace(), run: t.TempDir()}
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func hostHome(t testing.TB) string {
	h, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (x *sbx) env(t testing.TB) []string {
	return []string{"PATH=/usr/bin:/bin", "HOME=" + hostHome(t), "LANG=C.UTF-8"}
}

// start starts argv in the sandbox.
func (x *sbx) start(t testing.TB, stdout, stderr io.Writer, argv ...string) kernel.HostProcess {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := x.Start(ctx, &kernel.Spec{
		Path: argv[0], Args: argv[1:], Env: x.env(t), Dir: x.ws, RunDir: x.run, Stdout: stdout, Stderr: stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill(context.Background()) }) // after a failed test; harmless after Wait
	return p.(kernel.HostProcess)
}

// waitFor waits for p with a bound, killing it when the bound passes.
func waitFor(t testing.TB, p kernel.Process, d time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	err := p.Wait(ctx)
	if ctx.Err() == nil {
		return err
	}
	p.Kill(context.Background())
	p.Wait(context.Background())
	t.Fatalf("sandboxed process still running after %v", d)
	return nil
}

// py runs a Python script in the sandbox and returns its stdout; the
// script must exit 0.
func (x *sbx) py(t testing.TB, code string) string {
	t.Helper()
	var out, errb bytes.Buffer
	p := x.start(t, &out, &errb, python, "-c", code)
	if err := waitFor(t, p, 60*time.Second); err != nil {
		t.Fatalf("payload failed: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	return out.String()
}

// attemptPrelude defines attempt(name, fn): it prints "name ALLOWED …" or
// "name DENIED <exception> <errno>".
const attemptPrelude = `
import os, sys, errno, socket, ctypes, subprocess
def attempt(name, fn):
    try:
        r = fn()
        print(name, "ALLOWED", repr(r)[:200], flush=True)
    except BaseException as e:
        print(name, "DENIED", type(e).__name__, errno.errorcode.get(getattr(e, "errno", None) or 0, ""), str(e)[:200], flush=True)
def read(p):
    with open(p, "rb") as f:
        return f.read()
def write(p, data=b"x"):
    with open(p, "wb") as f:
        f.write(data)
def run(*argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise OSError(r.returncode, (r.stdout + r.stderr).strip())
    return r.stdout
libc = ctypes.CDLL(None, use_errno=True)
def cmount(target):
    if libc.mount(b"none", target, b"tmpfs", 0, None) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
def sys_call(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    if r == -1:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r
`

// check is one attempt of an attack table.
type check struct {
	name    string
	code    string // a Python expression; the attempt calls it
	allowed bool   // the expected outcome
	detail  string // must appear in the output line, if not empty
}

// attempts runs the checks in one sandboxed process and compares.
func (x *sbx) attempts(t *testing.T, setup string, checks []check) {
	t.Helper()
	var b strings.Builder
	b.WriteString(attemptPrelude)
	b.WriteString(setup + "\n")
	for _, c := range checks {
		fmt.Fprintf(&b, "attempt(%q, lambda: %s)\n", c.name, c.code)
	}
	out := x.py(t, b.String())
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if name, rest, ok := strings.Cut(l, " "); ok {
			lines[name] = rest
		}
	}
	for _, c := range checks {
		got, ok := lines[c.name]
		switch {
		case !ok:
			t.Errorf("%s: no result in output:\n%s", c.name, out)
		case c.allowed && !strings.HasPrefix(got, "ALLOWED"):
			t.Errorf("%s (%s): %s; want ALLOWED (a control: the harness must be able to succeed)", c.name, c.code, got)
		case !c.allowed && !strings.HasPrefix(got, "DENIED"):
			t.Errorf("%s (%s): %s; want DENIED", c.name, c.code, got)
		case c.detail != "" && !strings.Contains(got, c.detail):
			t.Errorf("%s (%s): %s; want it to mention %q", c.name, c.code, got, c.detail)
		}
	}
}

func writeFile(t testing.TB, p, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// hostCanary creates a file outside every path the sandbox is given.
func hostCanary(t testing.TB, dir string) string {
	t.Helper()
	d, err := os.MkdirTemp(dir, "ipybox-canary-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil { // only the sandbox's rules may hide it
		t.Fatal(err)
	}
	p := filepath.Join(d, "canary.txt")
	writeFile(t, p, "CANARY")
	return p
}

func TestAttackReads(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, "ok.txt"), "fine")
	writeFile(t, filepath.Join(ws, "secret.txt"), "TOPSECRET")
	writeFile(t, filepath.Join(ws, "secrets", "inner.txt"), "TOPSECRET")
	writeFile(t, filepath.Join(ws, "deep", "er", "key.pem"), "TOPSECRET")
	cfg := DefaultConfig()
	cfg.Filesystem.DenyRead = []string{"secret.txt", "secrets", "**/*.pem"}
	x := newSbx(t, cfg, &Options{Workspace: ws})
	homeCanary := hostCanary(t, hostHome(t))
	tmpCanary := hostCanary(t, os.TempDir())
	checks := []check{
		{"ok", `read("ok.txt")`, true, "fine"},
		{"passwd", `read("/etc/passwd")`, true, "root"},
		{"denied-file", `read("secret.txt")`, false, "EACCES"},
		{"denied-dir-file", `read("secrets/inner.txt")`, false, ""},
		{"denied-dir-list", `os.listdir("secrets")`, false, "EACCES"},
		{"denied-glob", `read("deep/er/key.pem")`, false, ""},
		{"shadow", `read("/etc/shadow")`, false, ""},
		{"gshadow", `read("/etc/gshadow")`, false, ""},
		{"home-canary", fmt.Sprintf("read(%q)", homeCanary), false, "ENOENT"},
		{"tmp-canary", fmt.Sprintf("read(%q)", tmpCanary), false, "ENOENT"},
		{"home", `os.listdir("/home")`, false, "ENOENT"},
		{"opt", `os.listdir("/opt")`, false, "ENOENT"},
		{"var", `os.listdir("/var")`, false, "ENOENT"},
		{"sys", `os.listdir("/sys")`, false, "ENOENT"},
	}
	for _, p := range []string{"/etc/ssh/ssh_host_ed25519_key", "/etc/ssl/private"} {
		if _, err := os.Stat(p); err == nil {
			checks = append(checks, check{"etc-" + filepath.Base(p), fmt.Sprintf("read(%q) if os.path.isfile(%q) else os.listdir(%q)", p, p, p), false, ""})
		}
	}
	x.attempts(t, "", checks)
}

func TestAttackWrites(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	writeFile(t, filepath.Join(ws, ".env"), "A=1\n")
	writeFile(t, filepath.Join(ws, ".env.local"), "B=2\n")
	writeFile(t, filepath.Join(ws, ".bashrc"), "# rc\n")
	writeFile(t, filepath.Join(ws, ".ipybox", "servers.json"), "{}")
	writeFile(t, filepath.Join(ws, ".git", "config"), "[core]\n")
	writeFile(t, filepath.Join(ws, "ro-dir", "f.txt"), "keep")
	if err := os.MkdirAll(filepath.Join(ws, ".ipybox", "venv"), 0o755); err != nil {
		t.Fatal(err)
	}
	extra := t.TempDir()
	cfg := DefaultConfig()
	cfg.Filesystem.DenyWrite = []string{"ro-dir"}
	cfg.Filesystem.AllowWrite = []string{extra, "/tmp"}
	x := newSbx(t, cfg, &Options{Workspace: ws})
	tmpName := "/tmp/ipybox-inside-" + randHex(6)
	homeName := filepath.Join(hostHome(t), "ipybox-inside-"+randHex(6))
	x.attempts(t, "", []check{
		{"ws", `write("new.txt")`, true, ""},
		{"run-dir", fmt.Sprintf("write(%q)", filepath.Join(x.run, "x")), true, ""},
		{"allow-write", fmt.Sprintf("write(%q)", filepath.Join(extra, "x")), true, ""},
		{"venv", `write(".ipybox/venv/x")`, false, "EACCES"}, // shared by every session: read-only
		{"tmp", fmt.Sprintf("write(%q)", tmpName), true, ""},
		{"home", fmt.Sprintf("write(%q)", homeName), true, ""},
		{"usr", `write("/usr/x")`, false, "EROFS"},
		{"etc", `write("/etc/x")`, false, "EROFS"},
		{"root-fs", `write("/x")`, false, "EROFS"},
		{"init-dir", `write("/run/ipybox-sandbox/x")`, false, "EROFS"},
		{"init-binary", `write("/run/ipybox-sandbox/init")`, false, ""},
		{"env", `write(".env", b"EVIL=1")`, false, "EACCES"},
		{"env-append", `open(".env", "a").write("EVIL=1")`, false, "EACCES"},
		{"env-unlink", `os.unlink(".env")`, false, "EACCES"},
		{"env-rename", `os.rename(".env", "x")`, false, "EACCES"},
		{"env-local", `write(".env.local")`, false, "EACCES"},
		{"bashrc", `write(".bashrc")`, false, "EACCES"},
		{"servers", `write(".ipybox/servers.json", b'{"evil": {}}')`, false, "EACCES"},
		{"ipybox-new", `write(".ipybox/other.json")`, false, "EACCES"},
		{"ipybox-rename", `os.rename(".ipybox", "x")`, false, "EACCES"},
		{"git-hook", `write(".git/hooks/pre-commit")`, false, ""},
		{"git-hooks-dir", `os.mkdir(".git/hooks")`, false, "EACCES"},
		{"git-commondir", `write(".git/commondir", b"../evil")`, false, "EACCES"},
		{"git-config", `write(".git/config")`, false, "EACCES"},
		{"git-rename", `os.rename(".git", "x")`, false, "EACCES"},
		{"deny-write", `write("ro-dir/f.txt")`, false, "EROFS"},
		{"deny-write-new", `write("ro-dir/g.txt")`, false, "EROFS"},
		{"chmod-mask", `os.chmod("/etc/shadow", 0o644)`, false, ""},
	})
	for p, want := range map[string]string{".env": "A=1\n", ".ipybox/servers.json": "{}", "ro-dir/f.txt": "keep", ".git/config": "[core]\n"} {
		if b, err := os.ReadFile(filepath.Join(ws, p)); err != nil || string(b) != want {
			t.Errorf("%s on the host = %q, %v; want %q", p, b, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, "new.txt")); err != nil {
		t.Errorf("a workspace write did not reach the host: %v", err)
	}
	for _, p := range []string{tmpName, homeName} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			os.Remove(p)
			t.Errorf("%s, written inside the sandbox, appeared on the host (%v)", p, err)
		}
	}
}

// TestNothingAppears: a sandbox adds nothing to the workspace but its own
// .ipybox folder (which ignores itself for git), neither while its
// process runs nor after: a missing protected name is refused by the
// guard, not held by a placeholder. Creating one inside fails.
func TestNothingAppears(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	if err := os.Mkdir(filepath.Join(ws, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	x := newSbx(t, nil, &Options{Workspace: ws})
	list := func() []string {
		var out []string
		filepath.Walk(ws, func(p string, _ os.FileInfo, err error) error {
			if err == nil && p != ws {
				rel, _ := filepath.Rel(ws, p)
				out = append(out, rel)
			}
			return nil
		})
		return out
	}
	p, err := x.Start(context.Background(), &kernel.Spec{Path: python, Args: []string{"-c", "import time; time.sleep(30)"}, Dir: ws, RunDir: x.run})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{".git", ".ipybox", ".ipybox/.gitignore"}
	if got := list(); !slices.Equal(got, want) {
		t.Errorf("while the sandbox runs, the workspace holds %q; want %q", got, want)
	}
	p.Kill(context.Background())
	waitFor(t, p, 10*time.Second)
	x.attempts(t, "", []check{
		{"env", `write(".env", b"EVIL=1")`, false, "EACCES"},
		{"servers", `write(".ipybox/servers.json", b"{}")`, false, "EACCES"},
		{"git-hooks", `os.mkdir(".git/hooks")`, false, "EACCES"},
		{"vscode", `os.mkdir(".vscode")`, false, "EACCES"},
		{"mcp-json", `write(".mcp.json", b"{}")`, false, "EACCES"},
	})
	x.Close()
	if got := list(); !slices.Equal(got, want) {
		t.Errorf("after the sandbox, the workspace holds %q; want %q", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(ws, ".ipybox", ".gitignore")); err != nil || !strings.Contains(string(b), "\n*\n") {
		t.Errorf(".ipybox/.gitignore = %q, %v; want it to ignore everything", b, err)
	}
}

func TestAttackEscapes(t *testing.T) {
	t.Parallel()
	x := newSbx(t, nil, nil)
	x.attempts(t, "", []check{
		{"true", `run("true")`, true, ""},
		{"mount-tmpfs", `run("mount", "-t", "tmpfs", "none", "/tmp")`, false, ""},
		{"umount-mask", `run("umount", "/etc/shadow")`, false, ""},
		{"remount-rw", `run("mount", "-o", "remount,rw", "/")`, false, ""},
		{"remount-rw-usr", `run("mount", "-o", "remount,rw", "/usr")`, false, ""},
		{"unshare-user", `run("unshare", "-U", "true")`, false, ""},
		{"unshare-user-map", `run("unshare", "-Ur", "true")`, false, ""},
		{"mount-syscall", `cmount(b"/tmp")`, false, "EPERM"},
		{"chroot", `os.chroot("/tmp")`, false, "EPERM"},
		{"setuid", `os.setuid(1000)`, false, ""},
	})
}

// unixEcho serves a greeting on a host unix socket.
func unixEcho(t *testing.T, greeting string) string {
	sock := filepath.Join(t.TempDir(), "tool.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(greeting))
			c.Close()
		}
	}()
	return sock
}

func TestAttackNetwork(t *testing.T) {
	t.Parallel()
	// A listener on the host's loopback must stay unreachable.
	hostLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	go func() {
		for {
			c, err := hostLn.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HOST"))
			c.Close()
		}
	}()
	hostPort := hostLn.Addr().(*net.TCPAddr).Port
	// An abstract unix socket on the host must stay unreachable.
	abstract := "ipybox-test-" + randHex(6)
	absLn, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer absLn.Close()

	tool := unixEcho(t, "hello from the tool server")
	const fwdPort = 47001
	x := newSbx(t, nil, &Options{Forwards: []Forward{{Port: fwdPort, Socket: tool}}})
	if x.ProxyEnabled() {
		t.Fatal("the proxy runs without allowed domains")
	}
	x.attempts(t, `
def tcp(host, port):
    s = socket.create_connection((host, port), timeout=3)
    try:
        return s.recv(100)
    finally:
        s.close()
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    s.sendto(b"x", ("8.8.8.8", 53))
    return s.recv(10)
def abstract(name):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect("\0" + name)
    return s.recv(10)
`, []check{
		{"forward", fmt.Sprintf("tcp('127.0.0.1', %d)", fwdPort), true, "hello from the tool server"},
		{"host-loopback", fmt.Sprintf("tcp('127.0.0.1', %d)", hostPort), false, "ECONNREFUSED"},
		{"external-ip", `tcp("1.1.1.1", 443)`, false, ""},
		{"external-ip6", `tcp("2606:4700:4700::1111", 443)`, false, ""},
		{"udp", `udp()`, false, ""},
		{"dns", `socket.getaddrinfo("example.com", 443)`, false, ""},
		{"proxy-port", fmt.Sprintf("tcp('127.0.0.1', %d)", ProxyPort), false, "ECONNREFUSED"},
		{"abstract", fmt.Sprintf("abstract(%q)", abstract), false, "ECONNREFUSED"},
		{"interfaces", `sorted(n for _, n in socket.if_nameindex())`, true, "['lo']"},
	})
}

func TestAttackProxy(t *testing.T) {
	t.Parallel()
	fixture := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "fixture-ok %s", r.URL.Path)
	}))
	defer fixture.Close()
	u, _ := url.Parse(fixture.URL)
	port := u.Port()
	hosts := map[string]string{
		"allowed.test":  "127.0.0.1",
		"ok.wild.test":  "127.0.0.1",
		"bad.wild.test": "127.0.0.1",
		"private.test":  "10.11.12.13",
	}
	cfg := DefaultConfig()
	if err := cfg.AllowDomains("allowed.test", "*.wild.test", "private.test"); err != nil {
		t.Fatal(err)
	}
	cfg.Network.DeniedDomains = []string{"bad.wild.test"}
	x := newSbx(t, cfg, &Options{proxy: &egress.Options{
		Resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
			if a, ok := hosts[host]; ok {
				return []netip.Addr{netip.MustParseAddr(a)}, nil
			}
			return nil, fmt.Errorf("no such host %s", host)
		},
		// The fixture listens on loopback; only its address passes.
		AllowPrivate: func(a netip.Addr) bool { return a == netip.MustParseAddr("127.0.0.1") },
	}})
	x.attempts(t, `
import urllib.request, urllib.error, http.client
def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return (r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        raise OSError(e.code, e.read().decode())
def connect(host, port):
    c = http.client.HTTPConnection("127.0.0.1", 3128, timeout=10)
    c.set_tunnel(host, port)
    try:
        c.request("GET", "/tunneled")
    except OSError as e:
        raise OSError(0, str(e))
    r = c.getresponse()
    return (r.status, r.read().decode())
`, []check{
		{"env", `os.environ["HTTPS_PROXY"] + " " + os.environ["NO_PROXY"]`, true, "http://127.0.0.1:3128 localhost,127.0.0.1"},
		{"get-allowed", fmt.Sprintf("get('http://allowed.test:%s/x')", port), true, "(200, 'fixture-ok /x')"},
		{"connect-allowed", fmt.Sprintf("connect('allowed.test', %s)", port), true, "(200, 'fixture-ok /tunneled')"},
		{"get-wildcard", fmt.Sprintf("get('http://ok.wild.test:%s/w')", port), true, "fixture-ok /w"},
		{"get-not-allowed", fmt.Sprintf("get('http://other.test:%s/')", port), false, "403"},
		{"connect-not-allowed", `connect("other.test", 443)`, false, "403"},
		{"get-denied-under-wildcard", fmt.Sprintf("get('http://bad.wild.test:%s/')", port), false, "deniedDomains"},
		{"connect-denied-under-wildcard", fmt.Sprintf("connect('bad.wild.test', %s)", port), false, "403"},
		{"get-loopback-literal", fmt.Sprintf("get('http://127.0.0.1:%s/')", port), false, ""}, // NO_PROXY: direct, and refused
		{"get-ip-literal", `get("http://192.0.2.1:8080/")`, false, "IP literals"},
		{"get-public-ip-literal", `get("http://93.184.216.34/")`, false, "IP literals"},
		{"connect-ip-literal", `connect("93.184.216.34", 443)`, false, "403"},
		{"get-private", fmt.Sprintf("get('http://private.test:%s/')", port), false, "resolves only to loopback, private"},
		{"connect-private", fmt.Sprintf("connect('private.test', %s)", port), false, "403"},
	})
}

func TestAttackSyscalls(t *testing.T) {
	t.Parallel()
	if runtime.GOARCH != "amd64" { // the syscall numbers below are amd64's
		t.Skip("amd64 syscall numbers")
	}
	x := newSbx(t, nil, nil)
	x.attempts(t, `
status = read("/proc/self/status").decode()
`, []check{
		{"seccomp-mode", `[l for l in status.splitlines() if l.startswith(("Seccomp:", "NoNewPrivs:"))]`, true, "'NoNewPrivs:\\t1', 'Seccomp:\\t2'"},
		{"caps", `[l for l in status.splitlines() if l.startswith("CapEff")]`, true, "0000000000000000"},
		{"inet", `socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()`, true, ""},
		{"unix", `socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()`, true, ""},
		{"getpid", `sys_call(39)`, true, ""},
		{"vsock", `socket.socket(40, socket.SOCK_STREAM)`, false, "EPERM"},
		{"io-uring-setup", `sys_call(425, 8, ctypes.addressof(ctypes.create_string_buffer(120)))`, false, "EPERM"},
		{"io-uring-enter", `sys_call(426, 0, 0, 0, 0, 0, 0)`, false, "EPERM"},
		{"io-uring-register", `sys_call(427, 0, 0, 0, 0)`, false, "EPERM"},
		{"x32-getpid", `sys_call(0x40000000 | 39)`, false, "EPERM"},
		{"keyctl", `sys_call(250, 0, 0, 0, 0, 0)`, false, "EPERM"},
		// The init (pid 1) runs without the filter: it must not be a way
		// around it.
		{"ptrace-init", `sys_call(101, 16, 1, 0, 0)`, false, "EPERM"},
		{"init-mem", `open("/proc/1/mem", "rb")`, false, "EACCES"},
		{"init-fds", `[os.readlink("/proc/1/fd/" + f) for f in os.listdir("/proc/1/fd")]`, false, ""},
		{"kill-init", `os.kill(1, 9)`, true, ""}, // ignored: pid 1 of its namespace
		{"init-alive", `os.kill(1, 0)`, true, ""},
		{"add-key", `sys_call(248, 0, 0, 0, 0, 0)`, false, "EPERM"},
	})
}

func TestAttackProcAndEnv(t *testing.T) {
	canary := "canary-" + randHex(8)
	t.Setenv("SECRET_TOKEN", canary)
	x := newSbx(t, nil, nil)
	out := x.py(t, fmt.Sprintf(`
import os
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print("PIDS", len(pids))
for p in pids:
    try:
        cmd = open("/proc/%%d/cmdline" %% p, "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError as e:
        cmd = "?"
    print("CMD", p, cmd)
    try:
        env = open("/proc/%%d/environ" %% p, "rb").read()
        print("ENV", p, "readable", %q.encode() in env, b"SECRET_TOKEN" in env)
    except OSError as e:
        print("ENV", p, "unreadable", e.errno)
print("OSENV", "SECRET_TOKEN" in os.environ, %q in repr(dict(os.environ)))
`, canary, canary))
	if !strings.Contains(out, "OSENV False False") {
		t.Errorf("the canary is in os.environ:\n%s", out)
	}
	readable := 0
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 2 && f[0] == "PIDS":
			if n, _ := strconv.Atoi(f[1]); n != 2 {
				t.Errorf("the sandbox sees %d processes; want the init and the payload:\n%s", n, out)
			}
		case len(f) >= 3 && f[0] == "CMD":
			cmd := strings.Join(f[2:], " ")
			if !strings.HasPrefix(cmd, insideInit) && !strings.HasPrefix(cmd, python) {
				t.Errorf("a process that is not the sandbox's: %s", l)
			}
			if strings.Contains(cmd, "PATH=") || strings.Contains(cmd, canary) {
				t.Errorf("environment in a command line: %s", l)
			}
		case len(f) >= 3 && f[0] == "ENV":
			if f[2] == "readable" {
				readable++
				if f[3] != "False" || f[4] != "False" {
					t.Errorf("the canary is in /proc/%s/environ", f[1])
				}
			}
		}
	}
	if readable < 1 { // the payload's own, at least
		t.Errorf("no environ file was readable: the check proves nothing:\n%s", out)
	}
	if !strings.Contains(out, "CMD 1 "+insideInit) || !strings.Contains(out, "ENV 1 unreadable") {
		t.Errorf("pid 1 should be the init, with its environment unreadable:\n%s", out)
	}
}

// lineWatcher is a writer that reports when a line appears.
type lineWatcher struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func newLineWatcher(want string) *lineWatcher {
	return &lineWatcher{want: want, seen: make(chan struct{})}
}

func (w *lineWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *lineWatcher) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func (w *lineWatcher) wait(t *testing.T) {
	t.Helper()
	select {
	case <-w.seen:
	case <-time.After(30 * time.Second):
		t.Fatalf("%q never appeared; output so far: %q", w.want, w.String())
	}
}

func TestSignalInterrupts(t *testing.T) {
	testenv.CheckGoroutines(t)
	x := newSbx(t, nil, nil)
	out := newLineWatcher("ready")
	var errb bytes.Buffer
	p := x.start(t, out, &errb, python, "-c", `
import time, sys
try:
    print("ready", flush=True)
    time.sleep(60)
    print("not interrupted", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(0)
`)
	out.wait(t)
	if err := p.Signal(context.Background(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := waitFor(t, p, 10*time.Second); err != nil {
		t.Fatalf("Wait: %v\n%s\n%s", err, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "interrupted") || strings.Contains(out.String(), "not interrupted") {
		t.Errorf("output %q, want \"interrupted\"", out.String())
	}
	if err := p.Signal(context.Background(), syscall.SIGINT); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Signal after Wait = %v, want os.ErrProcessDone", err)
	}
}

func TestExitStatus(t *testing.T) {
	t.Parallel()
	x := newSbx(t, nil, nil)
	var errb bytes.Buffer
	p := x.start(t, nil, &errb, python, "-c", "import sys; sys.exit(7)")
	err := waitFor(t, p, 30*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Errorf("Wait = %v, want exit status 7 (%s)", err, errb.String())
	}
	p = x.start(t, nil, &errb, python, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
	err = waitFor(t, p, 30*time.Second)
	if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
		t.Errorf("Wait = %v, want exit status %d", err, 128+int(syscall.SIGTERM))
	}
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	x := newSbx(t, nil, nil)
	ctx := context.Background()
	tests := []struct {
		name string
		spec kernel.Spec
		want string
	}{
		{"missing program", kernel.Spec{Path: "/usr/bin/no-such-program", RunDir: x.run}, "no such file"},
		{"relative path", kernel.Spec{Path: "python3", RunDir: x.run}, "absolute"},
		{"no run dir", kernel.Spec{Path: python}, "run directory"},
		{"dir outside", kernel.Spec{Path: python, RunDir: x.run, Dir: "/opt"}, "not visible"},
		{"not executable", kernel.Spec{Path: "/etc/passwd", RunDir: x.run}, "permission denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := x.Start(ctx, &tt.spec)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				if p != nil {
					p.Kill(context.Background())
					p.Wait(context.Background())
				}
				t.Fatalf("Start = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// findMarker returns the host pids whose command line contains marker.
func findMarker(marker string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !bytes.Contains(b, []byte(marker)) {
			continue
		}
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
				continue // a zombie is gone for our purposes
			}
		}
		pids = append(pids, pid)
	}
	return pids
}

// procTree describes the processes below pid, for failure messages.
func procTree(pid int) string {
	var b strings.Builder
	var walk func(pid int, depth int)
	walk = func(pid int, depth int) {
		cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		fmt.Fprintf(&b, "%s%d %q %.60q\n", strings.Repeat("  ", depth), pid, cl, st)
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, task := range tasks {
			ch, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
			for _, c := range strings.Fields(string(ch)) {
				n, _ := strconv.Atoi(c)
				walk(n, depth+1)
			}
		}
	}
	walk(pid, 0)
	return b.String()
}

// waitGone waits until no process carries marker.
func waitGone(t *testing.T, marker string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		left := findMarker(marker)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range left {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("sandboxed processes %v still alive %v later", left, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sleeperScript starts a background process and sleeps, both carrying
// marker in their command line.
func sleeperScript(marker string) []string {
	return []string{python, "-c", `
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(300)", sys.argv[1]],
                         stdout=subprocess.PIPE)
child.stdout.readline() # the child has exec'd and runs
print("ready", flush=True)
time.sleep(300)
`, marker}
}

func TestKillRemovesSandbox(t *testing.T) {
	testenv.CheckGoroutines(t)
	x := newSbx(t, nil, nil)
	marker := "marker-" + randHex(8)
	out := newLineWatcher("ready")
	p := x.start(t, out, nil, sleeperScript(marker)...)
	out.wait(t)
	if n := len(findMarker(marker)); n != 2 {
		t.Fatalf("found %d processes with the marker, want 2 (the payload and its child): %v %s\n%s", n, findMarker(marker), out.String(), procTree(p.Pid()))
	}
	if err := p.Kill(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, p, 10*time.Second)
	waitGone(t, marker, time.Second)
}

func init() {
	// The helper launches a sandbox, reports, and waits to be killed.
	helpers["parent"] = func() int {
		s, err := New(nil, &Options{Workspace: os.Getenv("HELPER_WS")})
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		marker := os.Getenv("HELPER_MARKER")
		out := newLineWatcher("ready")
		p, err := s.Start(context.Background(), &kernel.Spec{
			Path: python, Args: sleeperScript(marker)[1:], Env: []string{"PATH=/usr/bin:/bin"},
			Dir: os.Getenv("HELPER_WS"), RunDir: os.Getenv("HELPER_RUN"), Stdout: out,
		})
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		<-out.seen
		fmt.Printf("started %s\n", p.ID())
		time.Sleep(time.Minute)
		return 2
	}
}

func TestParentSIGKILLRemovesSandbox(t *testing.T) {
	needSandbox(t)
	marker := "marker-" + randHex(8)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=parent", "HELPER_MARKER="+marker,
		"HELPER_WS="+t.TempDir(), "HELPER_RUN="+t.TempDir())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if !strings.HasPrefix(line, "started ") {
		t.Fatalf("helper: %q", line)
	}
	bwrapPid, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "started ")))
	if n := len(findMarker(marker)); n != 2 {
		t.Fatalf("found %d processes with the marker, want 2:\n%s", n, procTree(bwrapPid))
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitGone(t, marker, time.Second)
	t.Logf("sandbox gone %v after SIGKILL of its parent", time.Since(start))
	if err := syscall.Kill(bwrapPid, 0); err == nil {
		if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", bwrapPid)); !bytes.Contains(st, []byte(") Z")) {
			t.Errorf("bwrap (pid %d) survived its parent", bwrapPid)
		}
	}
}

// callLog returns the path of a file a fake bwrap can append its calls
// to: as root, bwrap runs as MappedID, so the directory is open to all.
func callLog(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ipybox-probe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "calls")
}

func TestProbeFailsClosed(t *testing.T) {
	dir := t.TempDir()
	log := callLog(t)
	fake := filepath.Join(dir, "bwrap")
	writeFile(t, fake, fmt.Sprintf("#!/bin/sh\necho \"$@\" >> %s\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n", log))
	if err := os.Chmod(fake, 0o755); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	tests := []struct {
		name  string
		bwrap string
		path  string // $PATH, when not empty
		want  []string
	}{
		{"missing", filepath.Join(dir, "no-bwrap"), "", []string{"bwrap not found at", "install bubblewrap"}},
		{"not on PATH", "", empty, []string{"not found on PATH", "apt-get install bubblewrap"}},
		{"no namespaces", fake, "", []string{"cannot create the sandbox's namespaces", "Permission denied", "namespaces must be available"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.path != "" {
				t.Setenv("PATH", tt.path)
			}
			s, err := New(nil, &Options{Workspace: t.TempDir(), Bwrap: tt.bwrap})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			for i := 0; i < 2; i++ { // the second answer comes from the cache
				p, err := s.Start(ctx, &kernel.Spec{Path: python, Args: []string{"-c", "print(1)"}, RunDir: t.TempDir()})
				if p != nil {
					p.Kill(context.Background())
					t.Fatal("Start returned a process")
				}
				var pe *ProbeError
				if !errors.As(err, &pe) || !errors.Is(err, ErrUnavailable) {
					t.Fatalf("Start = %v, want a *ProbeError wrapping ErrUnavailable", err)
				}
				for _, w := range tt.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
			}
			if _, err := s.Command(ctx, python, nil, nil, ""); !errors.Is(err, ErrUnavailable) {
				t.Errorf("Command = %v, want ErrUnavailable", err)
			}
		})
	}
	// The probe runs only to explain a failed start: the fake ran once
	// for the start, once for the probe, and never again (cached).
	calls, _ := os.ReadFile(log)
	if n, probes := strings.Count(string(calls), "\n"), strings.Count(string(calls), "-- true\n"); n != 2 || probes != 1 {
		t.Errorf("the fake bwrap ran %d times (%d probes) with %q; want one start and one probe", n, probes, calls)
	}
}

// TestIgnoredKeysWarned: each settings key that has no effect is named in
// one warning at the default level, once per process (keys no other
// test uses, since the once is per process).
func TestIgnoredKeysWarned(t *testing.T) {
	p := filepath.Join(t.TempDir(), "settings.json")
	writeFile(t, p, `{"ipyboxTestTop": true, "filesystem": {"ipyboxTestKey": 1}}`)
	cfg, err := LoadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil)) // Info: the default level
	for range 2 {
		s, err := New(cfg, &Options{Workspace: t.TempDir(), Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	for _, key := range []string{"ipyboxTestTop", "filesystem.ipyboxTestKey"} {
		line := "level=WARN msg=\"sandbox: settings key has no effect here; ignored\" key=" + key + "\n"
		if n := strings.Count(buf.String(), line); n != 1 {
			t.Errorf("warned %d times about %s, want once; log:\n%s", n, key, buf.String())
		}
	}
}

// TestProbeKeptAcrossSandboxes: a bwrap that passed the probe is not
// probed again by the next Sandbox of the process (each MCP session makes
// one), while one that failed is.
func TestProbeKeptAcrossSandboxes(t *testing.T) {
	real := testenv.NeedsTool(t, "bwrap")
	dir := t.TempDir()
	log := callLog(t)
	good, bad := filepath.Join(dir, "good-bwrap"), filepath.Join(dir, "bad-bwrap")
	writeFile(t, good, fmt.Sprintf("#!/bin/sh\necho good >> %s\nexec %s \"$@\"\n", log, real))
	writeFile(t, bad, fmt.Sprintf("#!/bin/sh\necho bad >> %s\necho 'bwrap: no' >&2\nexit 1\n", log))
	for _, f := range []string{good, bad} {
		if err := os.Chmod(f, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	probe := func(bwrap string) error {
		s, err := New(nil, &Options{Workspace: t.TempDir(), Bwrap: bwrap})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		return s.Probe(context.Background())
	}
	for i := range 2 {
		if err := probe(good); err != nil {
			t.Fatalf("probe %d of the working bwrap: %v", i, err)
		}
		if err := probe(bad); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("probe %d of the failing bwrap = %v, want ErrUnavailable", i, err)
		}
	}
	calls, _ := os.ReadFile(log)
	if got := strings.Fields(string(calls)); !slices.Equal(got, []string{"good", "bad", "bad"}) {
		t.Errorf("bwrap runs %q; want the working one probed once and the failing one each time", got)
	}
	// What is kept for "bwrap on PATH" is the bwrap found there: once PATH
	// has none, the probe says so.
	if err := probe(""); err != nil {
		t.Fatalf("probe of bwrap on PATH: %v", err)
	}
	t.Setenv("PATH", t.TempDir())
	if err := probe(""); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "not found on PATH") {
		t.Errorf("probe with no bwrap on PATH = %v, want ErrUnavailable saying so", err)
	}
}

func TestCommandStdio(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.BlockUnixSockets = true
	x := newSbx(t, cfg, nil)
	ctx := context.Background()
	cmd, err := x.Command(ctx, python, []string{"-c", `
import socket, sys
try:
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    print("unix: allowed", flush=True)
except OSError as e:
    print("unix: denied", e.errno, flush=True)
a, b = socket.socketpair()
print("socketpair: ok", flush=True)
for line in sys.stdin:
    print("echo:" + line.strip(), flush=True)
`}, []string{"PATH=/usr/bin", "MCP_TOKEN=abc"}, "")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = strings.NewReader("hello\nworld\n")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	want := "unix: denied 1\nsocketpair: ok\necho:hello\necho:world\n"
	if string(out) != want {
		t.Errorf("output %q, want %q", out, want)
	}
	if bytes.Contains([]byte(strings.Join(cmd.Args, " ")), []byte("abc")) {
		t.Errorf("the environment is in bwrap's command line: %q", cmd.Args)
	}

	// A kernel needs AF_UNIX (ZeroMQ ipc): Start keeps it.
	got := x.py(t, "import socket; socket.socket(socket.AF_UNIX).close(); print('unix ok')")
	if !strings.Contains(got, "unix ok") {
		t.Errorf("AF_UNIX in a kernel: %q", got)
	}
	if _, err := x.Command(ctx, "/opt/not-visible/server", nil, nil, ""); err == nil || !strings.Contains(err.Error(), "not visible") {
		t.Errorf("Command of an invisible program = %v", err)
	}
}

func TestLandlock(t *testing.T) {
	t.Parallel()
	if landlockABI() < 1 {
		testenv.Missing(t, "Landlock (kernel ABI 0)")
	}
	code := `
attempt("signal-init", lambda: os.kill(1, 0))
attempt("ws", lambda: write("f.txt"))
attempt("tmp", lambda: write("/tmp/f"))
attempt("run", lambda: write(os.environ["RUN"] + "/f"))
`
	for _, on := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.Landlock = on
		x := newSbx(t, cfg, nil)
		var out, errb bytes.Buffer
		ctx := context.Background()
		p, err := x.Start(ctx, &kernel.Spec{Path: python, Args: []string{"-c", attemptPrelude + code},
			Env: append(x.env(t), "RUN="+x.run), Dir: x.ws, RunDir: x.run, Stdout: &out, Stderr: &errb})
		if err != nil {
			t.Fatal(err)
		}
		if err := waitFor(t, p, 30*time.Second); err != nil {
			t.Fatalf("%v: %s", err, errb.String())
		}
		// The file-system rules mirror the mounts, so they refuse nothing
		// more by themselves; the signal scope shows the domain exists:
		// only under Landlock is the init (outside the domain) out of
		// reach of kill(2).
		wantSignal := "signal-init ALLOWED"
		if on && landlockABI() >= 6 {
			wantSignal = "signal-init DENIED PermissionError EPERM"
		}
		for _, w := range []string{wantSignal, "ws ALLOWED", "tmp ALLOWED", "run ALLOWED"} {
			if !strings.Contains(out.String(), w) {
				t.Errorf("landlock=%v: %q missing from\n%s", on, w, out.String())
			}
		}
	}
}

func TestHostRootMode(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	ws := filepath.Join(parent, "ws")
	writeFile(t, filepath.Join(ws, "ok.txt"), "fine")
	writeFile(t, filepath.Join(parent, "secret.txt"), "TOPSECRET")
	cfg := DefaultConfig()
	cfg.RootMode = RootHost
	cfg.Filesystem.DenyRead = []string{".."} // contains the workspace
	x := newSbx(t, cfg, &Options{Workspace: ws})
	// A file of the host that anyone may read (root's home is private, and
	// as root the sandbox runs as an unprivileged uid).
	hostDir := hostHome(t)
	if runsAsRoot() {
		hostDir = worldReadableDir(t)
	}
	homeCanary := hostCanary(t, hostDir)
	tmpCanary := hostCanary(t, os.TempDir())
	x.attempts(t, "", []check{
		{"ws", `read("ok.txt")`, true, "fine"},
		{"host-file", fmt.Sprintf("read(%q)", homeCanary), true, "CANARY"},
		{"host-file-write", fmt.Sprintf("write(%q)", homeCanary), false, "EROFS"},
		{"parent-secret", fmt.Sprintf("read(%q)", filepath.Join(parent, "secret.txt")), false, ""},
		{"parent-list", fmt.Sprintf("os.listdir(%q)", parent), false, "EACCES"},
		{"tmp-canary", fmt.Sprintf("read(%q)", tmpCanary), false, "ENOENT"},
		{"run", `sorted(os.listdir("/run"))`, true, "['ipybox-sandbox']"},
		{"shadow", `read("/etc/shadow")`, false, ""},
		{"usr-write", `write("/usr/x")`, false, "EROFS"},
	})
}

// worldReadableDir returns a new directory outside /tmp (which the host
// root mode replaces) that everyone may read.
func worldReadableDir(t testing.TB) string {
	t.Helper()
	parent := "/var/lib"
	if !runsAsRoot() {
		parent = hostHome(t)
	}
	d, err := os.MkdirTemp(parent, "ipybox-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestPythonPrefixes(t *testing.T) {
	t.Parallel()
	needSandbox(t)
	// A pyenv shim (a shell script that needs pyenv) is replaced by the
	// interpreter it runs, and its prefix outside /usr is bound.
	shims, _ := filepath.Glob(filepath.Join(hostHome(t), ".pyenv", "shims", "python3"))
	// A venv in the workspace is run as is, and never executed on the
	// host: this one would leave a mark there.
	ws := t.TempDir()
	mark := filepath.Join(t.TempDir(), "ran-on-host")
	venv := filepath.Join(ws, ".ipybox", "venv")
	writeFile(t, filepath.Join(venv, "pyvenv.cfg"), "home = /usr/bin\ninclude-system-site-packages = true\n")
	writeFile(t, filepath.Join(venv, "bin", "python"), fmt.Sprintf("#!/bin/sh\ntouch %s 2>/dev/null\nexec /usr/bin/python3 \"$@\"\n", mark))
	if err := os.Chmod(filepath.Join(venv, "bin", "python"), 0o755); err != nil {
		t.Fatal(err)
	}
	x := newSbx(t, nil, &Options{Workspace: ws})
	paths := []string{filepath.Join(venv, "bin", "python"), python}
	paths = append(paths, shims...)
	for _, p := range paths {
		var out, errb bytes.Buffer
		pr := x.start(t, &out, &errb, p, "-c", "import sys; print(sys.prefix)")
		if err := waitFor(t, pr, 30*time.Second); err != nil {
			t.Errorf("%s: %v: %s", p, err, errb.String())
			continue
		}
		t.Logf("%s: prefix %s", p, strings.TrimSpace(out.String()))
	}
	if _, err := os.Stat(mark); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the workspace's venv python was executed on the host (%v)", err)
	}
}
