package ipybox_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestAttackContainerHardening: kernel code is hostile; inside its
// container it tries to regain root, write the image, find a Docker
// socket, read host files, reach another session, and change the
// registry. Each attempt must fail.
func TestAttackContainerHardening(t *testing.T) {
	testenv.NeedsDocker(t)
	ws := containerWorkspace(t)
	os.MkdirAll(filepath.Join(ws, ".ipybox"), 0o755)
	os.WriteFile(filepath.Join(ws, ".ipybox", "servers.json"), []byte(`{}`), 0o644)
	os.WriteFile(filepath.Join(ws, ".env"), []byte("TOKEN=hunter2\n"), 0o600)
	hostSecret := filepath.Join(t.TempDir(), "host-secret")
	os.WriteFile(hostSecret, []byte("host"), 0o644)
	ex := startContainer(t, nil, &ipybox.Options{WorkDir: ws})
	other := startContainer(t, nil, nil)
	otherSock := strings.TrimPrefix(cellText(t, other, "import os\nprint(os.environ['IPYBOX_TOOL_URL'])"), "unix://")
	if !strings.HasPrefix(otherSock, "/") {
		t.Fatalf("the other session's tool socket: %q", otherSock)
	}
	for _, tc := range []struct{ name, code, want string }{
		{"non-root user", "import os\nprint(os.getuid() != 0, os.getgid() != 0, os.geteuid() != 0)", "True True True"},
		{"setuid(0)", "import os\ntry:\n    os.setuid(0); print('root!')\nexcept PermissionError:\n    print('refused')", "refused"},
		{"no capabilities", "caps = {l.split(':')[0]: int(l.split()[1], 16) for l in open('/proc/self/status') if l.startswith('Cap')}\nprint(caps['CapEff'], caps['CapPrm'], caps['CapBnd'], caps['CapAmb'])", "0 0 0 0"},
		{"no-new-privileges", "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('NoNewPrivs')][0])", "1"},
		{"su does not make root", "import subprocess\nr = subprocess.run(['su', '-c', 'id -u'], input='', capture_output=True, text=True)\nprint(r.returncode != 0 and r.stdout.strip() != '0')", "True"},
		{"no user namespace", "import ctypes\nprint(ctypes.CDLL(None, use_errno=True).unshare(0x10000000))", "-1"},
		{"read-only root", "import os\nbad = []\nfor p in ['/etc/passwd', '/usr/bin/evil', '/evil', '/app/evil']:\n    try:\n        open(p, 'a').close(); bad.append(p)\n    except OSError:\n        pass\nprint(bad)", "[]"},
		{"tmpfs /tmp, nosuid", "open('/tmp/ok', 'w').write('x')\nm = [l.split() for l in open('/proc/mounts') if l.split()[1] == '/tmp'][0]\nprint(m[2], 'nosuid' in m[3], 'nodev' in m[3])", "tmpfs True True"},
		{"no docker socket anywhere", `import os, stat
found = []
for root, dirs, files in os.walk('/'):
    if root in ('/proc', '/sys', '/dev'):
        dirs[:] = []
        continue
    for f in files + dirs:
        p = os.path.join(root, f)
        try:
            if stat.S_ISSOCK(os.lstat(p).st_mode) and not p.startswith(os.environ['IPYBOX_TOOL_URL'][len('unix://'):].rsplit('/', 1)[0]):
                found.append(p)
        except OSError:
            pass
print(found, any('docker.sock' in l for l in open('/proc/self/mountinfo')))`, "[] False"},
		{"host files invisible", "import os\nprint(os.path.exists(" + pyStr(hostSecret) + "), os.path.exists(" + pyStr(filepath.Dir(hostSecret)) + "))", "False False"},
		{"other session invisible", "import os\nprint(os.path.exists(" + pyStr(otherSock) + "), os.path.exists(" + pyStr(filepath.Dir(otherSock)) + "), " +
			"any(" + pyStr(filepath.Dir(otherSock)) + " in open(f'/proc/{p}/cmdline').read() for p in os.listdir('/proc') if p.isdigit()))", "False False False"},
		{"run directory read-only", "import os, glob\nrd = os.environ['IPYBOX_TOOL_URL'][len('unix://'):].rsplit('/', 1)[0]\nbad = []\nfor p in glob.glob(rd + '/py/**/*.py', recursive=True)[:3] + [rd + '/tool.sock', rd + '/evil']:\n    try:\n        open(p, 'a').close(); bad.append(p)\n    except OSError:\n        pass\n    try:\n        os.rename(p, p + '.x'); bad.append('rename ' + p)\n    except OSError:\n        pass\nprint(bad)", "[]"},
		{"registry read-only", "import os\nbad = []\nfor f in [lambda: open('.ipybox/servers.json', 'w'), lambda: open('.ipybox/new.json', 'w'), lambda: os.rename('.ipybox', 'moved'), lambda: os.rmdir('.ipybox')]:\n    try:\n        f(); bad.append('ok')\n    except OSError:\n        pass\nprint(bad)", "[]"},
		{".env hidden", "print(repr(open('.env').read()))", "''"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cellText(t, ex, tc.code); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".ipybox", "servers.json")); string(b) != "{}" {
		t.Errorf("servers.json changed: %q", b)
	}
}

// TestAttackContainerLimits: a thread bomb stops at the pids limit and the
// kernel survives it; a memory hog is killed at the memory limit, which
// the next call reports as a death; with NoNetwork there is only loopback.
func TestAttackContainerLimits(t *testing.T) {
	testenv.NeedsDocker(t)
	ex := startContainer(t, &ipybox.ContainerConfig{Pids: 64, Memory: 256 << 20, NoNetwork: true}, nil)
	got := cellText(t, ex, `import threading, time
ev = threading.Event()
n = 0
try:
    for _ in range(1000):
        threading.Thread(target=ev.wait, daemon=True).start()
        n += 1
except RuntimeError:
    pass
ev.set()
print(n < 64, n > 0)`)
	if got != "True True" {
		t.Errorf("thread bomb: %q", got)
	}
	if got := cellText(t, ex, "import os\nprint(sorted(os.listdir('/sys/class/net')))"); got != "['lo']" {
		t.Errorf("network interfaces with NoNetwork: %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := ex.Execute(ctx, "x = bytearray(1 << 30)\nx[::4096] = b'\\x01' * (len(x) // 4096)", nil)
	if !errors.Is(err, ipybox.ErrKernelDied) {
		t.Fatalf("memory hog: %v", err)
	}
	if got := cellText(t, ex, "print('alive')"); !strings.HasSuffix(got, "alive") {
		t.Errorf("after the memory hog: %q", got)
	}
	// The default network is the bridge: outbound allowed (not exercised:
	// tests send nothing beyond this machine).
	open := startContainer(t, nil, nil)
	if got := cellText(t, open, "import os\nprint('eth0' in os.listdir('/sys/class/net'))"); got != "True" {
		t.Errorf("default network: %q", got)
	}
}

// TestAttackContainerAllowedDomains: with AllowedDomains the container has
// no network of its own; an allowed destination (a host loopback listener,
// allowed by its IP) is reached through the egress proxy, a denied one is
// refused by the proxy, and a direct connection has nowhere to go.
func TestAttackContainerAllowedDomains(t *testing.T) {
	testenv.NeedsDocker(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("reached " + r.URL.Path))
	}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	ex := startContainer(t, &ipybox.ContainerConfig{AllowedDomains: []string{"127.0.0.1", "example.invalid"}}, nil)
	fetch := `import os, urllib.request, urllib.error
os.environ['NO_PROXY'] = os.environ['no_proxy'] = ''
def fetch(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode()
    except urllib.error.HTTPError as e:
        return 'refused %d' % e.code
    except Exception as e:
        return type(e).__name__
`
	for _, tc := range []struct{ name, code, want string }{
		{"allowed IP through the proxy", "print(fetch('http://127.0.0.1:" + port + "/ok'))", "reached /ok"},
		{"other loopback address", "print(fetch('http://127.0.0.2:" + port + "/no'))", "refused 403"},
		{"name not allowed", "print(fetch('http://localhost:" + port + "/no'))", "refused 403"},
		{"direct, around the proxy", "import socket\ntry:\n    socket.create_connection(('127.0.0.1', " + port + "), timeout=3); print('connected')\nexcept OSError:\n    print('no route')", "no route"},
		{"no interface but loopback", "print(sorted(os.listdir('/sys/class/net')))", "['lo']"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cellText(t, ex, fetch+tc.code); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSandboxAllowedIPAndCIDR: the IP and CIDR forms of allowedDomains
// work with the bwrap sandbox too: a listed loopback address passes the
// proxy's private-address guard, an unlisted one does not.
func TestSandboxAllowedIPAndCIDR(t *testing.T) {
	testenv.NeedsTool(t, "bwrap")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("reached " + r.URL.Path))
	}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	cfg := ipybox.DefaultSandbox()
	cfg.Network.AllowedDomains = append(cfg.Network.AllowedDomains, "127.0.0.0/30")
	ex := start(t, &ipybox.Options{Sandbox: cfg})
	code := `import os, urllib.request, urllib.error
os.environ['NO_PROXY'] = os.environ['no_proxy'] = ''
def fetch(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode()
    except urllib.error.HTTPError as e:
        return 'refused %d' % e.code
print(fetch('http://127.0.0.1:` + port + `/in'), '|', fetch('http://127.0.0.9:` + port + `/out'))`
	if got := run(t, ex, code).Text; got != "reached /in | refused 403" {
		t.Errorf("got %q", got)
	}
}

// TestAttackContainerHostReadFiles: the workspace is shared with the host,
// whose tools read files there and act on them. From the container, kernel
// code cannot plant a git hook or fsmonitor, an .mcp.json, Claude Code or
// VS Code settings, nor read .env.* or a file a server config names as a
// secret, nor make a repository anywhere in the workspace (the guard in
// the container refuses it, as the sandbox's does), nor leave a setuid
// file.
func TestAttackContainerHostReadFiles(t *testing.T) {
	testenv.NeedsTool(t, "git")
	ws := containerWorkspace(t)
	if out, err := exec.Command("git", "init", "-q", ws).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	os.WriteFile(filepath.Join(ws, ".env.local"), []byte("TOKEN=hunter2\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "sa-key.json"), []byte(`{"private_key": "k"}`), 0o644)
	ex := startContainer(t, nil, &ipybox.Options{WorkDir: ws})
	register(t, ex, "creds", ipybox.ServerConfig{Command: mcptest.Build(t), Env: map[string]string{"GOOGLE_APPLICATION_CREDENTIALS": "sa-key.json"}})
	// As in the sandbox, a secret that a server config names is masked
	// from the next kernel start on.
	if err := ex.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := cellText(t, ex, `import os
bad = []
def attempt(what, f):
    try:
        f(); bad.append(what)
    except OSError:
        pass
attempt('git config', lambda: open('.git/config', 'a').write('[core]\n\tfsmonitor = touch /tmp/x\n'))
attempt('git hook', lambda: open('.git/hooks/pre-commit', 'w').write('#!/bin/sh\ntouch /tmp/x\n'))
attempt('.mcp.json', lambda: open('.mcp.json', 'w').write('{}'))
attempt('.claude', lambda: open('.claude/settings.json', 'w').write('{}'))
attempt('.vscode', lambda: open('.vscode/tasks.json', 'w').write('{}'))
attempt('rename .git', lambda: os.rename('.git', 'git-moved'))
attempt('new repository', lambda: os.makedirs('evil/.git/objects'))
attempt('deep vscode', lambda: os.makedirs('a/b/c/d/e/.vscode'))
attempt('setuid', lambda: (open('s', 'w').close(), os.chmod('s', 0o4755)))
print(bad, repr(open('.env.local').read()), repr(open('sa-key.json').read()))`)
	if got != "[] '' ''" {
		t.Errorf("got %q", got)
	}
	if err := ex.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(ws, "evil", ".git")); err == nil {
		t.Errorf("evil/.git, with core.pager, is still where git finds it")
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".git", "config")); strings.Contains(string(b), "fsmonitor") {
		t.Errorf(".git/config was changed: %s", b)
	}
}

// TestAttackContainerPlantedIpyboxLink: .ipybox is bound read-only into
// the container from the kernel-writable workspace; a link planted there
// (to a host folder the kernel must not see) stops the start instead of
// being followed by Docker. The registry loader refuses the link first
// (safefs); the launcher refuses it again before it binds the folder.
func TestAttackContainerPlantedIpyboxLink(t *testing.T) {
	img := testenv.NeedsDocker(t)
	ws := containerWorkspace(t)
	secret := t.TempDir()
	os.WriteFile(filepath.Join(secret, "host-only"), []byte("host"), 0o644)
	if err := os.Symlink(secret, filepath.Join(ws, ".ipybox")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ex, err := ipybox.Start(ctx, &ipybox.Options{WorkDir: ws, Container: &ipybox.ContainerConfig{Image: img}})
	if err == nil {
		defer ex.Close()
		res, _ := ex.Execute(ctx, "import os\nprint(os.listdir('.ipybox'))", nil)
		t.Fatalf("a container started with .ipybox linked to a host folder; the kernel sees %q", res.Text)
	}
	if !strings.Contains(err.Error(), ".ipybox") {
		t.Errorf("error %q, want one naming .ipybox", err)
	}
}

// TestAttackContainerMountFlags: every folder that the kernel writes in
// its container (the workspace, whoever owns it; the writable folders in
// it, such as its own packages; the binds, whoever owns them) is mounted
// nosuid,nodev, so that no set-id file or device that reaches it counts
// there; so is the kernel's own socket directory, and every other
// writable mount but Docker's own (/proc, /sys, /dev, /etc/hosts...).
// Before, a workspace or bind of a user other than root was bound with
// the flags of the host's mount, without either, and the socket
// directory still was.
func TestAttackContainerMountFlags(t *testing.T) {
	testenv.NeedsDocker(t)
	if os.Geteuid() != 0 {
		t.Skip("only root can give a bind nosuid,nodev (docs/container.md); the guard refuses set-id files either way")
	}
	for _, owner := range []string{"user", "root"} {
		t.Run("workspace of "+owner, func(t *testing.T) {
			ws := containerWorkspace(t)
			bindUser, bindRoot := t.TempDir(), t.TempDir()
			if err := os.Chown(bindUser, 1234, 1234); err != nil {
				t.Fatal(err)
			}
			if owner == "root" {
				os.Chown(ws, 0, 0)
			}
			pkg := filepath.Join(ws, ".ipybox", "packages", "p1")
			os.MkdirAll(pkg, 0o755)
			ex := startContainer(t, &ipybox.ContainerConfig{Binds: []ipybox.ContainerBind{
				{HostPath: bindUser, Path: "byuser"}, {HostPath: bindRoot, Path: "byroot"},
			}}, &ipybox.Options{WorkDir: ws, PackageDir: pkg})
			got := cellText(t, ex, `import os
bad = []
for l in open("/proc/self/mountinfo"):
    f = l.split()
    at, opts = f[4], f[5].split(",")
    docker = at.startswith(("/proc", "/sys", "/dev")) or at in ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf")
    if not docker and "rw" in opts and not ("nosuid" in opts and "nodev" in opts):
        bad.append(at + " " + f[5])
print(sorted(bad) or "none", len([l for l in open("/proc/self/mountinfo") if l.split()[4].startswith("/app")]))`)
			if !strings.HasPrefix(got, "none ") {
				t.Errorf("writable mounts without nosuid,nodev: %s", got)
			}
		})
	}
}
