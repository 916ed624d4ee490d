package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestAttackHTTPSessionFromKernel: kernel code of one HTTP session tries to
// open a session of its own on the server's loopback address (to approve
// its own calls): without the token every attempt is refused, and the
// token cannot be read from the server's environment. Sandboxed (the
// default), the server's address is not even reachable.
func TestAttackHTTPSessionFromKernel(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	const token = "attack-test-token-4f1c9a7e2b"
	for _, mode := range []string{"--no-sandbox", "sandboxed"} {
		t.Run(mode, func(t *testing.T) {
			args := []string{"--workspace", t.TempDir(), "--approval", "elicit"}
			if mode == "--no-sandbox" {
				args = append(args, "--no-sandbox")
			} else {
				testenv.NeedsTool(t, "bwrap")
			}
			cmd := exec.Command(os.Args[0], append([]string{"mcp", "--http", "127.0.0.1:0"}, args...)...)
			srv := startHTTPCmd(t, cmd, "IPYBOX_MCP_AUTH_TOKEN="+token)
			srv.token = token
			cs := goClient(t, &mcp.StreamableClientTransport{Endpoint: srv.url, DisableStandaloneSSE: true, HTTPClient: srv.httpClient()}, nil)
			out := runCell(t, cs, `import os, urllib.request, urllib.error
url = "`+srv.url+`"
body = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"evil","version":"1"}}}'
def post(headers):
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    h.update(headers)
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=h), timeout=5) as r:
            return "OPEN %d" % r.status
    except urllib.error.HTTPError as e:
        return "REFUSED %d" % e.code
    except OSError as e:
        return "UNREACHABLE " + type(e).__name__
for name, h in [("none", {}), ("guess", {"Authorization": "Bearer guess"}), ("empty", {"Authorization": "bearer "}),
                ("basic", {"Authorization": "Basic " + "x" * 20}), ("origin", {"Origin": "https://evil.example"})]:
    print(name, post(h))
try:
    env = open("/proc/%d/environ" % os.getppid(), "rb").read()
    print("environ", "LEAK" if b"`+token+`" in env else "read-no-token")
except OSError as e:
    print("environ denied", type(e).__name__)
`)
			for _, l := range strings.Split(out, "\n") {
				f := strings.Fields(l)
				if len(f) < 2 {
					continue
				}
				if f[1] == "LEAK" && os.Geteuid() == 0 {
					continue // root reads every process; TestHardenHidesEnviron checks a user's
				}
				if f[1] == "OPEN" || f[1] == "LEAK" {
					t.Errorf("%s: %s", mode, l)
				}
				if f[0] != "environ" && mode == "--no-sandbox" && f[1] != "REFUSED" {
					t.Errorf("%s: %s, want REFUSED 401", mode, l)
				}
			}
			if mode == "--no-sandbox" && !strings.Contains(out, "none REFUSED 401") {
				t.Errorf("the check proves nothing:\n%s", out)
			}
			if mode == "sandboxed" && !strings.Contains(out, "none UNREACHABLE") {
				t.Errorf("sandboxed kernel reached the host's loopback:\n%s", out)
			}
		})
	}
}

// TestGeneratedToken: without a token, ipybox mcp --http generates one,
// writes it to a private 0600 file whose path it prints, accepts it, and
// removes the file at exit; a link planted at the token directory is not
// followed.
func TestGeneratedToken(t *testing.T) {
	t.Parallel()
	runtime := t.TempDir()
	cmd := exec.Command(os.Args[0], "mcp", "--http", "127.0.0.1:0", "--workspace", t.TempDir(), "--no-sandbox")
	srv := startHTTPCmd(t, cmd, "XDG_RUNTIME_DIR="+runtime, "IPYBOX_MCP_AUTH_TOKEN=")
	m := regexp.MustCompile(`generated a bearer token in (\S+);`).FindStringSubmatch(srv.stderr.String())
	if m == nil {
		t.Fatalf("no token file named:\n%s", srv.stderr)
	}
	path := m[1]
	if !strings.HasPrefix(path, filepath.Join(runtime, "ipybox")+"/") {
		t.Errorf("token file %s is not in the private runtime directory", path)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", fi, err)
	}
	if di, _ := os.Stat(filepath.Dir(path)); di.Mode().Perm() != 0o700 {
		t.Errorf("token directory mode %v, want 0700", di.Mode().Perm())
	}
	tok, _ := os.ReadFile(path)
	if strings.Contains(srv.stderr.String(), strings.TrimSpace(string(tok))) {
		t.Error("the token itself was printed")
	}
	srv.token = strings.TrimSpace(string(tok))
	cs := goClient(t, &mcp.StreamableClientTransport{Endpoint: srv.url, DisableStandaloneSSE: true, HTTPClient: srv.httpClient()}, nil)
	if got := runCell(t, cs, "print(6 * 7)"); got != "42" {
		t.Errorf("with the generated token: %q", got)
	}
	srv.stop(t, syscall.SIGTERM)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the token file is left after exit: %v", err)
	}

	// A link at the token directory, planted beforehand.
	runtime2 := t.TempDir()
	elsewhere := t.TempDir()
	os.Symlink(elsewhere, filepath.Join(runtime2, "ipybox"))
	cmd = exec.Command(os.Args[0], "mcp", "--http", "127.0.0.1:0", "--workspace", t.TempDir(), "--no-sandbox")
	cmd.Env = append(os.Environ(), "IPYBOX_TEST_AS_MAIN=1", "XDG_RUNTIME_DIR="+runtime2, "IPYBOX_MCP_AUTH_TOKEN=")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "symbolic link") {
		t.Errorf("a linked token directory: %v\n%s", err, out)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("the token was written through the link: %v", ents)
	}
}

// TestEnvTokenNotExpanded: a token from $IPYBOX_MCP_AUTH_TOKEN cannot be
// pulled into a session: a server config that the agent registers with
// ${IPYBOX_MCP_AUTH_TOKEN} finds it unset (else the server's env tool
// would hand it to kernel code), and the kernel's environment lacks it.
func TestEnvTokenNotExpanded(t *testing.T) {
	t.Parallel()
	testenv.NeedsPython(t)
	const token = "env-token-7d2e9c41b05a"
	cmd := exec.Command(os.Args[0], "mcp", "--http", "127.0.0.1:0", "--workspace", t.TempDir(), "--no-sandbox", "--allow-host-servers")
	srv := startHTTPCmd(t, cmd, "IPYBOX_MCP_AUTH_TOKEN="+token)
	srv.token = token
	cs := goClient(t, &mcp.StreamableClientTransport{Endpoint: srv.url, DisableStandaloneSSE: true, HTTPClient: srv.httpClient()}, nil)
	out, isErr := callText(t, cs, "register_mcp_server", map[string]any{"server_name": "leak", "server_params": map[string]any{
		"command": mcptest.Build(t), "env": map[string]string{"LEAK": "${IPYBOX_MCP_AUTH_TOKEN}"},
	}})
	if !isErr || !strings.Contains(out, "IPYBOX_MCP_AUTH_TOKEN") || strings.Contains(out, token) {
		t.Errorf("register_mcp_server with ${IPYBOX_MCP_AUTH_TOKEN}: error %v, %q; want a not-set error", isErr, out)
	}
	if got := runCell(t, cs, "import os\nprint(sorted(k for k, v in os.environ.items() if 'AUTH_TOKEN' in k or v == '"+token+"'))"); got != "[]" {
		t.Errorf("the kernel's environment has the token: %s", got)
	}
}
