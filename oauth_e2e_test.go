//go:build linux

package ipybox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// demoOAuthServer starts the TypeScript SDK's example server with --oauth:
// an MCP server at http://localhost:MCP_PORT/mcp whose demo authorization
// server (on MCP_AUTH_PORT) approves every sign-in at once. It returns the
// MCP URL.
func demoOAuthServer(t *testing.T) string {
	t.Helper()
	node := testenv.NPMBin(t, "node")
	script := filepath.Join(testenv.RepoRoot(t), "tools", "npm", "node_modules", "@modelcontextprotocol", "sdk", "dist", "esm", "examples", "server", "simpleStreamableHttp.js")
	if _, err := os.Stat(script); err != nil {
		testenv.Missing(t, "%s not installed; run scripts/setup.sh", script)
	}
	mcpPort, authPort := freePort(t), freePort(t)
	cmd := exec.Command(node, script, "--oauth")
	cmd.Env = append(os.Environ(), "MCP_PORT="+strconv.Itoa(mcpPort), "MCP_AUTH_PORT="+strconv.Itoa(authPort))
	out := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	u := fmt.Sprintf("http://localhost:%d/mcp", mcpPort)
	meta := fmt.Sprintf("http://localhost:%d/.well-known/oauth-authorization-server", authPort)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r1, err1 := http.Get(fmt.Sprintf("http://localhost:%d/.well-known/oauth-protected-resource/mcp", mcpPort))
		r2, err2 := http.Get(meta)
		for _, r := range []*http.Response{r1, r2} {
			if r != nil {
				r.Body.Close()
			}
		}
		if err1 == nil && err2 == nil && r1.StatusCode == 200 && r2.StatusCode == 200 {
			return u
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo OAuth server did not come up:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// headlessBrowser is an Options.OAuthURL that opens the authorization URL
// as a browser would, following the redirects back to ipybox's listener.
type headlessBrowser struct {
	mu   sync.Mutex
	urls []string
}

func (b *headlessBrowser) open(ctx context.Context, server, u string) error {
	b.mu.Lock()
	b.urls = append(b.urls, server+" "+u)
	b.mu.Unlock()
	testenv.Browse(u, 0, 20*time.Second)
	return nil
}

func (b *headlessBrowser) opened() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.urls...)
}

// storedTokens reads the token file the way an attacker with the user's
// rights would, and returns every access and refresh token in it.
func storedTokens(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("token file: %v", err)
	}
	// Version 3: sign-ins by workspace, then server name, then URL (and
	// those of versions 2 and 1, kept: by name, then URL; by URL).
	type signIn struct {
		AccessToken, RefreshToken, ClientSecret string
	}
	var f struct {
		Workspaces map[string]map[string]map[string]signIn
		SignIns    map[string]map[string]signIn
		Servers    map[string]signIn
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	var all []signIn
	for _, byName := range f.Workspaces {
		for _, byURL := range byName {
			for _, s := range byURL {
				all = append(all, s)
			}
		}
	}
	for _, byURL := range f.SignIns {
		for _, s := range byURL {
			all = append(all, s)
		}
	}
	for _, s := range f.Servers {
		all = append(all, s)
	}
	var out []string
	for _, s := range all {
		for _, v := range []string{s.AccessToken, s.RefreshToken, s.ClientSecret} {
			if v != "" {
				out = append(out, v)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no token stored:\n%s", data)
	}
	return out
}

// TestOAuthEndToEnd: the TypeScript SDK's example OAuth server is
// registered in ipybox; the sign-in runs headlessly (discovery, dynamic
// registration, PKCE, the redirect to ipybox's loopback listener); kernel
// code then calls its tool, with approval. Then, sandboxed, kernel code
// hunts for the token in every file it can read, in its environment and in
// every process's, and finds nothing; nor do servers.json, the logs and the
// cell's output hold it (docs/design.md, security invariant 5).
func TestOAuthEndToEnd(t *testing.T) {
	serverURL := demoOAuthServer(t)
	cfgHome := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfgHome)
	tokenFile := filepath.Join(cfgHome, "ipybox", "oauth-tokens.json")
	logs := &testenv.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b := &headlessBrowser{}
	var approvals []string
	var amu sync.Mutex
	approver := func(ctx context.Context, r *ipybox.ApprovalRequest) error {
		amu.Lock()
		approvals = append(approvals, r.Server+"."+r.Tool)
		amu.Unlock()
		return nil
	}
	ws := t.TempDir()
	ex := start(t, &ipybox.Options{WorkDir: ws, Logger: log, OAuthURL: b.open, Approver: approver})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	t0 := time.Now()
	mods, err := ex.RegisterMCPServer(ctx, "demo", ipybox.ServerConfig{URL: serverURL})
	if err != nil {
		t.Fatalf("register: %v\n%s", err, logs.String())
	}
	t.Logf("registered the OAuth server in %v, signing in headlessly; tools: %d", time.Since(t0).Round(time.Millisecond), len(mods))
	if got := b.opened(); len(got) != 1 || !strings.HasPrefix(got[0], "demo http://localhost:") {
		t.Errorf("authorization URLs handed to the application: %q", got)
	}
	res := run(t, ex, "from mcptools.demo.greet import Params, run\nprint(run(Params(name='ipybox')))")
	if !strings.Contains(res.Text, "Hello, ipybox!") {
		t.Errorf("tool call from kernel code: %q", res.Text)
	}
	amu.Lock()
	if len(approvals) != 1 || approvals[0] != "demo.greet" {
		t.Errorf("approvals: %q", approvals)
	}
	amu.Unlock()
	fi, err := os.Stat(tokenFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file %s: %v, %v", tokenFile, fi, err)
	}
	tokens := storedTokens(t, tokenFile)
	leaks := func(where, text string) {
		t.Helper()
		for _, tok := range tokens {
			if strings.Contains(text, tok) {
				t.Errorf("%s holds a token", where)
			}
		}
	}
	servers, err := os.ReadFile(filepath.Join(ws, ".ipybox", "servers.json"))
	if err != nil {
		t.Fatal(err)
	}
	leaks("servers.json", string(servers))
	leaks("the cell's output", res.Text)
	// Unsandboxed kernel code has the user's rights (invariant 2): it
	// could open the token file by name. What it is given holds no token:
	// its environment and the workspace.
	res = huntRun(t, ex, `import os
found = [k for k, v in os.environ.items() if any(t in v for t in TOKENS)]
for root, dirs, files in os.walk("."):
    for f in files:
        try:
            data = open(os.path.join(root, f), "rb").read(1 << 22).decode("latin-1")
        except OSError:
            continue
        found += [os.path.join(root, f) for t in TOKENS if t in data]
print("FOUND", found)`, tokens, tokenFile)
	if !strings.Contains(res.Text, "FOUND []") {
		t.Errorf("the unsandboxed kernel's environment or workspace holds a token: %s", res.Text)
	}

	// Sandboxed: a new executor in the same workspace (a later process)
	// uses the stored token, with no new sign-in (a sign-in is the
	// workspace's: another one signs in anew), and kernel code can find it
	// nowhere.
	ws2 := ws
	sb := startSandboxed(t, &ipybox.Options{WorkDir: ws2, Logger: log, Approver: approver})
	if _, err := sb.RegisterMCPServer(ctx, "demo", ipybox.ServerConfig{URL: serverURL}); err != nil {
		t.Fatalf("register with the stored token: %v", err)
	}
	if got := b.opened(); len(got) != 1 {
		t.Errorf("a second sign-in happened: %q", got)
	}
	res = run(t, sb, "from mcptools.demo.greet import Params, run\nprint(run(Params(name='sandbox')))")
	if !strings.Contains(res.Text, "Hello, sandbox!") {
		t.Errorf("sandboxed tool call: %q", res.Text)
	}
	hunt := `import os, re
found, files, denied = [], 0, 0
def check(where, data):
    for t in TOKENS:
        if t in data:
            found.append(where)
for k, v in os.environ.items():
    check("environ " + k, v)
for root, dirs, fs in os.walk("/", onerror=lambda e: None):
    if root == "/":
        # /usr is the host's read-only system tree (150,000 files, 40 s to
        # read): ipybox never writes there.
        dirs[:] = [d for d in dirs if d != "usr"]
    if root in ("/sys",) or root.startswith("/sys/") or (root.startswith("/proc") and root != "/proc" and not re.match(r"^/proc/\d+$", root)):
        dirs[:] = []
    if root == "/proc":
        dirs[:] = [d for d in dirs if d.isdigit()]
        fs = []
    if re.match(r"^/proc/\d+$", root):
        dirs[:] = []
        fs = [f for f in fs if f in ("environ", "cmdline")]
    for f in fs:
        p = os.path.join(root, f)
        try:
            if not os.path.isfile(p) or os.path.islink(p):
                continue
            with open(p, "rb") as fh:
                data = fh.read(1 << 20).decode("latin-1")
        except OSError:
            denied += 1
            continue
        files += 1
        check(p, data)
for p in (os.path.expanduser("~/.config/ipybox/oauth-tokens.json"), TOKEN_FILE):
    try:
        check(p, open(p).read())
    except OSError:
        denied += 1
print("FILES", files, "FOUND", found)`
	// A canary proves that the hunt finds what it can read.
	canary := "canary-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	os.MkdirAll(filepath.Join(ws2, "sub"), 0o755)
	os.WriteFile(filepath.Join(ws2, "sub", "canary.txt"), []byte("x"+canary+"x"), 0o600)
	t0 = time.Now()
	res = huntRun(t, sb, hunt, append([]string{canary}, tokens...), tokenFile)
	t.Logf("the sandboxed hunt read %s files in %v", strings.Fields(res.Text + " ? ?")[1], time.Since(t0).Round(time.Millisecond))
	if !strings.Contains(res.Text, "FOUND ['"+ws2+"/sub/canary.txt']") {
		t.Errorf("sandboxed kernel code found a token (or missed the canary): %s", res.Text)
	}
	if n, _ := strconv.Atoi(strings.Fields(res.Text + " 0 0")[1]); n < 100 {
		t.Errorf("the hunt read only %d files: it proves nothing: %s", n, res.Text)
	}
	leaks("the hunt's output", res.Text)
	leaks("the logs", logs.String())
}

// TestOAuthTokenFolderMaskedInHostRoot: with a sandbox that shows the whole
// host ("host" root mode), the token folder is masked even where nothing
// else would hide it (here $XDG_CONFIG_HOME is in the workspace): kernel
// code cannot read the token file, while the host still uses it.
func TestOAuthTokenFolderMaskedInHostRoot(t *testing.T) {
	testenv.NeedsTool(t, "bwrap")
	s := mcptest.NewOAuthServer(nil)
	t.Cleanup(s.Close)
	// A config folder that the "host" root shows (outside the workspace:
	// inside it, the sandbox is refused, see
	// TestRedteamTokenFolderInWritablePlace).
	// The policy shows it read-only (extraRead), beside the host root.
	ws := t.TempDir()
	cfgHome := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfgHome)
	tokenFile := filepath.Join(cfgHome, "ipybox", "oauth-tokens.json")
	b := &headlessBrowser{}
	policy := ipybox.DefaultSandbox()
	policy.RootMode = "host"
	policy.ExtraRead = append(policy.ExtraRead, cfgHome)
	sb := startSandboxed(t, &ipybox.Options{WorkDir: ws, Sandbox: policy, OAuthURL: b.open, Approver: ipybox.ApproveAll})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := sb.RegisterMCPServer(ctx, "gooauth", ipybox.ServerConfig{URL: s.URL}); err != nil {
		t.Fatal(err)
	}
	tokens := storedTokens(t, tokenFile)
	res := huntRun(t, sb, `import os
def attempt(name, f):
    try:
        data = f()
        print(name, "READ", any(t in data for t in TOKENS))
    except OSError as e:
        print(name, "DENIED", type(e).__name__)
attempt("token-file", lambda: open(TOKEN_FILE).read())
attempt("token-dir", lambda: str(os.listdir(os.path.dirname(TOKEN_FILE))) or (_ for _ in ()).throw(OSError("empty")))
attempt("config-home", lambda: str(os.listdir(os.path.dirname(os.path.dirname(TOKEN_FILE)))))
from mcptools.gooauth.tool_1 import Params, run
print(run(Params(s="host-root")))`, tokens, tokenFile)
	for _, want := range []string{"token-file DENIED", "config-home READ False", "tool-1: host-root"} {
		if !strings.Contains(res.Text, want) {
			t.Errorf("want %q:\n%s", want, res.Text)
		}
	}
	if strings.Contains(res.Text, "token-dir READ True") || strings.Contains(res.Text, "config-home READ True") || strings.Contains(res.Text, "oauth-tokens") {
		t.Errorf("the token folder is listable:\n%s", res.Text)
	}
}

// huntRun runs code with TOKENS (the tokens to look for) and TOKEN_FILE
// defined. The tokens travel hex-encoded and reversed, so that the cell's
// source (which IPython keeps in its history database) does not hold them.
func huntRun(t *testing.T, ex *ipybox.Executor, code string, tokens []string, tokenFile string) *ipybox.Result {
	t.Helper()
	var hexes []string
	for _, tok := range tokens {
		r := []byte(tok)
		for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
			r[i], r[j] = r[j], r[i]
		}
		hexes = append(hexes, fmt.Sprintf("%q", fmt.Sprintf("%x", r)))
	}
	prelude := fmt.Sprintf("TOKENS = [bytes.fromhex(h).decode()[::-1] for h in [%s]]\nTOKEN_FILE = %q\n", strings.Join(hexes, ", "), tokenFile)
	return run(t, ex, prelude+code)
}
