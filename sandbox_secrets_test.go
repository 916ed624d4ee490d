package ipybox_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
)

// TestAttackSandboxedKernelSecrets: the sandboxed kernel cannot read the
// workspace's secrets (issue 18), while the host still uses them.
func TestAttackSandboxedKernelSecrets(t *testing.T) {
	secret := "tok-" + strings.Repeat("7", 12)
	ws := t.TempDir()
	for name, content := range map[string]string{
		".env":              "TOKEN=" + secret + "\n",
		".env.local":        "OTHER=" + secret + "\n",
		"keys/service.json": `{"private_key": "` + secret + `"}`,
	} {
		p := filepath.Join(ws, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A hard link made before the session.
	if err := os.Link(filepath.Join(ws, ".env"), filepath.Join(ws, "notes.txt")); err != nil {
		t.Fatal(err)
	}
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws, Approver: ipybox.ApproveAll, DotEnv: map[string]string{"TOKEN": secret}})
	// A server whose config names a credentials file in the workspace and
	// takes its token from .env; registering it writes servers.json.
	cfg := testmcpStdio(t)
	cfg.Env = map[string]string{"GOOGLE_APPLICATION_CREDENTIALS": "keys/service.json", "TOKEN": "${TOKEN}"}
	register(t, ex, "go", cfg)
	if err := ex.Reset(context.Background()); err != nil { // masks apply at each kernel start
		t.Fatal(err)
	}
	res := run(t, ex, `import os
def attempt(name, f):
    try:
        data = f()
        print(name, "READ", "`+secret+`" in str(data))
    except OSError as e:
        print(name, "DENIED", type(e).__name__)
attempt("env", lambda: open(".env").read())
attempt("env-local", lambda: open(".env.local").read())
attempt("env-symlink", lambda: (os.path.lexists("l") or os.symlink(".env", "l"), open("l").read()))
attempt("env-proc-root", lambda: open("/proc/self/root" + os.getcwd() + "/.env").read())
attempt("hardlink", lambda: open("notes.txt").read())
attempt("servers-json", lambda: open(".ipybox/servers.json").read())
attempt("named-file", lambda: open("keys/service.json").read())
attempt("env-in-environ", lambda: [v for v in os.environ.values() if "`+secret+`" in v] or (_ for _ in ()).throw(OSError("absent")))
`)
	for _, name := range []string{"env", "env-local", "env-symlink", "env-proc-root", "hardlink", "servers-json", "named-file", "env-in-environ"} {
		if !strings.Contains(res.Text, name+" DENIED") {
			t.Errorf("%s: not denied:\n%s", name, res.Text)
		}
	}
	if strings.Contains(res.Text, "True") {
		t.Errorf("the secret leaked:\n%s", res.Text)
	}
	// The host still substitutes ${TOKEN} from .env: the tool sees it.
	res = run(t, ex, "from mcptools.go.env import Params, run\nprint(run(Params(name='TOKEN')) == '"+secret+"')")
	if !strings.Contains(res.Text, "True") {
		t.Errorf("the server did not get its token from the host's .env: %q", res.Text)
	}
}

// TestSecretDirsOnlyWhereNamedSecret: a directory named by a flag that
// says secret (--credentials-dir) is masked whole, and a hard link from
// outside it to a file inside is masked too; a directory a server merely
// works on (a filesystem server's root, a plain argument) stays visible.
func TestSecretDirsOnlyWhereNamedSecret(t *testing.T) {
	t.Parallel()
	secret := "tok-" + strings.Repeat("5", 12)
	ws := t.TempDir()
	for name, content := range map[string]string{
		"creds/key.pem":  secret,
		"data/notes.txt": "public",
	} {
		p := filepath.Join(ws, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(ws, "creds/key.pem"), filepath.Join(ws, "copy.pem")); err != nil {
		t.Fatal(err)
	}
	ex := startSandboxed(t, &ipybox.Options{WorkDir: ws, Approver: ipybox.ApproveAll})
	// The test server takes no such arguments: a shell passes them by.
	cfg := ipybox.ServerConfig{Command: "/bin/sh", Args: []string{"-c", `exec "$0"`, testmcpStdio(t).Command, "--credentials-dir", "creds", "data"}}
	register(t, ex, "go", cfg)
	if err := ex.Reset(context.Background()); err != nil {
		t.Fatal(err)
	}
	res := run(t, ex, `def attempt(name, path):
    try:
        print(name, "READ", open(path).read())
    except OSError as e:
        print(name, "DENIED", type(e).__name__)
attempt("dir", "creds/key.pem")
attempt("link", "copy.pem")
attempt("data", "data/notes.txt")`)
	for _, want := range []string{"dir DENIED", "link DENIED", "data READ public"} {
		if !strings.Contains(res.Text, want) {
			t.Errorf("want %q:\n%s", want, res.Text)
		}
	}
}
