package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/testenv"
)

// serverFilesSideCell is kernel code that goes after the server's files in
// /ipybox by the paths TestAttackImageServerFiles does not take: the
// server's process in /proc (its working directory, root, descriptors,
// environment and command line), descriptors the kernel inherited, an
// O_PATH descriptor and what may be done through it (openat, a link
// through /proc/self/fd), a mount namespace of its own, and the
// metadata of the files, which Landlock does not guard (mode, owner,
// times, extended attributes). CFG and STATE are as in serverFilesCell.
const serverFilesSideCell = `import os, ctypes, subprocess
cfg, state = CFG, STATE
files = [cfg + "/approvals.policy", cfg + "/approvals.jsonl", cfg + "/oauth-tokens.json", cfg, state, "/ipybox"]
got = []
def attempt(name, f):
    try:
        r = f()
        if r is None or r:
            got.append(name)
    except (OSError, subprocess.SubprocessError):
        pass
server = [p for p in os.listdir("/proc") if p.isdigit() and b"mcp" in open("/proc/%s/cmdline" % p, "rb").read().split(b"\0")[1:2]]
for p in server:
    attempt("server's cwd", lambda: os.listdir("/proc/%s/cwd" % p) is not None)
    attempt("server's root", lambda: "SECRET" in open("/proc/%s/root%s/oauth-tokens.json" % (p, cfg)).read())
    attempt("server's descriptors", lambda: [os.readlink("/proc/%s/fd/%s" % (p, fd)) for fd in os.listdir("/proc/%s/fd" % p)])
    attempt("server's environment", lambda: open("/proc/%s/environ" % p, "rb").read())
    attempt("server's memory", lambda: open("/proc/%s/mem" % p, "rb").read(1))
    attempt("a secret in the server's command line", lambda: b"SECRET" in open("/proc/%s/cmdline" % p, "rb").read())
def inherited():
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink("/proc/self/fd/" + fd).startswith("/ipybox"):
                return True
        except OSError:
            pass
    return False
attempt("an inherited descriptor into /ipybox", inherited)
def opath(name):
    return os.open(name, os.O_PATH)
attempt("openat through an O_PATH folder", lambda: os.read(os.open("oauth-tokens.json", os.O_RDONLY, dir_fd=opath(cfg)), 100))
attempt("reopen an O_PATH file through /proc/self/fd", lambda: os.read(os.open("/proc/self/fd/%d" % opath(cfg + "/oauth-tokens.json"), os.O_RDONLY), 100))
attempt("link an O_PATH file through /proc/self/fd", lambda: os.link("/proc/self/fd/%d" % opath(cfg + "/oauth-tokens.json"), "/tmp/linked", follow_symlinks=True))
attempt("a mount namespace of its own", lambda: subprocess.run(["unshare", "-Urm", "sh", "-c", "mount -t tmpfs x /ipybox && touch /ipybox/x"], check=True, capture_output=True))
for f in files:
    attempt("chmod " + f, lambda: os.chmod(f, 0o777))
    attempt("chown " + f, lambda: os.chown(f, 4321, 4321))
    attempt("utime " + f, lambda: os.utime(f, (0, 0)))
    attempt("setxattr " + f, lambda: os.setxattr(f, "user.ipybox", b"x"))
    attempt("setxattr trusted " + f, lambda: os.setxattr(f, "trusted.ipybox", b"x"))
print(os.getuid(), len(server), sorted(got))`

// TestAttackImageServerFilesSideways attacks the server's files in the
// image's /ipybox by every way round Landlock's file rights that
// TestAttackImageServerFiles leaves out (serverFilesSideCell), as root
// and as uid 1234; then, seen from outside every Landlock domain, the
// files' owners are as the server left them.
//
// knownOpen: Landlock does not guard a file's metadata, and kernels share
// the server's uid, so kernel code changes the mode and the times of the
// server's files and folders in /ipybox (chmod, utime: both users). As
// uid 1234, a config folder of mode 000 makes the server's approval
// audit log unwritable (the server warns and runs the call unlogged) and
// its policy unreadable (every call is then asked about). Not fixed here:
// the test logs these and fails on any other attack that succeeds.
func TestAttackImageServerFilesSideways(t *testing.T) {
	img := testenv.NeedsDocker(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: a workspace owned by root, and one chowned to 1234")
	}
	cfg := imageConfigDir(t, img)
	state := filepath.Join(filepath.Dir(cfg), "ipybox-state")
	cell := strings.NewReplacer("CFG", pyQuote(cfg), "STATE", pyQuote(state)).Replace(serverFilesSideCell)
	seed := fmt.Sprintf(`umask 077 && mkdir -p %[1]s && echo '# seeded' >%[1]s/approvals.policy && echo '{}' >%[1]s/approvals.jsonl && `+
		`echo '{"marker": "SECRET"}' >%[1]s/oauth-tokens.json && exec ipybox mcp --workspace /app/workspace --no-sandbox --state-dir %[2]s`, cfg, state)
	meta := "stat -c '%n %u %g' " + strings.Join([]string{cfg + "/approvals.policy", cfg + "/approvals.jsonl", cfg + "/oauth-tokens.json", cfg, state, "/ipybox"}, " ")
	for _, user := range []string{"0:0", "1234:1234"} {
		t.Run("user "+user, func(t *testing.T) {
			ws := t.TempDir()
			os.Chmod(ws, 0o755)
			if user != "0:0" {
				if err := os.Chown(ws, 1234, 1234); err != nil {
					t.Fatal(err)
				}
			}
			name := fmt.Sprintf("ipybox-attack-sideways-%d-%s", os.Getpid(), strings.ReplaceAll(user, ":", "-"))
			cmd := exec.Command("docker", "run", "-i", "--rm", "--name", name, "--user", user, "-v", ws+":/app/workspace",
				"--entrypoint", "sh", img, "-c", seed)
			stderr := &lockedBuffer{}
			cmd.Stderr = stderr
			cs := goClient(t, &mcp.CommandTransport{Command: cmd}, nil)
			runCell(t, cs, "print(1)") // the state folder exists
			before, err := exec.Command("docker", "exec", name, "sh", "-c", meta).CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v: %s", meta, err, before)
			}
			got := runCell(t, cs, cell)
			var open []string
			for _, a := range strings.Split(strings.Trim(strings.SplitN(got+"  ", " ", 3)[2], " []"), ", ") {
				a = strings.Trim(a, "'")
				if a == "" {
					continue
				}
				if verb, _, _ := strings.Cut(a, " "); verb == "chmod" || verb == "utime" {
					open = append(open, a) // knownOpen
					continue
				}
				t.Errorf("kernel code in the image as %s: %s", user, a)
			}
			if !strings.HasPrefix(got, strings.Split(user, ":")[0]+" 1 ") {
				t.Errorf("kernel code in the image as %s: %s; want its uid and the server found\n%s", user, got, stderr)
			}
			if len(open) > 0 {
				t.Logf("knownOpen (not fixed; see the doc comment): %v", open)
			}
			after, err := exec.Command("docker", "exec", name, "sh", "-c", meta).CombinedOutput()
			if err != nil || string(after) != string(before) {
				t.Errorf("the server's files after the attack (%v):\n%s\nbefore:\n%s", err, after, before)
			}
			cs.Close()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				exec.Command("docker", "kill", name).Run()
				t.Fatalf("the server did not end within 60 s of its stdin's end\n%s", stderr)
			}
		})
	}
}
