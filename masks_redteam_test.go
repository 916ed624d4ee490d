package ipybox_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/testenv"
)

func readable(t *testing.T, ex *ipybox.Executor, rel string) string {
	t.Helper()
	return strings.TrimSpace(run(t, ex, "try:\n    print(open("+pyStr(rel)+").read())\nexcept OSError as e:\n    print('DENIED', type(e).__name__)").Text)
}

// TestRedteamPoolEnvAfterStart: a pool kernel is started before the
// session that gets it exists; a .env file the host writes in the meantime
// (at the root, and in a folder) must be masked in the kernel handed out.
func TestRedteamPoolEnvAfterStart(t *testing.T) {
	t.Parallel()
	testenv.NeedsTool(t, "bwrap")
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, "app"), 0o755)
	pool := ipybox.NewPool(1, &ipybox.Options{WorkDir: ws, Sandbox: ipybox.DefaultSandbox(), Python: testenv.NeedsPython(t)})
	t.Cleanup(func() { pool.Close() })
	for deadline := time.Now().Add(60 * time.Second); pool.Ready() < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the pool did not fill within 60s")
		}
	}
	const secret = "sk-pool-5555555555"
	for _, rel := range []string{".env", "app/.env", "app/.env.production"} {
		if err := os.WriteFile(filepath.Join(ws, rel), []byte("KEY="+secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ex, err := pool.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	for _, rel := range []string{".env", "app/.env", "app/.env.production"} {
		if got := readable(t, ex, rel); strings.Contains(got, secret) {
			t.Errorf("the pooled kernel, started before the host wrote %s, reads it: %q", rel, got)
		}
	}
}

// TestRedteamHardLinkBeforeRegistration: kernel code makes a hard link to
// a workspace file before a server naming it is registered (the file holds
// nothing yet, or an old key). After registration the host puts the real
// key in the file (in place), and the session is reset: the file is masked,
// and so must be its other names. The host looks for them with a walk of
// the workspace that gives up after 200,000 entries and cannot see past
// PATH_MAX, and a link it does not find is only logged: a link beyond
// either reads the key.
func TestRedteamHardLinkBeforeRegistration(t *testing.T) {
	t.Parallel()
	hardLinkBeforeRegistration(t, false)
}

// TestRedteamHardLinkPastWalkBudget: the same, in a workspace that kernel
// code first filled with 200,001 names (sockets: bind makes names without
// the guard, so quickly) that come before the links in the walk's order.
func TestRedteamHardLinkPastWalkBudget(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("makes 200,001 names")
	}
	hardLinkBeforeRegistration(t, true)
}

func hardLinkBeforeRegistration(t *testing.T, inflate bool) {
	ws := t.TempDir()
	key := filepath.Join(ws, "sa-key.json")
	os.WriteFile(key, []byte("placeholder"), 0o600)
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws})
	if inflate {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		_, err := ex.Execute(ctx, `import os, socket
for d in range(201):
    os.makedirs("aaa/%03d" % d)
    for i in range(1000):
        s = socket.socket(socket.AF_UNIX); s.bind("aaa/%03d/%04d" % (d, i)); s.close()`, nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	run(t, ex, `import os
os.link("sa-key.json", "notes.txt")
os.mkdir("deep"); os.chdir("deep")
for i in range(22):
    os.mkdir("d" * 200); os.chdir("d" * 200)
os.link(os.path.join(`+pyStr(ws)+`, "sa-key.json"), "far.txt")
os.chdir(`+pyStr(ws)+`)`)
	cfg := testmcpStdio(t)
	cfg.Env = map[string]string{"GOOGLE_APPLICATION_CREDENTIALS": "sa-key.json"}
	register(t, ex, "creds", cfg)
	const secret = "sk-real-key-3333333333"
	f, err := os.OpenFile(key, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(secret)
	f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := ex.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if got := readable(t, ex, "sa-key.json"); strings.Contains(got, secret) {
		t.Fatalf("the named file itself is readable: %q", got)
	}
	if got := readable(t, ex, "notes.txt"); strings.Contains(got, secret) {
		t.Errorf("a hard link that kernel code made before the registration (inflated workspace: %v) reads the key: %q", inflate, got)
	}
	got := strings.TrimSpace(run(t, ex, `import os
os.chdir("deep")
for i in range(22):
    os.chdir("d" * 200)
try:
    print(open("far.txt").read())
except OSError as e:
    print("DENIED", type(e).__name__)
os.chdir(`+pyStr(ws)+`)`).Text)
	if strings.Contains(got, secret) {
		t.Errorf("a hard link deeper than PATH_MAX, made before the registration, reads the key: %q", got)
	}
}

// TestRedteamEnvWrittenWhileRunning: the host (a person, or a tool that
// writes credentials) makes .env files while a sandboxed kernel runs: at
// the root, where the docs promise a placeholder keeps one from appearing
// unmasked, and in a folder (app/.env, app/.env.local), which exist only
// after the kernel's start. It fails if the running kernel reads any.
func TestRedteamEnvWrittenWhileRunning(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, "app"), 0o755)
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws})
	run(t, ex, "pass")
	const secret = "sk-live-6666666666"
	for _, rel := range []string{".env", "app/.env", "app/.env.local"} {
		f, err := os.OpenFile(filepath.Join(ws, rel), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			t.Logf("host cannot write %s: %v", rel, err)
			continue
		}
		f.WriteString("KEY=" + secret + "\n")
		f.Close()
	}
	for _, rel := range []string{".env", "app/.env", "app/.env.local"} {
		if got := readable(t, ex, rel); strings.Contains(got, secret) {
			t.Errorf("the running kernel reads %s, written after its start: %q", rel, got)
		}
	}
}
