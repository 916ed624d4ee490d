package mcpconn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"github.com/ipybox/ipybox/internal/trusted"
)

// OAuth tokens live in one file on the host, never in the workspace:
//
//	$XDG_CONFIG_HOME/ipybox/oauth-tokens.json (os.UserConfigDir; ~/.config on Linux)
//
// with mode 0600 in a folder with mode 0700, keyed by the workspace, the
// server's name and its URL together. A sign-in is bound to where it was
// made: the workspace (a tenant's folder with several principals) whose
// registration it was made for, and the name it was made for there. The
// name, because approval rules match servers by name, so a sign-in that a
// registration under another name could use would carry the operator's
// credentials past a rule on the operator's name (acc3, attack 16). The
// workspace, because the file is the user's and shared by every ipybox the
// user runs: a client of another workspace's ipybox mcp, whose operator
// configured no such server and wrote no rule for it, could otherwise
// register the same name and URL and use the sign-in unasked (acc4, attack
// 5). A registration elsewhere, or under another name, signs in anew.
// Rules do not follow URLs instead, because a URL has many spellings (a
// port, a query, a trailing slash, another host name for the same server).
// Not an OS keyring: on Linux the keyring libraries that need no cgo talk to
// the Secret Service over D-Bus, which headless hosts (containers, CI, SSH
// sessions, the Docker image) do not run, so a file would be needed as the
// fallback anyway; it is the choice of gh (hosts.yml) and Claude Code
// (.credentials.json) on Linux too. The sandbox does not mount the user's
// config folder, so sandboxed kernel code cannot read the file; unsandboxed
// kernel code has the user's rights and can (see docs/design.md, security invariant 2).

// tokenFileName is the file's name in its folder.
const tokenFileName = "oauth-tokens.json"

// maxTokenFile bounds the file read.
const maxTokenFile = 4 << 20

// DefaultTokenFile returns where OAuth tokens are kept when
// Options.TokenFile is empty: oauth-tokens.json in the ipybox folder of
// os.UserConfigDir.
func DefaultTokenFile() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no folder for OAuth tokens: %w (set $XDG_CONFIG_HOME or $HOME)", err)
	}
	return filepath.Join(dir, "ipybox", tokenFileName), nil
}

// PrincipalTokenFile returns the token file of principal, one of several
// that share a server as tenants: principals/<principal>/ in
// DefaultTokenFile's folder, which every sandbox masks whole.
func PrincipalTokenFile(principal string) (string, error) {
	if principal == "" || principal == "." || principal == ".." || strings.ContainsAny(principal, `/\`) {
		return "", fmt.Errorf("no OAuth token file for the principal %q", principal)
	}
	def, err := DefaultTokenFile()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(def), "principals", principal, tokenFileName), nil
}

// tokenFile is the JSON layout of the token file.
type tokenFile struct {
	Version int `json:"version"`
	// Bound holds the sign-ins by workspace (Manager's Options.Workspace,
	// "" for a Manager without one), then by server name, then by
	// tokenKey of the server's URL.
	Bound map[string]map[string]map[string]*storedSignIn `json:"workspaces,omitempty"`
	// SignIns holds the sign-ins of version 2 (bound to a name, not yet to
	// a workspace), by server name, then by URL. They are listed and
	// kept, never used: a registration of the name in any workspace could
	// have used them.
	SignIns map[string]map[string]*storedSignIn `json:"signIns,omitempty"`
	// Servers holds the sign-ins of version 1 (before ipybox bound them
	// to a name), by URL. They are listed and kept, never used: any
	// registration of the URL could have used them.
	Servers map[string]*storedSignIn `json:"servers,omitempty"`
}

// tokenFileVersion is the version written.
const tokenFileVersion = 3

// storedSignIn is one server's sign-in: the OAuth client it used (needed
// to refresh) and its token. Client secrets of dynamically registered
// clients are kept here too: they were issued to this host.
type storedSignIn struct {
	ClientID     string           `json:"clientId"`
	ClientSecret string           `json:"clientSecret,omitempty"`
	AuthURL      string           `json:"authUrl,omitempty"`
	TokenURL     string           `json:"tokenUrl"`
	AuthStyle    oauth2.AuthStyle `json:"authStyle,omitempty"`
	RedirectURL  string           `json:"redirectUrl,omitempty"`
	Scopes       []string         `json:"scopes,omitempty"`

	AccessToken  string    `json:"accessToken"`
	TokenType    string    `json:"tokenType,omitempty"`
	RefreshToken string    `json:"refreshToken,omitempty"`
	Expiry       time.Time `json:"expiry,omitzero"`
	Obtained     time.Time `json:"obtained"`
}

func (s *storedSignIn) config() *oauth2.Config {
	return &oauth2.Config{
		ClientID: s.ClientID, ClientSecret: s.ClientSecret,
		Endpoint:    oauth2.Endpoint{AuthURL: s.AuthURL, TokenURL: s.TokenURL, AuthStyle: s.AuthStyle},
		RedirectURL: s.RedirectURL, Scopes: slices.Clone(s.Scopes),
	}
}

func (s *storedSignIn) token() *oauth2.Token {
	return &oauth2.Token{AccessToken: s.AccessToken, TokenType: s.TokenType, RefreshToken: s.RefreshToken, Expiry: s.Expiry}
}

func newStoredSignIn(c *oauth2.Config, t *oauth2.Token, obtained time.Time) *storedSignIn {
	return &storedSignIn{
		ClientID: c.ClientID, ClientSecret: c.ClientSecret,
		AuthURL: c.Endpoint.AuthURL, TokenURL: c.Endpoint.TokenURL, AuthStyle: c.Endpoint.AuthStyle,
		RedirectURL: c.RedirectURL, Scopes: slices.Clone(c.Scopes),
		AccessToken: t.AccessToken, TokenType: t.TokenType, RefreshToken: t.RefreshToken, Expiry: t.Expiry,
		Obtained: obtained,
	}
}

// tokenKey is the store's key for a server URL: scheme and host in lower
// case, without a fragment.
func tokenKey(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Scheme = strings.ToLower(u.Scheme)
	u.Host = strings.ToLower(u.Host)
	u.Fragment = ""
	return u.String()
}

// tokenStore reads and writes the token file. Every operation locks the
// file (another ipybox process may be refreshing), reads it whole and, to
// change it, replaces it atomically. Its sign-ins are those of workspace.
type tokenStore struct {
	path      string
	workspace string // the key's first part: see Options.Workspace
}

func (s tokenStore) load(name, serverURL string) (*storedSignIn, error) {
	var out *storedSignIn
	err := s.locked(false, func(f *tokenFile) bool {
		out = f.Bound[s.workspace][name][tokenKey(serverURL)]
		return false
	})
	return out, err
}

// maxStoredToken bounds a token (access or refresh) that is written to the
// file, which every server's sign-in shares: one large token (a hostile
// server's, of up to a megabyte) must not make it unreadable for all.
const maxStoredToken = 16 << 10

func (s tokenStore) save(name, serverURL string, e *storedSignIn) error {
	if len(e.AccessToken) > maxStoredToken || len(e.RefreshToken) > maxStoredToken {
		return fmt.Errorf("the sign-in to %s was not stored: its token is longer than %d bytes; it lasts for this process only", tokenKey(serverURL), maxStoredToken)
	}
	if name == "" {
		return fmt.Errorf("the sign-in to %s was not stored: it names no server", tokenKey(serverURL))
	}
	return s.locked(true, func(f *tokenFile) bool {
		ws := f.Bound[s.workspace]
		if ws == nil {
			ws = map[string]map[string]*storedSignIn{}
			f.Bound[s.workspace] = ws
		}
		if ws[name] == nil {
			ws[name] = map[string]*storedSignIn{}
		}
		ws[name][tokenKey(serverURL)] = e
		return true
	})
}

func (s tokenStore) remove(name, serverURL string) (bool, error) {
	var had bool
	err := s.locked(true, func(f *tokenFile) bool {
		k := tokenKey(serverURL)
		ws := f.Bound[s.workspace]
		_, had = ws[name][k]
		delete(ws[name], k)
		if len(ws[name]) == 0 {
			delete(ws, name)
		}
		if len(ws) == 0 {
			delete(f.Bound, s.workspace)
		}
		return had
	})
	return had, err
}

// locked runs fn on the file's contents under the file lock, and writes
// the result back when fn returns true.
func (s tokenStore) locked(write bool, fn func(*tokenFile) bool) error {
	dir := filepath.Dir(s.path)
	// Its tokens sign in as the user: the file and the folders above it
	// must be this user's alone (internal/trusted). read refuses a file
	// that others may read.
	if _, err := trusted.Check("the OAuth token file", s.path, false); err != nil {
		return err
	}
	if write {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("OAuth token folder: %w", err)
		}
	}
	unlock, err := lockFile(filepath.Join(dir, "."+tokenFileName+".lock"), write)
	if err != nil {
		return fmt.Errorf("locking the OAuth token file: %w", err)
	}
	defer unlock()
	f, err := s.read()
	if err != nil {
		return err
	}
	if !fn(f) || !write {
		return nil
	}
	f.Version = tokenFileVersion
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // a '<' in a token stays one byte, not six
	enc.SetIndent("", "  ")
	if err := enc.Encode(f); err != nil {
		return fmt.Errorf("OAuth token file: %w", err)
	}
	data := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	tmp, err := os.CreateTemp(dir, "."+tokenFileName+".*")
	if err != nil {
		return fmt.Errorf("writing the OAuth token file: %w", err)
	}
	defer os.Remove(tmp.Name())
	// CreateTemp makes the file 0600 already; Chmod says so explicitly.
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the OAuth token file: %w", err)
	}
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the OAuth token file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing the OAuth token file: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.path); err != nil {
		return fmt.Errorf("writing the OAuth token file: %w", err)
	}
	return nil
}

// read returns the file's contents; a missing file is empty. A file that
// others may read is refused rather than used: its tokens may have leaked.
func (s tokenStore) read() (*tokenFile, error) {
	f := &tokenFile{Version: tokenFileVersion, Bound: map[string]map[string]map[string]*storedSignIn{}}
	fh, err := os.OpenFile(s.path, os.O_RDONLY|oNoFollow, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the OAuth token file: %w", err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading the OAuth token file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("the OAuth token file %s is not a regular file; remove it", s.path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("the OAuth token file %s has mode %04o, so others may have read its tokens; fix it with `chmod 600 %s` (and sign in again if in doubt)", s.path, perm, s.path)
	}
	data, err := io.ReadAll(io.LimitReader(fh, maxTokenFile+1))
	if err != nil {
		return nil, fmt.Errorf("reading the OAuth token file: %w", err)
	}
	if len(data) > maxTokenFile {
		return nil, fmt.Errorf("the OAuth token file %s is larger than %d bytes; remove it and sign in again", s.path, maxTokenFile)
	}
	if err := json.Unmarshal(data, f); err != nil {
		// The parser's message is not shown: it may quote a token.
		return nil, fmt.Errorf("the OAuth token file %s is not valid JSON; remove it and sign in again", s.path)
	}
	if f.Bound == nil {
		f.Bound = map[string]map[string]map[string]*storedSignIn{}
	}
	return f, nil
}

// StoredToken describes one stored OAuth sign-in, without its secrets.
type StoredToken struct {
	// Workspace is the folder whose registration the sign-in was made
	// for (a Manager's Options.Workspace, absolute; empty for a Manager
	// without one, such as ipybox apigen's). Only a Manager of that
	// workspace uses it.
	Workspace string
	// Server is the name of the server the sign-in was made for; only a
	// registration of that name (and URL) uses it. Empty for a sign-in
	// stored by an ipybox before sign-ins were bound to names.
	Server string
	// Old reports a sign-in stored by an ipybox before sign-ins were
	// bound to a workspace and a name (token file version 1 or 2): it is
	// never used; sign in again.
	Old bool
	// URL is the MCP server's URL.
	URL string
	// ClientID is the OAuth client the token was issued to.
	ClientID string
	// Scopes are the scopes asked for; empty when the server chose them.
	Scopes []string
	// Expiry is when the access token expires; zero when the server did
	// not say.
	Expiry time.Time
	// Refreshable reports whether a refresh token is stored, so that an
	// expired access token can be renewed without signing in again.
	Refreshable bool
	// Obtained is when the access token was obtained.
	Obtained time.Time
}

// ListTokens describes the sign-ins stored in file (DefaultTokenFile when
// empty): first those of an older ipybox (Old), then the others sorted by
// workspace, server name and URL. It never returns a token.
func ListTokens(file string) ([]StoredToken, error) {
	s, err := openStore(file, "")
	if err != nil {
		return nil, err
	}
	var out []StoredToken
	err = s.locked(false, func(f *tokenFile) bool {
		add := func(ws, name string, old bool, m map[string]*storedSignIn) {
			for _, k := range slices.Sorted(maps.Keys(m)) {
				e := m[k]
				out = append(out, StoredToken{Workspace: ws, Server: name, Old: old, URL: k, ClientID: e.ClientID, Scopes: slices.Clone(e.Scopes), Expiry: e.Expiry, Refreshable: e.RefreshToken != "", Obtained: e.Obtained})
			}
		}
		add("", "", true, f.Servers)
		for _, n := range slices.Sorted(maps.Keys(f.SignIns)) {
			add("", n, true, f.SignIns[n])
		}
		for _, ws := range slices.Sorted(maps.Keys(f.Bound)) {
			for _, n := range slices.Sorted(maps.Keys(f.Bound[ws])) {
				add(ws, n, false, f.Bound[ws][n])
			}
		}
		return false
	})
	return out, err
}

// DeleteToken removes the stored sign-in that workspace's server name at
// serverURL uses from file (DefaultTokenFile when empty), and the one an
// older ipybox stored for that name and URL, and reports whether there was
// one; an empty name removes a sign-in of an older ipybox stored by URL
// alone. The authorization server is not told: its tokens stay valid until
// they expire or are revoked there.
func DeleteToken(file, workspace, name, serverURL string) (bool, error) {
	s, err := openStore(file, workspace)
	if err != nil {
		return false, err
	}
	var had bool
	err = s.locked(true, func(f *tokenFile) bool {
		k := tokenKey(serverURL)
		if name == "" {
			_, had = f.Servers[k]
			delete(f.Servers, k)
			return had
		}
		_, had = f.SignIns[name][k]
		delete(f.SignIns[name], k)
		if len(f.SignIns[name]) == 0 {
			delete(f.SignIns, name)
		}
		return had
	})
	if err != nil || name == "" {
		return had, err
	}
	bound, err := s.remove(name, serverURL)
	return had || bound, err
}

// SignInWorkspace is the form of a workspace folder that binds sign-ins
// (Options.Workspace, StoredToken.Workspace): absolute and clean. Links
// are not followed: a link in the path that kernel code can change must
// not move a workspace's sign-ins to another; the same folder reached by
// another path signs in anew.
func SignInWorkspace(dir string) (string, error) {
	if dir == "" {
		return "", nil
	}
	return filepath.Abs(dir)
}

func openStore(file, workspace string) (tokenStore, error) {
	if file == "" {
		var err error
		if file, err = DefaultTokenFile(); err != nil {
			return tokenStore{}, err
		}
	}
	ws, err := SignInWorkspace(workspace)
	if err != nil {
		return tokenStore{}, err
	}
	return tokenStore{path: file, workspace: ws}, nil
}
