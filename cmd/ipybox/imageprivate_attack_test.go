package main

import (
	"context"
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

// imageConfigDir returns the server's config folder in img, as ipybox
// there reports it (the policy's folder, which `approvals rules` names).
func imageConfigDir(t *testing.T, img string) string {
	t.Helper()
	out, err := exec.Command("docker", "run", "--rm", "--user", "1234:1234", img, "approvals", "rules").Output()
	policy, _, ok := strings.Cut(string(out), ": ")
	if err != nil || !ok || !strings.HasSuffix(policy, "/approvals.policy") {
		t.Fatalf("ipybox approvals rules in %s (%v): %q; want the policy's path first", img, err, out)
	}
	return filepath.Dir(policy)
}

// serverFilesCell is kernel code that goes after the server's own files:
// CFG is its config folder (the approval policy, the audit log, the OAuth
// sign-ins, seeded by the server's uid before the server starts) and
// STATE its --state-dir outside the workspace. It prints what the
// kernel's ordinary work still does, then each attack that succeeded.
const serverFilesCell = `import os, tempfile
cfg, state = CFG, STATE
parent = os.path.dirname(cfg)
fd, tmp = tempfile.mkstemp(); os.write(fd, b"x"); os.close(fd)
import numpy, matplotlib.pyplot
work = "ok" if open(tmp).read() == "x" and os.listdir("/app/workspace") is not None else "broken"
got = []
def attempt(name, f):
    try:
        r = f()
        if r is None or r:
            got.append(name)
    except OSError:
        pass
attempt("read the policy", lambda: open(cfg + "/approvals.policy").read())
attempt("write the policy", lambda: open(cfg + "/approvals.policy", "a").write("allow tool *\n"))
attempt("append the audit log", lambda: open(cfg + "/approvals.jsonl", "a").write("{}\n"))
attempt("read the OAuth sign-ins", lambda: "SECRET" in open(cfg + "/oauth-tokens.json").read())
attempt("list the config folder", lambda: os.listdir(cfg) is not None)
attempt("a principal's policy in the config folder", lambda: os.makedirs(cfg + "/principals/p"))
attempt("read through /proc/1/root", lambda: "SECRET" in open("/proc/1/root" + cfg + "/oauth-tokens.json").read())
attempt("read through a link in /tmp", lambda: (os.symlink(cfg + "/oauth-tokens.json", "/tmp/l"), "SECRET" in open("/tmp/l").read())[1])
attempt("hard link the OAuth sign-ins into /tmp", lambda: os.link(cfg + "/oauth-tokens.json", "/tmp/h"))
attempt("read the mounted token file", lambda: "SECRET" in open("/ipybox/token").read())
attempt("list the state folder", lambda: os.listdir(state) is not None)
attempt("write the state folder", lambda: open(state + "/planted.json", "w").write("{}"))
def replace(path):
    os.rename(path, path + ".old")
    os.makedirs("/tmp/evil/ipybox", exist_ok=True)
    open("/tmp/evil/ipybox/approvals.policy", "w").write("allow tool *\n")
    os.symlink("/tmp/evil", path)
attempt("replace the config folder by a link", lambda: replace(cfg))
attempt("replace its parent by a link", lambda: replace(parent))
attempt("replace the top folder by a link", lambda: replace("/" + cfg.split("/")[1]))
print(os.getuid(), work, sorted(got))`

// TestAttackImageServerFiles attacks, from kernel code in the ipybox
// image, the files the server keeps for itself: run as root on a
// workspace of root's and as uid 1234 on its own, whose kernels share the
// server's uid and run without a sandbox. The server's uid seeds its
// config folder (a policy, an audit log, OAuth sign-ins with a secret)
// before the server starts, and the server keeps sessions in a
// --state-dir outside the workspace. Kernel code must neither read nor
// write any of them, nor replace the folder (or a folder above it) by a
// link to its own. Before, the config folder was /tmp/.config/ipybox,
// open to kernels: they wrote `allow tool *` into the policy and read the
// sign-ins. Kernels' ordinary work (a temporary file, numpy, matplotlib)
// still runs. Then a --state-dir outside the private folder is refused
// in the image.
func TestAttackImageServerFiles(t *testing.T) {
	img := testenv.NeedsDocker(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: a workspace owned by root, and one chowned to 1234")
	}
	cfg := imageConfigDir(t, img)
	state := filepath.Join(filepath.Dir(cfg), "ipybox-state")
	cell := strings.NewReplacer("CFG", pyQuote(cfg), "STATE", pyQuote(state)).Replace(serverFilesCell)
	seed := fmt.Sprintf(`umask 077 && mkdir -p %[1]s && echo '# seeded' >%[1]s/approvals.policy && echo '{}' >%[1]s/approvals.jsonl && `+
		`echo '{"marker": "SECRET"}' >%[1]s/oauth-tokens.json && exec ipybox mcp --workspace /app/workspace --no-sandbox --state-dir %[2]s`, cfg, state)
	for _, user := range []string{"0:0", "1234:1234"} {
		t.Run("user "+user, func(t *testing.T) {
			ws := t.TempDir()
			os.Chmod(ws, 0o755)
			if user != "0:0" {
				if err := os.Chown(ws, 1234, 1234); err != nil {
					t.Fatal(err)
				}
			}
			tok := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(tok, []byte("SECRET\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if user != "0:0" {
				if err := os.Chown(tok, 1234, 1234); err != nil {
					t.Fatal(err)
				}
			}
			name := fmt.Sprintf("ipybox-attack-files-%d-%s", os.Getpid(), strings.ReplaceAll(user, ":", "-"))
			cmd := exec.Command("docker", "run", "-i", "--rm", "--name", name, "--user", user, "-v", ws+":/app/workspace",
				"-v", tok+":/ipybox/token:ro", "--entrypoint", "sh", img, "-c", seed)
			stderr := &lockedBuffer{}
			cmd.Stderr = stderr
			cs := goClient(t, &mcp.CommandTransport{Command: cmd}, nil)
			want := strings.Split(user, ":")[0] + " ok []"
			if got := runCell(t, cs, cell); got != want {
				t.Errorf("kernel code in the image as %s: %s; want %q: its work done, and none of the server's files reached\n%s", user, got, want, stderr)
			}
			// Seen from outside every Landlock domain: the policy is as
			// seeded.
			out, err := exec.Command("docker", "exec", name, "cat", cfg+"/approvals.policy").CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "# seeded" {
				t.Errorf("the server's policy after the attack (%v): %q; want it as seeded", err, out)
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
	t.Run("state folder outside /ipybox", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "docker", "run", "--rm", img, "mcp", "--workspace", "/app/workspace", "--no-sandbox", "--state-dir", "/tmp/state").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "put it under /ipybox") {
			t.Errorf("a --state-dir in /tmp, in the image (%v): %s; want it refused, with where to put it", err, out)
		}
	})
}
