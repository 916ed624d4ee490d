package ipybox_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipybox/ipybox"
	"github.com/ipybox/ipybox/internal/mcptest"
	"github.com/ipybox/ipybox/internal/testenv"
)

// TestRedteamSandboxMovesMaskedTokenFolder: $XDG_CONFIG_HOME lies in the
// workspace (a workspace that is the user's home, or a config folder kept
// in a project). The sandbox masks the token folder by its path; sandboxed
// kernel code renames the folder above it, which moves the mask along, and
// creates a fresh, unmasked ipybox folder at the old path. The host's next
// sign-in writes its tokens there, where kernel code reads them.
func TestRedteamSandboxMovesMaskedTokenFolder(t *testing.T) {
	t.Skip("redteam: FAILS: with $XDG_CONFIG_HOME in the workspace, sandboxed code renames the config folder and reads the tokens of the next sign-in from a fresh, unmasked folder")
	testenv.NeedsTool(t, "bwrap")
	s := mcptest.NewOAuthServer(nil)
	t.Cleanup(s.Close)
	ws := t.TempDir()
	cfgHome := filepath.Join(ws, "cfg")
	t.Setenv("XDG_CONFIG_HOME", cfgHome)
	tokenFile := filepath.Join(cfgHome, "ipybox", "oauth-tokens.json")
	b := &headlessBrowser{}
	sb := startSandboxed(t, &ipybox.Options{WorkDir: ws, OAuthURL: b.open, Approver: ipybox.ApproveAll})
	res := run(t, sb, `import os
try:
    os.rename("cfg", "cfg-moved")
    os.makedirs("cfg/ipybox", mode=0o700)
    print("MOVED")
except OSError as e:
    print("REFUSED", type(e).__name__, e)`)
	t.Logf("kernel: %s", strings.TrimSpace(res.Text))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The host signs in (a server registered later in the session).
	if _, err := sb.RegisterMCPServer(ctx, "gooauth", ipybox.ServerConfig{URL: s.URL}); err != nil {
		t.Logf("register: %v", err)
	}
	var tokens []string
	if _, err := os.Stat(tokenFile); err == nil {
		tokens = storedTokens(t, tokenFile)
	} else if _, err := os.Stat(filepath.Join(ws, "cfg-moved", "ipybox", "oauth-tokens.json")); err == nil {
		tokens = storedTokens(t, filepath.Join(ws, "cfg-moved", "ipybox", "oauth-tokens.json"))
	}
	if len(tokens) == 0 {
		t.Fatalf("no sign-in was stored; the test proves nothing")
	}
	res = huntRun(t, sb, `import os
for p in (TOKEN_FILE, "cfg/ipybox/oauth-tokens.json", "cfg-moved/ipybox/oauth-tokens.json"):
    try:
        print(p, "READ", any(t in open(p).read() for t in TOKENS))
    except OSError as e:
        print(p, "DENIED", type(e).__name__)`, tokens, tokenFile)
	if strings.Contains(res.Text, "READ True") {
		t.Errorf("sandboxed kernel code read the host's OAuth tokens:\n%s", res.Text)
	}
}

// TestRedteamSandboxPlantedTokenFolderLink: the same workspace, but kernel
// code replaces the (masked) folder's parent with a link to a folder it
// owns before the host ever signs in. The host must not write tokens
// where kernel code can read them.
func TestRedteamSandboxPlantedTokenFolderLink(t *testing.T) {
	t.Skip("redteam: FAILS: with $XDG_CONFIG_HOME in the workspace, sandboxed code swaps the config folder for a link to its own folder; the host then writes the tokens there")
	testenv.NeedsTool(t, "bwrap")
	s := mcptest.NewOAuthServer(nil)
	t.Cleanup(s.Close)
	ws := t.TempDir()
	cfgHome := filepath.Join(ws, "cfg")
	t.Setenv("XDG_CONFIG_HOME", cfgHome)
	tokenFile := filepath.Join(cfgHome, "ipybox", "oauth-tokens.json")
	b := &headlessBrowser{}
	sb := startSandboxed(t, &ipybox.Options{WorkDir: ws, OAuthURL: b.open, Approver: ipybox.ApproveAll})
	res := run(t, sb, `import os
try:
    os.rename("cfg", "cfg-moved")
    os.makedirs("loot/ipybox", mode=0o700)
    os.symlink("loot", "cfg")
    print("PLANTED")
except OSError as e:
    print("REFUSED", type(e).__name__, e)`)
	t.Logf("kernel: %s", strings.TrimSpace(res.Text))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := sb.RegisterMCPServer(ctx, "gooauth", ipybox.ServerConfig{URL: s.URL}); err != nil {
		t.Logf("register: %v", err)
	}
	loot := filepath.Join(ws, "loot", "ipybox", "oauth-tokens.json")
	if _, err := os.Stat(loot); err == nil {
		tokens := storedTokens(t, loot)
		res = huntRun(t, sb, `print("READ", any(t in open("loot/ipybox/oauth-tokens.json").read() for t in TOKENS))`, tokens, tokenFile)
		if strings.Contains(res.Text, "READ True") {
			t.Errorf("the host wrote its tokens through the kernel's link, where kernel code reads them:\n%s", res.Text)
		}
	}
}
