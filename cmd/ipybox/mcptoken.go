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

	"github.com/ipybox/ipybox/internal/hostproc"
	"github.com/ipybox/ipybox/internal/safefs"
	"github.com/ipybox/ipybox/internal/trusted"
	"github.com/ipybox/ipybox/mcpserver"
)

// maxTokenFile bounds a token file.
const maxTokenFile = 4096

// readTokenFile reads the bearer tokens of --auth-token-file: one token
// (the whole file, trimmed), which is the principal "default"'s, or lines
// of NAME:TOKEN, one principal each. Blank lines and lines that start with
// # are skipped. A file this user may not read is named with its owner,
// and, in the image, with the docker run option that runs ipybox as that
// owner.
func readTokenFile(env *cliEnv, path string) (map[string]string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	b, err := safefs.ReadFile(filepath.Dir(abs), filepath.Base(abs), maxTokenFile)
	if errors.Is(err, fs.ErrPermission) {
		if uid, gid, ok := dirOwner(abs); ok {
			fix := fmt.Sprintf("run ipybox as its owner (uid %d), or let this user (uid %d) read it", uid, os.Getuid())
			if env.getenv(imageEnv) != "" {
				fix = fmt.Sprintf("run the container as its owner: add --user %d:%d to the docker run command", uid, gid)
			}
			return nil, fmt.Errorf("--auth-token-file %s: this process (uid %d) may not read it (it belongs to %d:%d); %s", path, os.Getuid(), uid, gid, fix)
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("--auth-token-file %s: no such file; make one that only you can read, holding a token (one line) or NAME:TOKEN lines, one principal each: (umask 077; openssl rand -hex 32 > %s)", path, path)
	}
	if err != nil {
		return nil, fmt.Errorf("--auth-token-file: %w", err)
	}
	// Whoever can write the file, or swap it, chooses the tokens that
	// let clients in: it must be this user's alone (internal/trusted).
	// (Checked after the read, so that a file this user may not read at
	// all is named as such, above.)
	warn, err := trusted.Check("--auth-token-file", abs, true)
	var te *trusted.Error
	if errors.As(err, &te) && !te.Writable && env.getenv(imageEnv) != "" {
		return nil, fmt.Errorf("%w; or run the container as its owner: add --user %d:%d to the docker run command", err, te.UID, te.UID)
	}
	if err != nil {
		return nil, err
	}
	if env.getenv(imageEnv) == "1" && hostproc.Inside(abs, []string{hostproc.ImagePrivate}) == "" && env.stderr != nil {
		// Kernels there share this uid: they read the file, and call this
		// server over loopback as its client.
		fmt.Fprintf(env.stderr, "ipybox mcp: warning: --auth-token-file %s is outside %s, where kernel code in this container can read it and call this server as a client; mount it under %s instead (-v FILE:%s/token:ro)\n",
			path, hostproc.ImagePrivate, hostproc.ImagePrivate, hostproc.ImagePrivate)
	}
	if warn != "" && env.stderr != nil {
		fmt.Fprintf(env.stderr, "ipybox mcp: warning: %s\n", warn)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	short := func(what string, n int) error {
		return fmt.Errorf("--auth-token-file %s: %s is %d characters; use at least 16 random ones (for example `openssl rand -hex 32`)", path, what, n)
	}
	if len(lines) == 1 && !strings.Contains(lines[0], ":") {
		if len(lines[0]) < 16 {
			return nil, short("the token", len(lines[0]))
		}
		return map[string]string{"default": lines[0]}, nil
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("--auth-token-file %s holds no token", path)
	}
	out := map[string]string{}
	seen := map[string]string{}
	for i, l := range lines {
		name, tok, ok := strings.Cut(l, ":")
		name, tok = strings.TrimSpace(name), strings.TrimSpace(tok)
		if !ok {
			return nil, fmt.Errorf("--auth-token-file %s: line %d is not NAME:TOKEN (a file of several lines names a principal on each)", path, i+1)
		}
		if err := mcpserver.ValidPrincipalName(name); err != nil {
			return nil, fmt.Errorf("--auth-token-file %s: line %d: %w", path, i+1, err)
		}
		if len(tok) < 16 {
			return nil, short(fmt.Sprintf("the token of %q", name), len(tok))
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("--auth-token-file %s: principal %q is named twice", path, name)
		}
		if other, dup := seen[tok]; dup {
			return nil, fmt.Errorf("--auth-token-file %s: principals %q and %q have the same token; give each its own", path, other, name)
		}
		out[name], seen[tok] = tok, name
	}
	return out, nil
}

// newToken returns a random token of 256 bits.
func newToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// writeTokenFile writes a generated token where only this user can read
// it: $XDG_RUNTIME_DIR/ipybox, or ~/.local/state/ipybox (in the image,
// /ipybox/run-UID, which nothing the server starts can read), in a 0700
// directory, as a 0600 file named after the address. No link is followed.
// It returns the file's path.
func writeTokenFile(getenv func(string) string, addr net.Addr, token string) (string, error) {
	base, rel := "", ""
	if getenv(imageEnv) == "1" {
		// In the image, $XDG_RUNTIME_DIR is open to kernels, and a token
		// would let their code call the server as its client.
		base, rel = hostproc.ImagePrivate, fmt.Sprintf("run-%d", os.Geteuid())
	} else if x := getenv("XDG_RUNTIME_DIR"); x != "" && filepath.IsAbs(x) {
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
