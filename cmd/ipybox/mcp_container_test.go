package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/container"
	"github.com/ipybox/ipybox/internal/docker"
	"github.com/ipybox/ipybox/internal/testenv"
)

// containerDir returns a fresh directory the kernel's user can write:
// under root, that is container.MappedID (or uid, when given).
func containerDir(t *testing.T, uid int) string {
	t.Helper()
	d := t.TempDir()
	if os.Geteuid() == 0 {
		if uid == 0 {
			uid = container.MappedID
		}
		if err := os.Chown(d, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// containersOf lists the kernel containers that process pid owns.
func containersOf(t *testing.T, pid int) []string {
	var ids []string
	for _, c := range containerStates(t, pid) {
		ids = append(ids, c.ID)
	}
	return ids
}

// containerStates lists the kernel containers that process pid owns.
func containerStates(t *testing.T, pid int) []docker.Container {
	t.Helper()
	c, err := docker.New("")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	list, err := c.List(ctx, container.LabelKernel)
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	var out []docker.Container
	for _, ct := range list {
		if strings.HasPrefix(ct.Labels[container.LabelOwner], fmt.Sprintf("%s/%d/", host, pid)) {
			out = append(out, ct)
		}
	}
	return out
}

// TestMCPContainerFlags: every flag of seed 000, through a real MCP client
// session against `ipybox mcp --container-tag IMAGE`: the environment from
// --container-env-var and --container-env-file, binds under /app/,
// upload_file and download_file, reset keeping files, kernel death and
// restart, and no container left when the server ends.
func TestMCPContainerFlags(t *testing.T) {
	img := testenv.NeedsDocker(t)
	ws := containerDir(t, 0)
	cwd := t.TempDir()
	data := containerDir(t, 0)
	os.WriteFile(filepath.Join(data, "d.txt"), []byte("dataset"), 0o644)
	envFile := filepath.Join(t.TempDir(), "c.env")
	os.WriteFile(envFile, []byte("FROM_FILE=file\nOVERRIDDEN=file\n"), 0o600)
	os.WriteFile(filepath.Join(ws, ".env"), []byte("KERNEL_ENV_SECRETISH=x\nTOKEN=hunter2\n"), 0o600)
	share := containerDir(t, 0)

	cmd := exec.Command(os.Args[0], "mcp", "--workspace", ws, "--container-tag", img,
		"--container-env-var", "API_KEY=secret123", "--container-env-var", "OVERRIDDEN=var",
		"--container-env-file", envFile,
		"--container-bind", data+":datasets",
		"--container-bind", "models:models", // relative: to the current directory, created
		"--allowed-dir", share)
	cmd.Dir = cwd
	if os.Geteuid() == 0 {
		// The relative bind is created by ipybox (root); give it to the
		// kernel's user up front so that it can write it.
		os.Mkdir(filepath.Join(cwd, "models"), 0o755)
		os.Chown(filepath.Join(cwd, "models"), container.MappedID, container.MappedID)
	}
	cmd.Env = append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1")
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	cs := goClient(t, &mcp.CommandTransport{Command: cmd}, nil)

	got := runCell(t, cs, `import os
print(os.getcwd(), os.environ.get('API_KEY'), os.environ.get('FROM_FILE'), os.environ.get('OVERRIDDEN'), os.getuid() != 0)
print(open('/app/datasets/d.txt').read())
open('/app/models/m.bin', 'w').write('weights')
print(repr(open('/app/workspace/.env').read()))`)
	want := "/app/workspace secret123 file var True\ndataset\n''"
	if got != want {
		t.Errorf("cell: %q, want %q\n%s", got, want, stderr)
	}
	if b, err := os.ReadFile(filepath.Join(cwd, "models", "m.bin")); err != nil || string(b) != "weights" {
		t.Errorf("relative bind on the host: %q, %v", b, err)
	}
	// upload_file and download_file: host <-> /app/workspace.
	src := filepath.Join(share, "up.txt")
	os.WriteFile(src, []byte("uploaded"), 0o644)
	if out, isErr := callText(t, cs, "upload_file", map[string]any{"relpath": "sub/up.txt", "local_path": src}); isErr {
		t.Fatalf("upload_file: %s", out)
	}
	if got := runCell(t, cs, "print(open('/app/workspace/sub/up.txt').read())\n_ = open('down.txt', 'w').write('downloaded')"); got != "uploaded" {
		t.Errorf("uploaded file in the container: %q", got)
	}
	dst := filepath.Join(share, "down.txt")
	if out, isErr := callText(t, cs, "download_file", map[string]any{"relpath": "down.txt", "local_path": dst}); isErr {
		t.Fatalf("download_file: %s", out)
	}
	if b, _ := os.ReadFile(dst); string(b) != "downloaded" {
		t.Errorf("downloaded: %q", b)
	}
	// reset keeps files, drops state.
	runCell(t, cs, "kept = 1")
	if out, isErr := callText(t, cs, "reset", nil); isErr {
		t.Fatalf("reset: %s", out)
	}
	if got := runCell(t, cs, "print('kept' in globals(), open('down.txt').read())"); got != "False downloaded" {
		t.Errorf("after reset: %q", got)
	}
	// Death and restart.
	out, _ := callText(t, cs, "execute_ipython_cell", map[string]any{"code": "import os\nos._exit(1)"})
	if !strings.Contains(out, "died") {
		t.Errorf("death: %q", out)
	}
	if got := runCell(t, cs, "print(1 + 1)"); !strings.HasSuffix(got, "2") {
		t.Errorf("after death: %q", got)
	}
	// install_package says why not.
	if out, isErr := callText(t, cs, "install_package", map[string]any{"package_name": "six"}); !isErr || !strings.Contains(out, "belong in its image") {
		t.Errorf("install_package: %v %q", isErr, out)
	}
	pid := cmd.Process.Pid
	if n := len(containersOf(t, pid)); n < 1 {
		t.Errorf("the server owns %d containers while serving", n)
	}
	cs.Close()
	deadline := time.Now().Add(30 * time.Second)
	for len(containersOf(t, pid)) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if left := containersOf(t, pid); len(left) > 0 {
		t.Errorf("containers left after the server ended: %v\n%s", left, stderr)
	}
}

// TestContainerReapedAfterSIGKILL: an ipybox killed with SIGKILL leaves its
// container, which stops by itself (its lifeline ended); the next start
// reaps it by label.
func TestContainerReapedAfterSIGKILL(t *testing.T) {
	img := testenv.NeedsDocker(t)
	ws := containerDir(t, 0)
	cmd := exec.Command(os.Args[0], "exec", "--workspace", ws, "--container-tag", img, "-c", "print('up', flush=True)\nimport time\ntime.sleep(120)")
	cmd.Env = append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1")
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "up") && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	ids := containersOf(t, pid)
	if len(ids) != 1 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("containers of the running exec: %v\n%s", ids, out)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	// The container's watcher sees its lifeline end, and stops it.
	var left []docker.Container
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if left = containerStates(t, pid); len(left) != 1 || left[0].State != "running" {
			break
		}
	}
	// Stopped, and left for the next start to reap; or already reaped,
	// when another test's start (tests run in parallel) came first.
	if len(left) > 1 || len(left) == 1 && left[0].State == "running" {
		t.Fatalf("after SIGKILL: %+v (want the leftover stopped, or reaped)", left)
	}
	// The next start reaps it.
	stdout, stderr, code := runBinary(t, "", "exec", "--workspace", ws, "--container-tag", img, "-c", "print('next')")
	if code != 0 || stdout != "next\n" {
		t.Fatalf("next exec: %d %q %q", code, stdout, stderr)
	}
	if got := containersOf(t, pid); len(got) != 0 {
		t.Errorf("the leftover was not reaped: %v", got)
	}
}

// readmeImageCommand returns the README's docker run command for the
// image over stdio, with the image name replaced by img.
func readmeImageCommand(t *testing.T, img string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "docker run -i --rm ") {
			cmd, _, _ := strings.Cut(line, "#")
			cmd = strings.TrimSpace(cmd)
			if !strings.HasSuffix(cmd, " ipybox") {
				t.Fatalf("README's docker run command does not end with the image name: %q", cmd)
			}
			return strings.TrimSuffix(cmd, "ipybox") + img
		}
	}
	t.Fatal("README has no `docker run -i --rm ...` line")
	return ""
}

// imageCell is a cell that writes a file and prints who runs it: uid,
// gid, the capability sets and no-new-privileges.
const imageCell = `import os
open('made-in-container', 'w').write('x')
st = dict(l.split(':\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\t' in l)
print(os.getuid(), os.getgid(), st['CapEff'], st['CapBnd'].strip('0') or '0', st['NoNewPrivs'])`

// TestImageREADMECommand: the README's command for the image, run as
// written in a workspace owned by root (as root) and in one owned by uid
// 1234 (its $(id -u):$(id -g) is that user's), serves MCP over stdio;
// the kernel writes the workspace as its owner, with no capability, and
// no-new-privileges. Before, only uid 1000 could write it, and every
// cell failed.
func TestImageREADMECommand(t *testing.T) {
	img := testenv.NeedsDocker(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: a workspace owned by root, and one by uid 1234")
	}
	command := readmeImageCommand(t, img)
	for _, owner := range []int{0, 1234} {
		t.Run(strconv.Itoa(owner), func(t *testing.T) {
			t.Parallel()
			ws := t.TempDir()
			os.Chmod(ws, 0o755)
			os.Chown(ws, owner, owner)
			c := command
			if owner != 0 {
				// As that user would run it.
				c = strings.ReplaceAll(c, `"$(id -u):$(id -g)"`, fmt.Sprintf("%d:%d", owner, owner))
			}
			cmd := exec.Command("sh", "-c", c)
			cmd.Dir = ws
			stderr := &lockedBuffer{}
			cmd.Stderr = stderr
			cs := goClient(t, &mcp.CommandTransport{Command: cmd}, nil)
			got := runCell(t, cs, imageCell)
			// Root keeps uid 0 (only it may write what root owns) and loses
			// every capability; another uid has none to lose.
			want := fmt.Sprintf("%d %d 0000000000000000 0 1", owner, owner)
			if owner != 0 {
				want = fmt.Sprintf("%d %d 0000000000000000 ", owner, owner)
			}
			if !strings.HasPrefix(got, want) || !strings.HasSuffix(got, " 1") {
				t.Errorf("%s: cell printed %q, want %q… with no-new-privileges\n%s", c, got, want, stderr)
			}
			if uid, gid, ok := dirOwner(filepath.Join(ws, "made-in-container")); !ok || uid != owner || gid != owner {
				t.Errorf("the kernel's file on the host: owner %d:%d (%v), want %d:%d", uid, gid, ok, owner, owner)
			}
		})
	}
}

// TestImageWithoutUserFailsOnce: the image run without --user (as uid
// 1000) on a workspace that uid cannot write exits at once, with one line
// that gives the docker run command that fixes it; no retries, no
// warning every 2 s.
func TestImageWithoutUserFailsOnce(t *testing.T) {
	img := testenv.NeedsDocker(t)
	ws := containerDir(t, 0)
	if os.Geteuid() == 0 {
		os.Chown(ws, 0, 0)
		os.Chmod(ws, 0o755)
	}
	uid, gid, _ := dirOwner(ws)
	if uid == 1000 {
		t.Skip("the workspace belongs to uid 1000, the image's user")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", "run", "-i", "--rm", "-v", ws+":/app/workspace", img)
	stdin, _ := cmd.StdinPipe() // left open, as a client would
	defer stdin.Close()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	t0 := time.Now()
	err := cmd.Run()
	want := fmt.Sprintf("ipybox mcp: /app/workspace: not writable by this process (which runs as 1000:1000; the directory belongs to %d:%d, mode 0755); "+
		"run the container as the directory's owner: docker run -i --rm --user %d:%d -v \"$PWD\":/app/workspace ipybox\n", uid, gid, uid, gid)
	if code := cmd.ProcessState.ExitCode(); code != exitFail || stderr.String() != want {
		t.Errorf("exit %d (%v), stderr:\n%s\nwant:\n%s", code, err, stderr.String(), want)
	}
	if el := time.Since(t0); el > 30*time.Second {
		t.Errorf("took %v to fail", el)
	}
}

// TestExecContainerAllowedDomain: --allowed-domain with a container gives
// it no network but the egress proxy, which reaches what is allowed (a
// loopback listener, by its IP) and refuses the rest.
func TestExecContainerAllowedDomain(t *testing.T) {
	img := testenv.NeedsDocker(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("reached"))
	}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	code := `import os, urllib.request, urllib.error
os.environ['NO_PROXY'] = os.environ['no_proxy'] = ''
def fetch(url):
    try:
        return urllib.request.urlopen(url, timeout=10).read().decode()
    except urllib.error.HTTPError as e:
        return 'refused %d' % e.code
print(fetch('http://127.0.0.1:` + port + `/'), fetch('http://127.0.0.2:` + port + `/'), sorted(os.listdir('/sys/class/net')))`
	stdout, stderr, exit := runBinary(t, "", "exec", "--workspace", containerDir(t, 0), "--container-tag", img, "--allowed-domain", "127.0.0.1", "-c", code)
	if exit != 0 || stdout != "reached refused 403 ['lo']\n" {
		t.Errorf("exit %d, stdout %q, stderr %q", exit, stdout, stderr)
	}
}

// TestContainerRemovedOnSIGTERM: ipybox exec stopped by SIGTERM in the
// middle of a cell removes its container before it exits.
func TestContainerRemovedOnSIGTERM(t *testing.T) {
	img := testenv.NeedsDocker(t)
	cmd := exec.Command(os.Args[0], "exec", "--workspace", containerDir(t, 0), "--container-tag", img, "-c", "print('up', flush=True)\nimport time\ntime.sleep(120)")
	cmd.Env = append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1")
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "up") && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := len(containersOf(t, pid)); n != 1 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("containers of the running exec: %d\n%s", n, out)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("ipybox exec did not exit within 30 s of SIGTERM")
	}
	if left := containersOf(t, pid); len(left) != 0 {
		t.Errorf("containers left after SIGTERM: %v\n%s", left, out)
	}
}

// TestImageServesHTTP: the image serves streamable HTTP with a bearer
// token, published on 127.0.0.1 only, run as documented: --user of the
// owner of the workspace and of the token file, which is 0600 (here uid
// 1234; before, the image's uid 1000 could not read such a file).
func TestImageServesHTTP(t *testing.T) {
	img := testenv.NeedsDocker(t)
	owner := 1234
	if os.Geteuid() != 0 {
		owner = os.Getuid() // files of another uid need root to make
	}
	ws := t.TempDir()
	tokDir := t.TempDir()
	tok := fmt.Sprintf("test-token-%d-%032x", os.Getpid(), time.Now().UnixNano())
	os.WriteFile(filepath.Join(tokDir, "token"), []byte(tok), 0o600)
	for _, p := range []string{ws, tokDir, filepath.Join(tokDir, "token")} {
		os.Chown(p, owner, owner)
	}
	os.Chmod(ws, 0o755)
	name := fmt.Sprintf("ipybox-test-http-%d", os.Getpid())
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	if owner != 1000 {
		// Without --user, the image's uid 1000 may not read the token: it
		// says so at once, with the option that fixes it.
		out, err := exec.CommandContext(ctx, "docker", "run", "--rm", "-v", ws+":/app/workspace", "-v", filepath.Join(tokDir, "token")+":/ipybox/token:ro", img,
			"mcp", "--workspace", "/app/workspace", "--no-sandbox", "--http", "0.0.0.0:8080", "--auth-token-file", "/ipybox/token").CombinedOutput()
		want := fmt.Sprintf("ipybox mcp: --auth-token-file /ipybox/token: this process (uid 1000) may not read it (it belongs to %d:%d); run the container as its owner: add --user %d:%d to the docker run command\n", owner, owner, owner, owner)
		if err == nil || string(out) != want {
			t.Errorf("without --user: %v\n%s\nwant:\n%s", err, out, want)
		}
	}
	run := exec.CommandContext(ctx, "docker", "run", "--rm", "--name", name, "--user", fmt.Sprintf("%d:%d", owner, owner), "-p", "127.0.0.1::8080",
		"-v", ws+":/app/workspace", "-v", filepath.Join(tokDir, "token")+":/ipybox/token:ro", img,
		"mcp", "--workspace", "/app/workspace", "--no-sandbox", "--http", "0.0.0.0:8080", "--auth-token-file", "/ipybox/token")
	stderr, _ := run.StderrPipe()
	logs := &lockedBuffer{}
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	urlc := testenv.ServingURL(io.TeeReader(stderr, logs))
	go func() {
		run.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		exec.Command("docker", "rm", "-f", name).Run()
		<-exited
	})
	select {
	case <-urlc:
	case <-exited:
		t.Fatalf("the image exited instead of serving HTTP:\n%s", logs)
	case <-ctx.Done():
		t.Fatalf("the image did not start serving HTTP:\n%s", logs)
	}
	port, err := exec.CommandContext(ctx, "docker", "port", name, "8080/tcp").Output()
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimSpace(strings.Split(string(port), "\n")[0])
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("published on %q, want 127.0.0.1 only", addr)
	}
	url := "http://" + addr + "/mcp"
	resp, err := http.Post(url, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without the token: HTTP %d, want 401", resp.StatusCode)
	}
	cs := goClient(t, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: testenv.Bearer{Token: tok}}}, nil)
	if got := runCell(t, cs, "import os\nprint(6 * 7, os.getuid())"); got != fmt.Sprintf("42 %d", owner) {
		t.Errorf("cell over HTTP: %q", got)
	}
	if strings.Contains(logs.String(), "UNSANDBOXED") {
		t.Errorf("the image warns that kernels run unsandboxed, where the container is the boundary:\n%s", logs)
	}
}

// idmapMounts lists the idmapped mounts that ipybox process pid attached
// (their mount points, by name), and whether each is still mounted.
func idmapMounts(t *testing.T, pid int) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	ents, _ := os.ReadDir("/run/ipybox-idmap")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), strconv.Itoa(pid)+"-") {
			out[e.Name()] = false
		}
	}
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(info), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], "/run/ipybox-idmap/"+strconv.Itoa(pid)+"-") {
			out[filepath.Base(f[4])] = true
		}
	}
	return out
}

// TestExecContainerRootOwnedWorkspace: ipybox exec --container-tag, run
// by root on a workspace that root owns (as docs/container.md shows it:
// the current directory), works: the kernel runs as the unprivileged
// MappedID and writes the workspace through an idmapped mount, and its
// files land on disk as root's. Before, it failed, saying to chown the
// workspace. No mount is left after it, and the mounts of an ipybox
// killed with SIGKILL are reaped by the next start.
func TestExecContainerRootOwnedWorkspace(t *testing.T) {
	img := testenv.NeedsDocker(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ws := t.TempDir()
	os.Chmod(ws, 0o755)
	cell := "import os\nopen('f', 'w').write('x')\nos.mkdir('d')\nprint(os.getuid(), os.getcwd())"
	cmd := exec.Command(os.Args[0], "exec", "--container-tag", img, "-c", cell)
	cmd.Dir = ws
	cmd.Env = append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1")
	out, err := cmd.CombinedOutput()
	if want := fmt.Sprintf("%d /app/workspace\n", container.MappedID); err != nil || string(out) != want {
		t.Fatalf("exec: %v\n%s\nwant %q", err, out, want)
	}
	for _, name := range []string{"f", "d"} {
		if uid, gid, ok := dirOwner(filepath.Join(ws, name)); !ok || uid != 0 || gid != 0 {
			t.Errorf("%s on the host: owner %d:%d (%v), want root's", name, uid, gid, ok)
		}
	}
	if left := idmapMounts(t, cmd.Process.Pid); len(left) != 0 {
		t.Errorf("mounts left after exec: %v", left)
	}

	// SIGKILLed mid-cell: its mount stays until the next start reaps it.
	killed := exec.Command(os.Args[0], "exec", "--workspace", ws, "--container-tag", img, "-c", "print('up', flush=True)\nimport time\ntime.sleep(120)")
	killed.Env = append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1")
	kout := &lockedBuffer{}
	killed.Stdout, killed.Stderr = kout, kout
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(kout.String(), "up") && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	pid := killed.Process.Pid
	mounts := idmapMounts(t, pid)
	killed.Process.Kill()
	killed.Wait()
	if len(mounts) != 1 {
		t.Fatalf("mounts of the running exec: %v\n%s", mounts, kout)
	}
	if m := idmapMounts(t, pid); len(m) != 1 {
		t.Fatalf("after SIGKILL: %v (want the mount left behind)", m)
	}
	if stdout, stderr, code := runBinary(t, "", "exec", "--workspace", ws, "--container-tag", img, "-c", "print('next')"); code != 0 || stdout != "next\n" {
		t.Fatalf("next exec: %d %q %q", code, stdout, stderr)
	}
	if m := idmapMounts(t, pid); len(m) != 0 {
		t.Errorf("the next start did not reap the killed exec's mount: %v", m)
	}
}

// rootAttackCell is kernel code, run as root in the image, that tries to
// take over what the server or a helper runs next: replace
// /usr/local/bin/ipybox (a rename, a write, a truncation, a link beside
// it), write /etc/passwd and a module of the image's Python, make a folder
// in /usr/local/bin, and signal the server (pid 1), the fork server and
// every other process outside its own group.
const rootAttackCell = `import os, signal
got = []
def attempt(name, f):
    try:
        f(); got.append(name)
    except OSError:
        pass
attempt("rename ipybox", lambda: os.rename("/usr/local/bin/ipybox", "/usr/local/bin/ipybox.old"))
attempt("write ipybox", lambda: open("/usr/local/bin/ipybox", "r+b").close())
attempt("truncate ipybox", lambda: os.truncate("/usr/local/bin/ipybox", 0))
attempt("new file beside ipybox", lambda: open("/usr/local/bin/ipybox2", "w").close())
attempt("symlink beside ipybox", lambda: os.symlink("/tmp/x", "/usr/local/bin/ipybox3"))
attempt("mkdir in /usr/local/bin", lambda: os.mkdir("/usr/local/bin/d"))
attempt("write /etc/passwd", lambda: open("/etc/passwd", "a").close())
attempt("new file in /etc", lambda: open("/etc/ld.so.preload", "w").close())
attempt("write a module of the image's Python", lambda: open("/usr/lib/python3/dist-packages/zmq/__init__.py", "a").close())
mine = os.getpgid(0)
for p in os.listdir("/proc"):
    if p.isdigit() and int(p) != os.getpid():
        try:
            if os.getpgid(int(p)) == mine:
                continue
        except OSError:
            continue
        attempt("signal " + p + " " + open("/proc/%s/cmdline" % p, "rb").read()[:40].replace(b"\0", b" ").decode(errors="replace"), lambda: os.kill(int(p), 0))
open("made-in-container", "w").write("x")
print(os.getuid(), sorted(got))`

// TestImageRootKernelConfined attacks the image run as root (the README's
// command, as root, on a workspace of root's): the kernel is uid 0 beside
// the server, with no capabilities, yet it must not replace what the
// server or a helper runs next, nor signal them. Before, it renamed
// /usr/local/bin/ipybox, wrote /etc/passwd, and could signal the server.
// It still writes the workspace, its files landing as root's.
func TestImageRootKernelConfined(t *testing.T) {
	img := testenv.NeedsDocker(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: a workspace owned by root")
	}
	ws := t.TempDir()
	os.Chmod(ws, 0o755)
	cmd := exec.Command("sh", "-c", readmeImageCommand(t, img))
	cmd.Dir = ws
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	cs := goClient(t, &mcp.CommandTransport{Command: cmd}, nil)
	for i := range 2 { // the first kernel, and one after a reset
		if got := runCell(t, cs, rootAttackCell); got != "0 []" {
			t.Errorf("kernel %d, as root in the image, did: %s; want nothing\n%s", i+1, got, stderr)
		}
		if uid, _, ok := dirOwner(filepath.Join(ws, "made-in-container")); !ok || uid != 0 {
			t.Errorf("the kernel's file in the workspace: owner %d (%v), want root's", uid, ok)
		}
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "reset"})
		if err != nil || res.IsError {
			t.Fatalf("reset: %v %+v", err, res)
		}
	}
	out, err := exec.Command("docker", "run", "--rm", "--user", "0:0", img, "doctor").CombinedOutput()
	if !strings.Contains(string(out), "kernels as root are confined by Landlock") || strings.Contains(string(out), "seccomp") {
		t.Errorf("ipybox doctor in the image as root (%v):\n%s\nwant the image's protections, not the sandbox's", err, out)
	}
}
