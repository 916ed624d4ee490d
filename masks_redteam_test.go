package ipybox_test

import (
	"context"
	"fmt"
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
// a file before a server that names the file as a secret is registered;
// after the next start the file is masked, and its other name would show
// the content. Kernel code cannot make the link (the guard refuses hard
// links in the workspace), shallow or deeper than PATH_MAX.
func TestRedteamHardLinkBeforeRegistration(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "sa-key.json"), []byte("placeholder"), 0o600)
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws})
	got := run(t, ex, `import os
def attempt(name, f):
    try:
        f(); print(name, "MADE")
    except OSError as e:
        print(name, "refused", type(e).__name__)
attempt("shallow", lambda: os.link("sa-key.json", "notes.txt"))
os.mkdir("deep"); os.chdir("deep")
try:
    for i in range(22):
        os.mkdir("d" * 200); os.chdir("d" * 200)
except OSError:
    pass
attempt("deep", lambda: os.link(os.path.join(`+pyStr(ws)+`, "sa-key.json"), "far.txt"))
os.chdir(`+pyStr(ws)+`)`).Text
	if strings.Contains(got, "MADE") {
		t.Errorf("kernel code made a hard link in the workspace: %q", got)
	}
}

// TestRedteamHardLinkPastWalkBudget: a hard link to a secret file that the
// user made, out of the search's reach (past its 200,000 entries): the
// sandbox refuses to start, saying which file has other names, rather than
// start with one of them unmasked.
func TestRedteamHardLinkPastWalkBudget(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("makes 200,001 names")
	}
	ws := t.TempDir()
	key := filepath.Join(ws, "sa-key.json")
	os.WriteFile(key, []byte("sk-real-key-3333333333"), 0o600)
	for d := range 201 {
		dir := filepath.Join(ws, "aaa", fmt.Sprintf("%03d", d))
		os.MkdirAll(dir, 0o755)
		for i := range 1000 {
			os.WriteFile(filepath.Join(dir, fmt.Sprintf("%04d", i)), nil, 0o644)
		}
	}
	if err := os.Link(key, filepath.Join(ws, "zzz-notes.txt")); err != nil {
		t.Fatal(err)
	}
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws})
	cfg := testmcpStdio(t)
	cfg.Env = map[string]string{"GOOGLE_APPLICATION_CREDENTIALS": "sa-key.json"}
	register(t, ex, "creds", cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err := ex.Reset(ctx)
	if err == nil {
		if got := readable(t, ex, "zzz-notes.txt"); strings.Contains(got, "sk-real-key") {
			t.Fatalf("a hard link past the search's reach reads the key: %q", got)
		}
		return
	}
	if !strings.Contains(err.Error(), "other name") {
		t.Fatalf("Reset = %v; want a refusal that names the file's other names", err)
	}
}

// TestRedteamEnvWrittenWhileRunning: the host (a person, or a tool that
// writes credentials) makes .env files while a sandboxed kernel runs: at
// the root and in a folder (app/.env, app/.env.local). Masks are taken at
// each start (docs/sandbox.md says so): the running kernel may read them,
// the next start must not.
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := ex.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{".env", "app/.env", "app/.env.local"} {
		if got := readable(t, ex, rel); strings.Contains(got, secret) {
			t.Errorf("the kernel started after %s was written reads it: %q", rel, got)
		}
	}
}
