package main

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/ipybox/ipybox/internal/safefs"
)

// maxTokenFile bounds a token file.
const maxTokenFile = 4096

// readTokenFile reads a bearer token from a file (the whole file, trimmed).
// A file this user may not read is named with its owner, and, in the
// image, with the docker run option that runs ipybox as that owner.
func readTokenFile(env *cliEnv, path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	b, err := safefs.ReadFile(filepath.Dir(abs), filepath.Base(abs), maxTokenFile)
	if errors.Is(err, fs.ErrPermission) {
		if uid, gid, ok := dirOwner(abs); ok {
			fix := fmt.Sprintf("run ipybox as its owner (uid %d), or let this user (uid %d) read it", uid, os.Getuid())
			if env.getenv(imageEnv) != "" {
				fix = fmt.Sprintf("run the container as its owner: add --user %d:%d to the docker run command", uid, gid)
			}
			return "", fmt.Errorf("--auth-token-file %s: this process (uid %d) may not read it (it belongs to %d:%d); %s", path, os.Getuid(), uid, gid, fix)
		}
	}
	if err != nil {
		return "", fmt.Errorf("--auth-token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 {
		return "", fmt.Errorf("--auth-token-file %s: the token is %d characters; use at least 16 random ones (for example `openssl rand -hex 32`)", path, len(tok))
	}
	return tok, nil
}

// newToken returns a random token of 256 bits.
func newToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// writeTokenFile writes a generated token where only this user can read
// it: $XDG_RUNTIME_DIR/ipybox, or ~/.local/state/ipybox, in a 0700
// directory, as a 0600 file named after the address. No link is followed.
// It returns the file's path.
func writeTokenFile(getenv func(string) string, addr net.Addr, token string) (string, error) {
	base, rel := "", ""
	if x := getenv("XDG_RUNTIME_DIR"); x != "" && filepath.IsAbs(x) {
		if fi, err := os.Stat(x); err == nil && fi.IsDir() {
			base, rel = x, "ipybox"
		}
	}
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no private directory for the token file (no $XDG_RUNTIME_DIR, no home): %w; pass --auth-token-file", err)
		}
		base, rel = home, filepath.Join(".local", "state", "ipybox")
	}
	if err := safefs.MkdirAll(base, rel, 0o700); err != nil {
		return "", err
	}
	if err := os.Chmod(filepath.Join(base, rel), 0o700); err != nil {
		return "", err
	}
	name := "mcp-" + strings.NewReplacer(":", "-", "[", "", "]", "").Replace(addr.String()) + ".token"
	if err := safefs.WriteFile(base, filepath.Join(rel, name), []byte(token+"\n"), 0o600); err != nil {
		return "", err
	}
	return filepath.Join(base, rel, name), nil
}

// errTokenOnCommandLine refuses --auth-token.
var errTokenOnCommandLine = errors.New("--auth-token puts the token on the command line, where every local user sees it (ps); " +
	"put it in a file and pass --auth-token-file FILE, or set $IPYBOX_MCP_AUTH_TOKEN; without either, ipybox generates one")
