package mcpserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestAttackFirstKernelSeesStartupSecrets attacks invariant 12 ("a kernel
// whose masks are stale is never handed out") through the servers of
// --mcp-config (Options.Servers): their configs name secret files (an env
// value, relative or absolute; a ${VAR} that the workspace's .env or the
// host's environment fills; a --key-file argument), and the first cell of
// the first kernel (cold, or from the warm pool) and of a later session
// tries to read each. Before, the first kernel started before the
// startup servers were registered in it, under masks that did not name
// their files, and read them all; ${VAR} values were never masked.
func TestAttackFirstKernelSeesStartupSecrets(t *testing.T) {
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	bin := mcptest.Build(t)
	for _, pool := range []int{0, 1} {
		t.Run(map[int]string{0: "cold", 1: "pooled"}[pool], func(t *testing.T) {
			ws := t.TempDir()
			files := map[string]string{}
			for _, name := range []string{"creds-env.json", "creds-abs.json", "creds-dotenv.json", "creds-hostenv.json", "creds-arg.json"} {
				secret := "sk-first-" + strings.TrimSuffix(name, ".json")
				files[name] = secret
				if err := os.WriteFile(filepath.Join(ws, name), []byte(secret), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("IPYBOX_TEST_CREDS_FILE", filepath.Join(ws, "creds-hostenv.json"))
			srv := newServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox(), Sessions: SessionOptions{Pool: pool},
				DotEnv: map[string]string{"CREDS_FILE": "creds-dotenv.json"},
				Servers: map[string]ipybox.ServerConfig{
					"svc": {Command: "/bin/sh", Args: []string{"-c", "exec " + bin, "sh", "--key-file", "creds-arg.json"}, Env: map[string]string{
						"KEY_FILE":     "creds-env.json",
						"ABS_KEY_FILE": filepath.Join(ws, "creds-abs.json"),
						"DOT_KEY_FILE": "${CREDS_FILE}",
						"HOST_KEY":     "${IPYBOX_TEST_CREDS_FILE}",
					}},
				}})
			read := `import os
for n in sorted(os.listdir(".")):
    if n.startswith("creds-"):
        try:
            print(n, "=", open(n).read())
        except Exception as e:
            print(n, "!", type(e).__name__)`
			for i := range 2 {
				got := run(t, connect(t, srv, nil), read)
				for name, secret := range files {
					if strings.Contains(got, secret) {
						t.Errorf("session %d's first cell read %s, which a --mcp-config server's config names: %s", i+1, name, got)
					}
				}
			}
		})
	}
}

// TestAttackRunningKernelSeesLaterSecrets: the same class for a kernel
// that runs while another session registers a server whose config names a
// secret file: its next cell runs in a kernel restarted under the new
// masks (and says so), never in the one that can still read the file.
func TestAttackRunningKernelSeesLaterSecrets(t *testing.T) {
	testenv.NeedsPython(t)
	testenv.NeedsTool(t, "bwrap")
	bin := mcptest.Build(t)
	ws := t.TempDir()
	const secret = "sk-late-registered"
	if err := os.WriteFile(filepath.Join(ws, "creds-late.json"), []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := newServer(t, &Options{Workspace: ws, Sandbox: ipybox.DefaultSandbox()})
	a, b := connect(t, srv, nil), connect(t, srv, nil)
	run(t, a, `f = open("creds-late.json")`) // a kernel that runs, and holds the file open
	res := call(t, b, "register_mcp_server", map[string]any{"server_name": "late",
		"server_params": map[string]any{"command": bin, "env": map[string]string{"KEY_FILE": "creds-late.json"}}})
	if res.IsError {
		t.Fatalf("register: %s", text(res))
	}
	got := text(call(t, a, "execute_ipython_cell", map[string]any{"code": `try:
    print("held:", f.read())
except Exception as e:
    print("held!", type(e).__name__)
try:
    print("open:", open("creds-late.json").read())
except Exception as e:
    print("open!", type(e).__name__)`}))
	if strings.Contains(got, secret) {
		t.Errorf("a kernel that ran before the registration read the file it names: %s", got)
	}
	if !strings.Contains(got, "the kernel restarted before this cell") {
		t.Errorf("the cell does not say that its kernel restarted: %s", got)
	}
}
